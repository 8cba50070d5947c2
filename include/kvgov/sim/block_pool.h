#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
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
  size_t prompt_blocks = 0;     // full blocks of the prompt
  size_t hit_blocks = 0;        // leading blocks found cached
  int64_t computed_tokens = 0;  // tokens prefilled: all but the hit blocks' tokens
  // The events the engine publishes for it, in order: a BlockRemoved for
  // what was evicted to make room (if anything), then a BlockStored for the
  // newly cached blocks (if any).
  std::vector<EngineEvent> events;
};

/// The blocks one pin holds, in chain order: their hashes and their block
/// ids (slots in [0, capacity_blocks), as vLLM's block ids are).
struct PinnedBlocks {
  std::vector<EngineHash> hashes;
  std::vector<uint32_t> block_ids;
};

/// The chain of hashes of the prompt's full blocks, each over its parent's
/// hash and its tokens, the first seeded by `seed` and keyed by the cache
/// salt (as vLLM chains them; docs/formats/simulator.md).
std::vector<EngineHash> ChainHashes(std::span<const int64_t> tokens, int64_t block_size,
                                    uint64_t seed, std::string_view cache_salt);

/// Every prompt's blocks the fleet has been asked to prefill so far, with no
/// eviction: what a cache with room for everything would hold, and so the
/// most of a prompt any engine could hold. Not thread-safe.
class PromptHistory {
 public:
  explicit PromptHistory(int64_t block_size) : block_size_(block_size) {}
  /// Leading full blocks of the prompt that an earlier recorded prompt had;
  /// then records this one.
  size_t Record(std::span<const int64_t> tokens, std::string_view cache_salt);

 private:
  int64_t block_size_;
  std::unordered_set<EngineHash> seen_;
};

/// One engine's paged prefix cache, as vLLM's BlockPool behaves on the wire:
/// full blocks only, chained hashes under a per-engine seed, the cache salt
/// mixed into the first block, least-recently-used eviction. A request's
/// blocks are freed tail first, so a shared head outlives the tails that
/// extend it, as vLLM's free queue orders them. Running requests hold no
/// blocks (the simulator models prefill only), but a pin does: a prefill
/// engine holds a handed-over prompt's blocks until the decode engine has
/// pulled them (vLLM's delay-freed blocks). A pinned block is out of the
/// free queue, so eviction never takes it; when its last pin ends it
/// returns to the queue's recent end, still cached.
///
/// Not thread-safe: one owner drives it.
class BlockPool {
 public:
  explicit BlockPool(BlockPoolOptions options);

  const BlockPoolOptions& options() const { return options_; }
  /// Blocks cached, pinned or not.
  size_t size() const { return lru_.size() + held_.size(); }
  /// Blocks with at least one pin.
  size_t pinned_blocks() const { return held_.size(); }

  /// Leading full blocks of the prompt the pool holds, without touching
  /// recency (what an oracle may peek at).
  size_t CachedPrefix(std::span<const int64_t> tokens, std::string_view cache_salt) const;

  /// Prefills the prompt: counts the cached head, caches the rest (as much
  /// as fits: eviction takes the least recently used unpinned blocks and
  /// never a pinned one, so a pool full of pinned blocks caches nothing
  /// new), refreshes recency.
  PrefillOutcome Prefill(std::span<const int64_t> tokens, std::string_view cache_salt);

  /// Pins the prompt's leading cached full blocks (after a Prefill, every
  /// block it could cache) and returns them; empty when its first block is
  /// not cached. Pins count: a block pinned twice needs two Unpins.
  /// Publishes nothing, as vLLM's delay-free does not.
  PinnedBlocks Pin(std::span<const int64_t> tokens, std::string_view cache_salt);

  /// Ends one pin of each block: a block whose last pin ends stays cached
  /// and becomes evictable again (tail first into the recent end, as a
  /// request's blocks are freed). Publishes nothing. Hashes not cached or
  /// not pinned are skipped. REQUIRES: no Reset since the Pin (a Reset
  /// ends every pin, and the same blocks may be cached and pinned again).
  void Unpin(std::span<const EngineHash> hashes);

  /// Empties the pool, pins included (vLLM refuses a reset while blocks
  /// are held; the simulator clears them, so an invalidation also ends
  /// every pending handoff); returns the AllBlocksCleared event to publish.
  EngineEvent Reset();

 private:
  struct Block {
    std::list<EngineHash>::iterator position;  // in lru_, or in held_ while pinned
    uint32_t id = 0;
    uint32_t pins = 0;
  };

  // Makes an unpinned block the most recent; returns false (and leaves it
  // where it is) for a pinned one.
  bool Touch(Block& block);

  BlockPoolOptions options_;
  std::list<EngineHash> lru_;   // unpinned blocks; front: least recently used
  std::list<EngineHash> held_;  // pinned blocks, in no order that matters
  std::unordered_map<EngineHash, Block> blocks_;
  std::vector<uint32_t> free_ids_;  // ids of evicted blocks, reused first
  uint32_t next_id_ = 0;            // the next id never used
};

}  // namespace kvgov::sim
