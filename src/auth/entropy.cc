#include "kvgov/auth/entropy.h"

#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "kvgov/core/hex.h"

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
  std::array<char, 16> bytes;
  KVGOV_RETURN_IF_ERROR(FillRandom(bytes));
  return HexEncode(std::string_view(bytes.data(), bytes.size()));
}

}  // namespace kvgov::auth
