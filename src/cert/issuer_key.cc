#include "kvgov/cert/issuer_key.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "kvgov/core/digest.h"
#include "kvgov/core/hex.h"
#include "kvgov/core/secret_file_mode.h"

namespace kvgov::cert {
namespace {

constexpr size_t kSeedBytes = crypto_sign_SEEDBYTES;  // 32

std::string Hex(const unsigned char* bytes, size_t size) {
  return HexEncode(std::string_view(reinterpret_cast<const char*>(bytes), size));
}

Result<std::vector<unsigned char>> FromHex(std::string_view hex, size_t bytes,
                                           std::string_view what) {
  if (hex.size() != bytes * 2) {
    return Status::InvalidArgument(std::string(what) + ": want " + std::to_string(bytes * 2) +
                                   " hex digits, got " + std::to_string(hex.size()));
  }
  KVGOV_ASSIGN_OR_RETURN(std::string decoded, HexDecode(hex, what));
  return std::vector<unsigned char>(decoded.begin(), decoded.end());
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

Status ReadSeed(const std::string& path, unsigned char* seed) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(Errno("issuer key '" + path + "'"));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    ::close(fd);
    return Status::IOError(Errno("issuer key '" + path + "'"));
  }
  if (Status private_enough =
          CheckSecretFileMode("issuer key '" + path + "'", info.st_mode, info.st_uid);
      !private_enough.ok()) {
    ::close(fd);
    return private_enough;
  }
  unsigned char buffer[kSeedBytes + 1];
  ssize_t got = ::read(fd, buffer, sizeof(buffer));
  ::close(fd);
  if (got != static_cast<ssize_t>(kSeedBytes)) {
    sodium_memzero(buffer, sizeof(buffer));
    return Status::Corruption("issuer key '" + path + "': want exactly 32 bytes");
  }
  std::memcpy(seed, buffer, kSeedBytes);
  sodium_memzero(buffer, sizeof(buffer));
  return Status::Ok();
}

Status CreateSeed(const std::string& path, int fd, unsigned char* seed) {
  randombytes_buf(seed, kSeedBytes);
  const bool written =
      ::write(fd, seed, kSeedBytes) == static_cast<ssize_t>(kSeedBytes) && ::fsync(fd) == 0;
  ::close(fd);
  if (!written) {
    ::unlink(path.c_str());
    return Status::IOError(Errno("issuer key '" + path + "': write"));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<IssuerKey>> IssuerKey::LoadOrCreate(const std::string& path) {
  if (sodium_init() < 0) return Status::Internal("libsodium failed to initialise");
  unsigned char seed[kSeedBytes];
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  Status loaded = fd >= 0           ? CreateSeed(path, fd, seed)
                  : errno == EEXIST ? ReadSeed(path, seed)
                                    : Status::IOError(Errno("issuer key '" + path + "': create"));
  if (!loaded.ok()) return loaded;

  std::unique_ptr<IssuerKey> key(new IssuerKey());
  unsigned char public_key[crypto_sign_PUBLICKEYBYTES];
  crypto_sign_seed_keypair(public_key, key->secret_key_.data(), seed);
  sodium_memzero(seed, sizeof(seed));
  key->public_key_hex_ = Hex(public_key, sizeof(public_key));
  key->key_id_ =
      Sha256Hex(std::string_view(reinterpret_cast<const char*>(public_key), sizeof(public_key)))
          .substr(0, 16);
  return key;
}

std::string IssuerKey::Sign(std::string_view message) const {
  unsigned char signature[crypto_sign_BYTES];
  crypto_sign_detached(signature, nullptr, reinterpret_cast<const unsigned char*>(message.data()),
                       message.size(), secret_key_.data());
  return Hex(signature, sizeof(signature));
}

Status VerifySignature(std::string_view public_key_hex, std::string_view message,
                       std::string_view signature_hex) {
  if (sodium_init() < 0) return Status::Internal("libsodium failed to initialise");
  KVGOV_ASSIGN_OR_RETURN(std::vector<unsigned char> public_key,
                         FromHex(public_key_hex, crypto_sign_PUBLICKEYBYTES, "public key"));
  KVGOV_ASSIGN_OR_RETURN(std::vector<unsigned char> signature,
                         FromHex(signature_hex, crypto_sign_BYTES, "signature"));
  if (crypto_sign_verify_detached(signature.data(),
                                  reinterpret_cast<const unsigned char*>(message.data()),
                                  message.size(), public_key.data()) != 0) {
    return Status::PermissionDenied("signature does not verify under key " +
                                    std::string(public_key_hex.substr(0, 16)) + "...");
  }
  return Status::Ok();
}

}  // namespace kvgov::cert
