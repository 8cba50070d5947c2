#include "kvgov/index/block_key.h"

#include "kvgov/core/engine_events.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <array>
#include <bit>
#include <cstring>

namespace kvgov::index {
namespace {

void StoreBigEndian(unsigned char* out, uint64_t value) {
  if constexpr (std::endian::native == std::endian::little) value = __builtin_bswap64(value);
  std::memcpy(out, &value, sizeof(value));
}

// Lays out length-framed fields in one buffer and hashes it with one-shot
// XXH3, so no two field lists produce the same bytes
// (docs/formats/block-keys.md). Only the chain root uses it; blocks go
// through BlockFrame.
class FramedHash {
 public:
  void U64(uint64_t value) {
    unsigned char bytes[8];
    StoreBigEndian(bytes, value);
    bytes_.append(reinterpret_cast<const char*>(bytes), sizeof(bytes));
  }
  void Bytes(std::string_view text) {
    U64(text.size());
    bytes_.append(text);
  }
  uint64_t Digest(uint64_t seed) const {
    return XXH3_64bits_withSeed(bytes_.data(), bytes_.size(), seed);
  }

 private:
  std::string bytes_;
};

// The bytes a block key hashes, u64(parent) || frame(extra_key) || u64(n) ||
// u64(tokens)..., kept from block to block of a chain: the extra key's
// frame and the count stay put while blocks share them, so a block rewrites
// only its parent and its tokens. Hashing a prompt is the floor of every
// route (docs/benchmarks.md), so a block costs no allocation and no
// per-byte shifting. A block of 16 tokens with a short extra key fits the
// inline buffer.
class BlockFrame {
 public:
  BlockKey Key(uint64_t seed, BlockKey parent, std::span<const int64_t> tokens,
               std::string_view extra_key) {
    if (!laid_out_ || tokens.size() != count_ || extra_key != extra_key_) {
      LayOut(extra_key, tokens.size());
    }
    unsigned char* out = data();
    StoreBigEndian(out, parent);
    unsigned char* token_bytes = out + tokens_at_;
    for (size_t i = 0; i < tokens.size(); ++i) {
      StoreBigEndian(token_bytes + 8 * i, static_cast<uint64_t>(tokens[i]));
    }
    return XXH3_64bits_withSeed(out, size_, seed);
  }

 private:
  void LayOut(std::string_view extra_key, size_t count) {
    size_ = 8 + 8 + extra_key.size() + 8 + 8 * count;
    if (size_ > inline_.size()) heap_.resize(size_);
    unsigned char* out = data();
    StoreBigEndian(out + 8, extra_key.size());
    // An empty view may hold a null pointer, which memcpy must not see.
    if (!extra_key.empty()) std::memcpy(out + 16, extra_key.data(), extra_key.size());
    StoreBigEndian(out + 16 + extra_key.size(), count);
    tokens_at_ = 24 + extra_key.size();
    extra_key_ = extra_key;  // the caller's bytes outlive the chain it hashes
    count_ = count;
    laid_out_ = true;
  }
  unsigned char* data() { return size_ > inline_.size() ? heap_.data() : inline_.data(); }

  std::array<unsigned char, 256> inline_;
  std::vector<unsigned char> heap_;
  size_t size_ = 0;
  size_t tokens_at_ = 0;
  size_t count_ = 0;
  std::string_view extra_key_;
  bool laid_out_ = false;
};

// Keys of every full block; `extra_key(i)` is block i's extra key, a view
// that stays valid for the whole walk.
template <typename ExtraKey>
std::vector<BlockKey> ChainKeys(uint64_t seed, BlockKey root, std::span<const int64_t> tokens,
                                int64_t block_size, const ExtraKey& extra_key) {
  std::vector<BlockKey> keys;
  if (block_size <= 0) return keys;
  const size_t size = static_cast<size_t>(block_size);
  keys.reserve(tokens.size() / size);
  BlockFrame frame;
  BlockKey parent = root;
  for (size_t block = 0; (block + 1) * size <= tokens.size(); ++block) {
    parent = frame.Key(seed, parent, tokens.subspan(block * size, size), extra_key(block));
    keys.push_back(parent);
  }
  return keys;
}

}  // namespace

BlockKey BlockKeyHasher::Root(const ChainNamespace& ns) const {
  FramedHash hash;
  hash.Bytes("kvgov.chain_root.v1");
  hash.Bytes(ns.model);
  hash.Bytes(ns.lora_name);
  hash.U64(static_cast<uint64_t>(ns.group_idx));
  return hash.Digest(seed_);
}

BlockKey BlockKeyHasher::Next(BlockKey parent, std::span<const int64_t> block_tokens,
                              std::string_view extra_key) const {
  BlockFrame frame;
  return frame.Key(seed_, parent, block_tokens, extra_key);
}

std::vector<BlockKey> BlockKeyHasher::Chain(const ChainNamespace& ns,
                                            std::span<const int64_t> tokens, int64_t block_size,
                                            std::span<const std::string> extra_keys) const {
  return ChainKeys(seed_, Root(ns), tokens, block_size, [extra_keys](size_t block) {
    return block < extra_keys.size() ? std::string_view(extra_keys[block]) : std::string_view();
  });
}

std::vector<BlockKey> RequestChain(const BlockKeyHasher& hasher, const ChainNamespace& ns,
                                   std::string_view cache_salt, std::span<const int64_t> tokens,
                                   int64_t block_size) {
  const std::string first = FirstBlockExtraKey(ns.lora_name, cache_salt);
  const std::string rest = FirstBlockExtraKey(ns.lora_name, "");
  return ChainKeys(
      hasher.seed(), hasher.Root(ns), tokens, block_size,
      [&first, &rest](size_t block) -> std::string_view { return block == 0 ? first : rest; });
}

BlockKey SaltlessRoot(const BlockKeyHasher& hasher, const ChainNamespace& ns,
                      std::span<const int64_t> first_block_tokens) {
  return hasher.Next(hasher.Root(ns), first_block_tokens, FirstBlockExtraKey(ns.lora_name, ""));
}

}  // namespace kvgov::index
