#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/engine_events.h"

namespace kvgov::index {

/// kvgov's own identity for one KV block: a chained hash of the block's
/// tokens and extra keys, rooted in the chain's namespace. It does not
/// depend on any engine's hash seed, so the same prefix has the same keys
/// on every worker, and a route request can compute them from token ids.
using BlockKey = uint64_t;

/// What keeps two chains with the same tokens apart: the model, the LoRA
/// adapter and the KV-cache group. Tenants are kept apart by the first
/// block's extra key (cache_salt), which enters that block's key.
struct ChainNamespace {
  std::string model;
  std::string lora_name;
  int64_t group_idx = 0;
};

/// Computes block keys with seeded XXH3-64 over length-framed inputs
/// (format: docs/formats/block-keys.md). Immutable; thread-safe.
class BlockKeyHasher {
 public:
  static constexpr uint64_t kDefaultSeed = 0x6b76676f76000001;  // "kvgov" v1

  explicit BlockKeyHasher(uint64_t seed = kDefaultSeed) : seed_(seed) {}

  uint64_t seed() const { return seed_; }

  /// The parent of a chain's first block.
  BlockKey Root(const ChainNamespace& ns) const;

  /// The key of a block given its parent's key.
  BlockKey Next(BlockKey parent, std::span<const int64_t> block_tokens,
                std::string_view extra_key) const;

  /// Keys of every full block of `tokens` (a trailing partial block has no
  /// key). `extra_keys[i]`, when present, is block i's extra key.
  std::vector<BlockKey> Chain(const ChainNamespace& ns, std::span<const int64_t> tokens,
                              int64_t block_size,
                              std::span<const std::string> extra_keys = {}) const;

 private:
  uint64_t seed_;
};

/// The keys of a request's full blocks as an engine would publish them:
/// every block's extra key carries the LoRA name, and the first block's also
/// the cache salt (vLLM's order). The salt must come from the trusted side.
std::vector<BlockKey> RequestChain(const BlockKeyHasher& hasher, const ChainNamespace& ns,
                                   std::string_view cache_salt, std::span<const int64_t> tokens,
                                   int64_t block_size);

/// The key a chain's first block gets when hashed without a cache salt (its
/// extra key the LoRA name's alone): what the index keys a salted request's
/// first block as on an engine whose events drop the salt (ADR 0019).
BlockKey SaltlessRoot(const BlockKeyHasher& hasher, const ChainNamespace& ns,
                      std::span<const int64_t> first_block_tokens);

}  // namespace kvgov::index
