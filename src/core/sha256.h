#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvgov::core_internal {

/// Incremental SHA-256 (FIPS 180-4). kvgov_core may link nothing but the
/// standard library, so it carries its own; digests of metadata are small
/// and this is not a hot path. Not thread-safe; one instance per digest.
class Sha256 {
 public:
  Sha256();
  void Update(std::string_view bytes);
  std::array<uint8_t, 32> Finish();

 private:
  void Compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

}  // namespace kvgov::core_internal
