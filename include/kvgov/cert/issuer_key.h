#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kvgov/core/status.h"

namespace kvgov::cert {

/// kvgov's Ed25519 issuer key: it signs deletion certificates. The 32-byte
/// seed lives in one file (mode 0600), created on first start and reused.
/// Immutable after Load; Sign and the accessors are thread-safe.
class IssuerKey {
 public:
  /// Reads the seed at `path`, or creates it from the kernel's random source
  /// when the file does not exist (exclusively, fsynced, mode 0600).
  /// Returns IOError for a file that cannot be read or created, Corruption
  /// when it does not hold exactly 32 bytes, PermissionDenied when group or
  /// others can read it. The seed is never logged.
  static Result<std::unique_ptr<IssuerKey>> LoadOrCreate(const std::string& path);

  /// The public key, 64 lowercase hex digits.
  const std::string& public_key_hex() const { return public_key_hex_; }
  /// The key id: the first 16 hex digits of SHA-256 of the public key.
  const std::string& key_id() const { return key_id_; }

  /// The Ed25519 signature of `message`, 128 lowercase hex digits.
  std::string Sign(std::string_view message) const;

 private:
  IssuerKey() = default;

  std::array<unsigned char, 64> secret_key_{};  // libsodium's seed || public key
  std::string public_key_hex_;
  std::string key_id_;
};

/// Checks an Ed25519 signature (hex) over `message` under a public key
/// (hex). InvalidArgument for malformed hex or lengths; PermissionDenied
/// when the signature does not verify.
Status VerifySignature(std::string_view public_key_hex, std::string_view message,
                       std::string_view signature_hex);

}  // namespace kvgov::cert
