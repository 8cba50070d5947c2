#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvgov/core/engine_events.h"

namespace kvgov::sim {

struct BlockPoolOptions {
  size_t capacity_blocks = 4096;
  int64_t block_size = 16;
  // The engine's hash seed, as vLLM's NONE_HASH without PYTHONHASHSEED: each
  // engine hashes the same tokens differently, so kvgov cannot match blocks
  // across engines by their hashes and must key them from token ids.
  uint64_t hash_seed = 0;
  std::string medium = "GPU";
};

/// What one prefill did to the pool.
struct PrefillOutcome {
  size_t prompt_blocks = 0;  // full blocks of the prompt
  size_t hit_blocks = 0;     // leading blocks found cached
  int64_t computed_tokens = 0;  // tokens prefilled: all but the hit blocks' tokens
  // The events the engine publishes for it, in order: a BlockRemoved for
  // what was evicted to make room (if anything), then a BlockStored for the
  // newly cached blocks (if any).
  std::vector<EngineEvent> events;
};

/// One engine's paged prefix cache, as vLLM's BlockPool behaves on the wire:
/// full blocks only, chained hashes under a per-engine seed, the cache salt
/// mixed into the first block, least-recently-used eviction. A request's
/// blocks are freed tail first, so a shared head outlives the tails that
/// extend it, as vLLM's free queue orders them. Blocks are never pinned by
/// running requests (the simulator models prefill only).
///
/// Not thread-safe: one owner drives it.
class BlockPool {
 public:
  explicit BlockPool(BlockPoolOptions options);

  const BlockPoolOptions& options() const { return options_; }
  size_t size() const { return lru_.size(); }

  /// Leading full blocks of the prompt the pool holds, without touching
  /// recency (what an oracle may peek at).
  size_t CachedPrefix(std::span<const int64_t> tokens, std::string_view cache_salt) const;

  /// Prefills the prompt: counts the cached head, caches the rest (as much
  /// as fits, evicting the least recently used blocks), refreshes recency.
  PrefillOutcome Prefill(std::span<const int64_t> tokens, std::string_view cache_salt);

  /// Empties the pool; returns the AllBlocksCleared event to publish.
  EngineEvent Reset();

 private:
  std::vector<EngineHash> ChainHashes(std::span<const int64_t> tokens,
                                      std::string_view cache_salt) const;

  BlockPoolOptions options_;
  std::list<EngineHash> lru_;  // front: least recently used
  std::unordered_map<EngineHash, std::list<EngineHash>::iterator> blocks_;
};

}  // namespace kvgov::sim
