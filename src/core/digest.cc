#include "kvgov/core/digest.h"

#include <algorithm>
#include <array>

#include "core/sha256.h"
#include "kvgov/core/hex.h"

namespace kvgov {
namespace {

using core_internal::Sha256;

std::string Hex(const std::array<uint8_t, 32>& digest) {
  return HexEncode(std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
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

std::string HmacSha256Hex(std::string_view key, std::string_view message) {
  constexpr size_t kBlock = 64;
  std::array<uint8_t, kBlock> block_key{};
  if (key.size() > kBlock) {
    Sha256 hashed;
    hashed.Update(key);
    std::array<uint8_t, 32> digest = hashed.Finish();
    std::copy(digest.begin(), digest.end(), block_key.begin());
  } else {
    std::copy(key.begin(), key.end(), block_key.begin());
  }
  std::array<char, kBlock> inner_pad;
  std::array<char, kBlock> outer_pad;
  for (size_t i = 0; i < kBlock; ++i) {
    inner_pad[i] = static_cast<char>(block_key[i] ^ 0x36);
    outer_pad[i] = static_cast<char>(block_key[i] ^ 0x5c);
  }
  Sha256 inner;
  inner.Update(std::string_view(inner_pad.data(), kBlock));
  inner.Update(message);
  std::array<uint8_t, 32> inner_digest = inner.Finish();
  Sha256 outer;
  outer.Update(std::string_view(outer_pad.data(), kBlock));
  outer.Update(std::string_view(reinterpret_cast<const char*>(inner_digest.data()), 32));
  return Hex(outer.Finish());
}

}  // namespace kvgov
