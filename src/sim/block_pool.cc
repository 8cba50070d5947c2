#include "kvgov/sim/block_pool.h"

#include <algorithm>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvgov/index/block_key.h"

namespace kvgov::sim {

BlockPool::BlockPool(BlockPoolOptions options) : options_(std::move(options)) {
  blocks_.reserve(options_.capacity_blocks);
}

std::vector<EngineHash> BlockPool::ChainHashes(std::span<const int64_t> tokens,
                                               std::string_view cache_salt) const {
  const size_t block_size = static_cast<size_t>(options_.block_size);
  const size_t full_blocks = tokens.size() / block_size;
  std::vector<EngineHash> hashes;
  hashes.reserve(full_blocks);
  uint64_t parent = options_.hash_seed;
  for (size_t i = 0; i < full_blocks; ++i) {
    XXH3_state_t state;
    XXH3_64bits_reset_withSeed(&state, parent);
    XXH3_64bits_update(&state, tokens.data() + i * block_size, block_size * sizeof(int64_t));
    if (i == 0 && !cache_salt.empty()) {
      // Length-framed so a salt can never pose as tokens.
      const uint64_t salt_size = cache_salt.size();
      XXH3_64bits_update(&state, &salt_size, sizeof(salt_size));
      XXH3_64bits_update(&state, cache_salt.data(), cache_salt.size());
    }
    parent = XXH3_64bits_digest(&state);
    hashes.push_back(parent);
  }
  return hashes;
}

size_t BlockPool::CachedPrefix(std::span<const int64_t> tokens,
                               std::string_view cache_salt) const {
  const std::vector<EngineHash> hashes = ChainHashes(tokens, cache_salt);
  size_t cached = 0;
  while (cached < hashes.size() && blocks_.contains(hashes[cached])) ++cached;
  return cached;
}

PrefillOutcome BlockPool::Prefill(std::span<const int64_t> tokens, std::string_view cache_salt) {
  const std::vector<EngineHash> hashes = ChainHashes(tokens, cache_salt);
  PrefillOutcome outcome;
  outcome.prompt_blocks = hashes.size();
  while (outcome.hit_blocks < hashes.size() && blocks_.contains(hashes[outcome.hit_blocks])) {
    ++outcome.hit_blocks;
  }
  const int64_t hit_tokens = static_cast<int64_t>(outcome.hit_blocks) * options_.block_size;
  outcome.computed_tokens = static_cast<int64_t>(tokens.size()) - hit_tokens;

  // The hit head becomes recent before anything is evicted, so making room
  // for the tail never evicts the head it extends.
  for (size_t i = 0; i < outcome.hit_blocks; ++i) {
    lru_.splice(lru_.end(), lru_, blocks_.at(hashes[i]));
  }
  const size_t capacity = options_.capacity_blocks;
  const size_t room = capacity > outcome.hit_blocks ? capacity - outcome.hit_blocks : 0;
  const size_t new_blocks = std::min(hashes.size() - outcome.hit_blocks, room);

  BlockRemoved removed{.block_hashes = {}, .medium = options_.medium, .group_idx = 0};
  for (size_t i = 0; i < new_blocks; ++i) {
    if (lru_.size() >= capacity) {
      removed.block_hashes.push_back(lru_.front());
      blocks_.erase(lru_.front());
      lru_.pop_front();
    }
    const EngineHash hash = hashes[outcome.hit_blocks + i];
    blocks_.emplace(hash, lru_.insert(lru_.end(), hash));
  }
  // Tail first into the recent end: the head is the last to go.
  const size_t cached = outcome.hit_blocks + new_blocks;
  for (size_t i = cached; i-- > 0;) lru_.splice(lru_.end(), lru_, blocks_.at(hashes[i]));

  if (!removed.block_hashes.empty()) outcome.events.emplace_back(std::move(removed));
  if (new_blocks > 0) {
    const size_t first = outcome.hit_blocks;
    const size_t block_size = static_cast<size_t>(options_.block_size);
    BlockStored stored;
    stored.block_hashes.assign(hashes.begin() + static_cast<std::ptrdiff_t>(first),
                               hashes.begin() + static_cast<std::ptrdiff_t>(cached));
    if (first > 0) stored.parent_block_hash = hashes[first - 1];
    stored.token_ids.assign(tokens.begin() + static_cast<std::ptrdiff_t>(first * block_size),
                            tokens.begin() + static_cast<std::ptrdiff_t>(cached * block_size));
    stored.block_size = options_.block_size;
    stored.medium = options_.medium;
    if (first == 0 && !cache_salt.empty()) {
      stored.extra_keys.assign(new_blocks, "");
      stored.extra_keys[0] = FirstBlockExtraKey("", cache_salt);
    }
    outcome.events.emplace_back(std::move(stored));
  }
  return outcome;
}

EngineEvent BlockPool::Reset() {
  lru_.clear();
  blocks_.clear();
  return AllBlocksCleared{};
}

}  // namespace kvgov::sim
