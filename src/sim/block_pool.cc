#include "kvgov/sim/block_pool.h"

#include <algorithm>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvgov/index/block_key.h"

namespace kvgov::sim {

BlockPool::BlockPool(BlockPoolOptions options) : options_(std::move(options)) {
  blocks_.reserve(options_.capacity_blocks);
}

std::vector<EngineHash> ChainHashes(std::span<const int64_t> tokens, int64_t block_size,
                                    uint64_t seed, std::string_view cache_salt) {
  const size_t block = static_cast<size_t>(block_size);
  const size_t full_blocks = tokens.size() / block;
  std::vector<EngineHash> hashes;
  hashes.reserve(full_blocks);
  uint64_t parent = seed;
  for (size_t i = 0; i < full_blocks; ++i) {
    XXH3_state_t state;
    XXH3_64bits_reset_withSeed(&state, parent);
    XXH3_64bits_update(&state, tokens.data() + i * block, block * sizeof(int64_t));
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

size_t PromptHistory::Record(std::span<const int64_t> tokens, std::string_view cache_salt) {
  const std::vector<EngineHash> hashes = ChainHashes(tokens, block_size_, /*seed=*/0, cache_salt);
  size_t seen = 0;
  while (seen < hashes.size() && seen_.contains(hashes[seen])) ++seen;
  seen_.insert(hashes.begin() + static_cast<std::ptrdiff_t>(seen), hashes.end());
  return seen;
}

size_t BlockPool::CachedPrefix(std::span<const int64_t> tokens, std::string_view cache_salt) const {
  const std::vector<EngineHash> hashes =
      ChainHashes(tokens, options_.block_size, options_.hash_seed, cache_salt);
  size_t cached = 0;
  while (cached < hashes.size() && blocks_.contains(hashes[cached])) ++cached;
  return cached;
}

bool BlockPool::Touch(Block& block) {
  if (block.pins > 0) return false;
  lru_.splice(lru_.end(), lru_, block.position);
  return true;
}

PrefillOutcome BlockPool::Prefill(std::span<const int64_t> tokens, std::string_view cache_salt) {
  const std::vector<EngineHash> hashes =
      ChainHashes(tokens, options_.block_size, options_.hash_seed, cache_salt);
  PrefillOutcome outcome;
  outcome.prompt_blocks = hashes.size();
  while (outcome.hit_blocks < hashes.size() && blocks_.contains(hashes[outcome.hit_blocks])) {
    ++outcome.hit_blocks;
  }
  const int64_t hit_tokens = static_cast<int64_t>(outcome.hit_blocks) * options_.block_size;
  outcome.computed_tokens = static_cast<int64_t>(tokens.size()) - hit_tokens;

  // The hit head becomes recent before anything is evicted, so making room
  // for the tail never evicts the head it extends. Pinned blocks are not
  // evictable at all: the room is what neither they nor the head take.
  size_t hit_unpinned = 0;
  for (size_t i = 0; i < outcome.hit_blocks; ++i) {
    if (Touch(blocks_.at(hashes[i]))) ++hit_unpinned;
  }
  const size_t capacity = options_.capacity_blocks;
  const size_t kept = held_.size() + hit_unpinned;
  const size_t room = capacity > kept ? capacity - kept : 0;
  const size_t new_blocks = std::min(hashes.size() - outcome.hit_blocks, room);

  BlockRemoved removed{.block_hashes = {}, .medium = options_.medium, .group_idx = 0};
  for (size_t i = 0; i < new_blocks; ++i) {
    if (size() >= capacity) {
      // The room above leaves an unpinned block outside the head here.
      const EngineHash victim = lru_.front();
      removed.block_hashes.push_back(victim);
      free_ids_.push_back(blocks_.at(victim).id);
      blocks_.erase(victim);
      lru_.pop_front();
    }
    const EngineHash hash = hashes[outcome.hit_blocks + i];
    uint32_t id = next_id_;
    if (free_ids_.empty()) {
      ++next_id_;
    } else {
      id = free_ids_.back();
      free_ids_.pop_back();
    }
    blocks_.emplace(hash, Block{.position = lru_.insert(lru_.end(), hash), .id = id, .pins = 0});
  }
  // Tail first into the recent end: the head is the last to go.
  const size_t cached = outcome.hit_blocks + new_blocks;
  for (size_t i = cached; i-- > 0;) Touch(blocks_.at(hashes[i]));

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

PinnedBlocks BlockPool::Pin(std::span<const int64_t> tokens, std::string_view cache_salt) {
  const std::vector<EngineHash> hashes =
      ChainHashes(tokens, options_.block_size, options_.hash_seed, cache_salt);
  PinnedBlocks pinned;
  for (const EngineHash hash : hashes) {
    const auto block = blocks_.find(hash);
    if (block == blocks_.end()) break;
    if (block->second.pins++ == 0) held_.splice(held_.end(), lru_, block->second.position);
    pinned.hashes.push_back(hash);
    pinned.block_ids.push_back(block->second.id);
  }
  return pinned;
}

void BlockPool::Unpin(std::span<const EngineHash> hashes) {
  // Tail first into the recent end, so the head outlives the tail again.
  for (size_t i = hashes.size(); i-- > 0;) {
    const auto block = blocks_.find(hashes[i]);
    if (block == blocks_.end() || block->second.pins == 0) continue;
    if (--block->second.pins == 0) lru_.splice(lru_.end(), held_, block->second.position);
  }
}

EngineEvent BlockPool::Reset() {
  lru_.clear();
  held_.clear();
  blocks_.clear();
  free_ids_.clear();
  next_id_ = 0;
  return AllBlocksCleared{};
}

}  // namespace kvgov::sim
