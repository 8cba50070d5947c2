#include "kvgov/index/block_key.h"

#include "kvgov/core/engine_events.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <array>
#include <cstring>


namespace kvgov::index {
namespace {

// Lays out length-framed fields in one buffer and hashes it with one-shot
// XXH3, so no two field lists produce the same bytes
// (docs/formats/block-keys.md). A block of 16 tokens is under 200 bytes, so
// the inline buffer covers every ordinary block without allocating.
class FramedHash {
 public:
  void U64(uint64_t value) {
    unsigned char* out = Grow(8);
    for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(value >> (56 - 8 * i));
  }
  void Bytes(std::string_view text) {
    U64(text.size());
    // An empty view may hold a null pointer, which memcpy must not see.
    if (!text.empty()) std::memcpy(Grow(text.size()), text.data(), text.size());
  }
  uint64_t Digest(uint64_t seed) const {
    const unsigned char* data = heap_.empty() ? inline_.data() : heap_.data();
    return XXH3_64bits_withSeed(data, size_, seed);
  }

 private:
  unsigned char* Grow(size_t n) {
    if (heap_.empty() && size_ + n <= inline_.size()) {
      unsigned char* out = inline_.data() + size_;
      size_ += n;
      return out;
    }
    if (heap_.empty()) heap_.assign(inline_.begin(), inline_.begin() + static_cast<long>(size_));
    heap_.resize(size_ + n);
    unsigned char* out = heap_.data() + size_;
    size_ += n;
    return out;
  }

  std::array<unsigned char, 512> inline_;
  std::vector<unsigned char> heap_;
  size_t size_ = 0;
};


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
  FramedHash hash;
  hash.U64(parent);
  hash.Bytes(extra_key);
  hash.U64(block_tokens.size());
  for (int64_t token : block_tokens) hash.U64(static_cast<uint64_t>(token));
  return hash.Digest(seed_);
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

BlockKey SaltlessRoot(const BlockKeyHasher& hasher, const ChainNamespace& ns,
                      std::span<const int64_t> first_block_tokens) {
  return hasher.Next(hasher.Root(ns), first_block_tokens, FirstBlockExtraKey(ns.lora_name, ""));
}

}  // namespace kvgov::index
