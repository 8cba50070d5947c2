#include "kvgov/index/block_key.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <array>

namespace kvgov::index {
namespace {

// Streams length-framed fields into one XXH3 state so no two field lists
// produce the same byte stream (docs/formats/block-keys.md).
class FramedHash {
 public:
  explicit FramedHash(uint64_t seed) { XXH3_64bits_reset_withSeed(&state_, seed); }

  void U64(uint64_t value) {
    std::array<unsigned char, 8> bytes;
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(value >> (56 - 8 * i));
    XXH3_64bits_update(&state_, bytes.data(), bytes.size());
  }
  void Bytes(std::string_view text) {
    U64(text.size());
    XXH3_64bits_update(&state_, text.data(), text.size());
  }
  uint64_t Digest() { return XXH3_64bits_digest(&state_); }

 private:
  XXH3_state_t state_;
};

void AppendJsonString(std::string& out, std::string_view text) {
  out.push_back('"');
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out.push_back(kHex[(c >> 4) & 0xf]);
          out.push_back(kHex[c & 0xf]);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

}  // namespace

BlockKey BlockKeyHasher::Root(const ChainNamespace& ns) const {
  FramedHash hash(seed_);
  hash.Bytes("kvgov.chain_root.v1");
  hash.Bytes(ns.model);
  hash.Bytes(ns.lora_name);
  hash.U64(static_cast<uint64_t>(ns.group_idx));
  return hash.Digest();
}

BlockKey BlockKeyHasher::Next(BlockKey parent, std::span<const int64_t> block_tokens,
                              std::string_view extra_key) const {
  FramedHash hash(seed_);
  hash.U64(parent);
  hash.Bytes(extra_key);
  hash.U64(block_tokens.size());
  for (int64_t token : block_tokens) hash.U64(static_cast<uint64_t>(token));
  return hash.Digest();
}

std::vector<BlockKey> BlockKeyHasher::Chain(const ChainNamespace& ns,
                                            std::span<const int64_t> tokens, int64_t block_size,
                                            std::span<const std::string> extra_keys) const {
  std::vector<BlockKey> keys;
  if (block_size <= 0) return keys;
  const size_t size = static_cast<size_t>(block_size);
  keys.reserve(tokens.size() / size);
  BlockKey parent = Root(ns);
  for (size_t block = 0; (block + 1) * size <= tokens.size(); ++block) {
    std::string_view extra = block < extra_keys.size() ? extra_keys[block] : std::string_view();
    parent = Next(parent, tokens.subspan(block * size, size), extra);
    keys.push_back(parent);
  }
  return keys;
}

std::vector<BlockKey> RequestChain(const BlockKeyHasher& hasher, const ChainNamespace& ns,
                                   std::string_view cache_salt, std::span<const int64_t> tokens,
                                   int64_t block_size) {
  if (block_size <= 0) return {};
  const size_t blocks = tokens.size() / static_cast<size_t>(block_size);
  std::vector<std::string> extra_keys(blocks, FirstBlockExtraKey(ns.lora_name, ""));
  if (blocks > 0) extra_keys[0] = FirstBlockExtraKey(ns.lora_name, cache_salt);
  return hasher.Chain(ns, tokens, block_size, extra_keys);
}

std::string FirstBlockExtraKey(std::string_view lora_name, std::string_view cache_salt) {
  if (lora_name.empty() && cache_salt.empty()) return "";
  std::string out = "[";
  if (!lora_name.empty()) AppendJsonString(out, lora_name);
  if (!cache_salt.empty()) {
    if (!lora_name.empty()) out += ",";
    AppendJsonString(out, cache_salt);
  }
  out += "]";
  return out;
}

}  // namespace kvgov::index
