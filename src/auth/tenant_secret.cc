#include "kvgov/auth/tenant_secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "kvgov/auth/entropy.h"
#include "kvgov/core/secret_file_mode.h"

namespace kvgov::auth {
namespace {

constexpr size_t kSecretBytes = 32;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

Result<std::string> ReadSecret(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(Errno("tenant secret '" + path + "'"));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    ::close(fd);
    return Status::IOError(Errno("tenant secret '" + path + "'"));
  }
  if (Status private_enough =
          CheckSecretFileMode("tenant secret '" + path + "'", info.st_mode, info.st_uid);
      !private_enough.ok()) {
    ::close(fd);
    return private_enough;
  }
  std::array<char, kSecretBytes + 1> buffer{};
  ssize_t got = ::read(fd, buffer.data(), buffer.size());
  ::close(fd);
  if (got < 0) return Status::IOError(Errno("tenant secret '" + path + "'"));
  if (static_cast<size_t>(got) != kSecretBytes) {
    return Status::Corruption(
        "tenant secret '" + path + "': want exactly 32 bytes, got " +
        (static_cast<size_t>(got) > kSecretBytes ? std::string("more") : std::to_string(got)));
  }
  return std::string(buffer.data(), kSecretBytes);
}

}  // namespace

Result<std::string> LoadOrCreateTenantSecret(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return ReadSecret(path);
    return Status::IOError(Errno("tenant secret '" + path + "': create"));
  }
  std::array<char, kSecretBytes> secret;
  if (Status filled = FillRandom(secret); !filled.ok()) {
    ::close(fd);
    ::unlink(path.c_str());
    return filled;
  }
  const bool written =
      ::write(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size()) &&
      ::fsync(fd) == 0;
  ::close(fd);
  if (!written) {
    ::unlink(path.c_str());
    return Status::IOError(Errno("tenant secret '" + path + "': write"));
  }
  return std::string(secret.data(), secret.size());
}

}  // namespace kvgov::auth
