#include "kvgov/core/digest.h"

#include <array>

#include "core/sha256.h"

namespace kvgov {
namespace {

using core_internal::Sha256;

std::string Hex(const std::array<uint8_t, 32>& digest) {
  static constexpr char kHexDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (uint8_t byte : digest) {
    out.push_back(kHexDigits[byte >> 4]);
    out.push_back(kHexDigits[byte & 0xf]);
  }
  return out;
}

void UpdateBigEndian64(Sha256& hash, uint64_t value) {
  std::array<char, 8> bytes;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(value >> (56 - 8 * i));
  hash.Update(std::string_view(bytes.data(), bytes.size()));
}

void UpdateFramed(Sha256& hash, std::string_view field) {
  UpdateBigEndian64(hash, field.size());
  hash.Update(field);
}

}  // namespace

std::string Sha256Hex(std::string_view bytes) {
  Sha256 hash;
  hash.Update(bytes);
  return Hex(hash.Finish());
}

std::string DigestFields(std::string_view domain, std::initializer_list<std::string_view> fields) {
  Sha256 hash;
  UpdateFramed(hash, domain);
  for (std::string_view field : fields) UpdateFramed(hash, field);
  return Hex(hash.Finish());
}

std::string DigestTokenIds(std::span<const int64_t> token_ids) {
  Sha256 hash;
  UpdateFramed(hash, "kvgov.token_ids.v1");
  UpdateBigEndian64(hash, token_ids.size());
  for (int64_t id : token_ids) UpdateBigEndian64(hash, static_cast<uint64_t>(id));
  return Hex(hash.Finish());
}

}  // namespace kvgov
