#include "kvgov/auth/entropy.h"

#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace kvgov::auth {

Status FillRandom(std::span<char> out) {
  size_t filled = 0;
  while (filled < out.size()) {
    ssize_t got = ::getrandom(out.data() + filled, out.size() - filled, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Status::IOError(std::string("getrandom: ") + std::strerror(errno));
    filled += static_cast<size_t>(got);
  }
  return Status::Ok();
}

Result<std::string> RandomHexId() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::array<char, 16> bytes;
  KVGOV_RETURN_IF_ERROR(FillRandom(bytes));
  std::string id;
  id.reserve(32);
  for (char byte : bytes) {
    const auto value = static_cast<unsigned char>(byte);
    id.push_back(kHex[value >> 4]);
    id.push_back(kHex[value & 0xf]);
  }
  return id;
}

}  // namespace kvgov::auth
