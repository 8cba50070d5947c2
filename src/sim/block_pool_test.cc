#include "kvgov/sim/block_pool.h"

#include <gtest/gtest.h>

#include <numeric>

#include "kvgov/index/block_key.h"

namespace kvgov::sim {
namespace {

std::vector<int64_t> Tokens(int64_t count, int64_t first = 0) {
  std::vector<int64_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

std::vector<int64_t> Concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

BlockPool Pool(size_t capacity, uint64_t seed = 7) {
  return BlockPool(BlockPoolOptions{
      .capacity_blocks = capacity, .block_size = 4, .hash_seed = seed, .medium = "GPU"});
}

TEST(BlockPoolTest, SecondPrefillOfTheSamePromptHitsEveryFullBlock) {
  BlockPool pool = Pool(64);
  const std::vector<int64_t> prompt = Tokens(18);  // 4 full blocks and 2 tokens
  PrefillOutcome first = pool.Prefill(prompt, "");
  EXPECT_EQ(first.prompt_blocks, 4u);
  EXPECT_EQ(first.hit_blocks, 0u);
  EXPECT_EQ(first.computed_tokens, 18);
  ASSERT_EQ(first.events.size(), 1u);
  const auto& stored = std::get<BlockStored>(first.events[0]);
  EXPECT_EQ(stored.block_hashes.size(), 4u);
  EXPECT_FALSE(stored.parent_block_hash.has_value());
  EXPECT_EQ(stored.token_ids, Tokens(16));  // the partial block is not cached
  EXPECT_EQ(stored.block_size, 4);
  EXPECT_EQ(stored.medium, "GPU");
  EXPECT_TRUE(stored.extra_keys.empty());

  PrefillOutcome second = pool.Prefill(prompt, "");
  EXPECT_EQ(second.hit_blocks, 4u);
  EXPECT_EQ(second.computed_tokens, 2);
  EXPECT_TRUE(second.events.empty());
  EXPECT_EQ(pool.size(), 4u);
}

TEST(BlockPoolTest, AnExtensionStoresOnlyTheNewBlocksUnderTheirParent) {
  BlockPool pool = Pool(64);
  const std::vector<int64_t> head = Tokens(8);
  const auto first = std::get<BlockStored>(pool.Prefill(head, "").events.at(0));
  PrefillOutcome extended = pool.Prefill(Concat(head, Tokens(8, 100)), "");
  EXPECT_EQ(extended.hit_blocks, 2u);
  ASSERT_EQ(extended.events.size(), 1u);
  const auto& stored = std::get<BlockStored>(extended.events[0]);
  EXPECT_EQ(stored.parent_block_hash, first.block_hashes.back());
  EXPECT_EQ(stored.token_ids, Tokens(8, 100));
}

TEST(BlockPoolTest, TheSaltSeparatesChainsAndTravelsInTheFirstBlocksExtraKey) {
  BlockPool pool = Pool(64);
  const std::vector<int64_t> prompt = Tokens(8);
  const auto salted = std::get<BlockStored>(pool.Prefill(prompt, "salt-a").events.at(0));
  ASSERT_EQ(salted.extra_keys.size(), 2u);
  EXPECT_EQ(salted.extra_keys[0], FirstBlockExtraKey("", "salt-a"));
  EXPECT_EQ(salted.extra_keys[1], "");
  EXPECT_EQ(pool.CachedPrefix(prompt, "salt-a"), 2u);
  EXPECT_EQ(pool.CachedPrefix(prompt, "salt-b"), 0u);
  EXPECT_EQ(pool.CachedPrefix(prompt, ""), 0u);
}

TEST(BlockPoolTest, EnginesHashTheSameTokensDifferently) {
  BlockPool a = Pool(64, 1);
  BlockPool b = Pool(64, 2);
  const auto stored_a = std::get<BlockStored>(a.Prefill(Tokens(8), "").events.at(0));
  const auto stored_b = std::get<BlockStored>(b.Prefill(Tokens(8), "").events.at(0));
  EXPECT_NE(stored_a.block_hashes, stored_b.block_hashes);
  EXPECT_EQ(stored_a.token_ids, stored_b.token_ids);
}

TEST(BlockPoolTest, EvictsLeastRecentlyUsedTailsFirst) {
  BlockPool pool = Pool(5);
  const std::vector<int64_t> x = Tokens(8, 0);
  const std::vector<int64_t> y = Tokens(8, 1000);
  const std::vector<int64_t> z = Tokens(8, 2000);
  const auto x_stored = std::get<BlockStored>(pool.Prefill(x, "").events.at(0));
  pool.Prefill(y, "");
  PrefillOutcome third = pool.Prefill(z, "");
  ASSERT_EQ(third.events.size(), 2u);
  const auto& removed = std::get<BlockRemoved>(third.events[0]);
  // One block had to go: x's tail, not the head it extends.
  EXPECT_EQ(removed.block_hashes, std::vector<EngineHash>{x_stored.block_hashes[1]});
  EXPECT_EQ(removed.medium, "GPU");
  EXPECT_TRUE(std::holds_alternative<BlockStored>(third.events[1]));
  EXPECT_EQ(pool.CachedPrefix(x, ""), 1u);
  EXPECT_EQ(pool.CachedPrefix(y, ""), 2u);
  EXPECT_EQ(pool.CachedPrefix(z, ""), 2u);
  EXPECT_EQ(pool.size(), 5u);
}

TEST(BlockPoolTest, AHitRefreshesRecency) {
  BlockPool pool = Pool(4);
  const std::vector<int64_t> x = Tokens(8, 0);
  const std::vector<int64_t> y = Tokens(8, 1000);
  pool.Prefill(x, "");
  pool.Prefill(y, "");
  pool.Prefill(x, "");  // x is now the most recent
  pool.Prefill(Tokens(8, 2000), "");
  EXPECT_EQ(pool.CachedPrefix(x, ""), 2u);
  EXPECT_EQ(pool.CachedPrefix(y, ""), 0u);
}

TEST(BlockPoolTest, APromptLongerThanThePoolCachesOnlyItsHead) {
  BlockPool pool = Pool(3);
  const std::vector<int64_t> prompt = Tokens(40);  // 10 blocks
  PrefillOutcome outcome = pool.Prefill(prompt, "");
  EXPECT_EQ(std::get<BlockStored>(outcome.events.at(0)).block_hashes.size(), 3u);
  EXPECT_EQ(pool.CachedPrefix(prompt, ""), 3u);
  EXPECT_EQ(pool.Prefill(prompt, "").hit_blocks, 3u);
  EXPECT_EQ(pool.size(), 3u);
}

TEST(BlockPoolTest, ResetEmptiesThePool) {
  BlockPool pool = Pool(16);
  pool.Prefill(Tokens(16), "");
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(pool.Reset()));
  EXPECT_EQ(pool.size(), 0u);
  EXPECT_EQ(pool.Prefill(Tokens(16), "").hit_blocks, 0u);
}

TEST(BlockPoolTest, PinnedBlocksSurviveEvictionPressure) {
  BlockPool pool = Pool(4);
  const std::vector<int64_t> x = Tokens(8, 0);
  const auto x_stored = std::get<BlockStored>(pool.Prefill(x, "salt").events.at(0));
  const PinnedBlocks pin = pool.Pin(x, "salt");
  EXPECT_EQ(pin.hashes, x_stored.block_hashes);
  ASSERT_EQ(pin.block_ids.size(), 2u);
  EXPECT_EQ(pool.pinned_blocks(), 2u);
  // Eight blocks' worth of other prompts through the two free slots: every
  // eviction takes one of them, none takes x.
  for (int64_t round = 1; round <= 4; ++round) {
    PrefillOutcome outcome = pool.Prefill(Tokens(8, 1000 * round), "");
    EXPECT_EQ(std::get<BlockStored>(outcome.events.back()).block_hashes.size(), 2u);
    for (const EngineEvent& event : outcome.events) {
      if (const auto* removed = std::get_if<BlockRemoved>(&event)) {
        for (EngineHash hash : removed->block_hashes) {
          EXPECT_NE(hash, x_stored.block_hashes[0]);
          EXPECT_NE(hash, x_stored.block_hashes[1]);
        }
      }
    }
    EXPECT_EQ(pool.CachedPrefix(x, "salt"), 2u);
    EXPECT_EQ(pool.size(), 4u);
  }
  EXPECT_EQ(pool.Prefill(x, "salt").hit_blocks, 2u);
}

TEST(BlockPoolTest, APoolFullOfPinnedBlocksCachesWhatFits) {
  BlockPool pool = Pool(5);
  const std::vector<int64_t> x = Tokens(8, 0);
  const std::vector<int64_t> y = Tokens(8, 1000);
  pool.Prefill(x, "");
  pool.Prefill(y, "");
  pool.Pin(x, "");
  pool.Pin(y, "");
  // One free slot: the new prompt caches its head only.
  PrefillOutcome outcome = pool.Prefill(Tokens(12, 2000), "");
  EXPECT_EQ(outcome.computed_tokens, 12);
  ASSERT_EQ(outcome.events.size(), 1u);
  EXPECT_EQ(std::get<BlockStored>(outcome.events[0]).block_hashes.size(), 1u);
  // Now every slot is taken, four of them pinned: the next caches only by
  // evicting that one unpinned block.
  outcome = pool.Prefill(Tokens(8, 3000), "");
  ASSERT_EQ(outcome.events.size(), 2u);
  EXPECT_EQ(std::get<BlockRemoved>(outcome.events[0]).block_hashes.size(), 1u);
  EXPECT_EQ(std::get<BlockStored>(outcome.events[1]).block_hashes.size(), 1u);
  pool.Pin(Tokens(8, 3000), "");
  // Full of pinned blocks: a prefill computes everything and caches nothing.
  outcome = pool.Prefill(Tokens(8, 4000), "");
  EXPECT_EQ(outcome.computed_tokens, 8);
  EXPECT_TRUE(outcome.events.empty());
  EXPECT_EQ(pool.size(), 5u);
  EXPECT_EQ(pool.pinned_blocks(), 5u);
  EXPECT_EQ(pool.CachedPrefix(x, ""), 2u);
  EXPECT_EQ(pool.CachedPrefix(y, ""), 2u);
}

TEST(BlockPoolTest, AnUnpinnedBlockStaysCachedAndBecomesEvictableAgain) {
  BlockPool pool = Pool(4);
  const std::vector<int64_t> x = Tokens(8, 0);
  const std::vector<int64_t> y = Tokens(8, 1000);
  pool.Prefill(x, "");
  const PinnedBlocks pin = pool.Pin(x, "");
  pool.Prefill(y, "");  // y is now more recent than x was
  pool.Unpin(pin.hashes);
  EXPECT_EQ(pool.pinned_blocks(), 0u);
  EXPECT_EQ(pool.CachedPrefix(x, ""), 2u);
  EXPECT_EQ(pool.size(), 4u);
  // Unpinning returns x to the recent end, so y goes first, then x's tail
  // before its head.
  pool.Prefill(Tokens(8, 2000), "");
  EXPECT_EQ(pool.CachedPrefix(x, ""), 2u);
  EXPECT_EQ(pool.CachedPrefix(y, ""), 0u);
  PrefillOutcome outcome = pool.Prefill(Tokens(4, 3000), "");
  ASSERT_EQ(outcome.events.size(), 2u);
  EXPECT_EQ(std::get<BlockRemoved>(outcome.events[0]).block_hashes,
            std::vector<EngineHash>{pin.hashes[1]});
  EXPECT_EQ(pool.CachedPrefix(x, ""), 1u);
}

TEST(BlockPoolTest, PinsCountAndEndWithTheirLastUnpin) {
  BlockPool pool = Pool(2);
  const std::vector<int64_t> x = Tokens(8, 0);
  pool.Prefill(x, "");
  const PinnedBlocks first = pool.Pin(x, "");
  const PinnedBlocks second = pool.Pin(Tokens(4, 0), "");  // x's head only
  EXPECT_EQ(second.hashes, std::vector<EngineHash>{first.hashes[0]});
  pool.Unpin(first.hashes);
  EXPECT_EQ(pool.pinned_blocks(), 1u);
  // The tail is evictable again, the head is not.
  pool.Prefill(Tokens(4, 1000), "");
  EXPECT_EQ(pool.CachedPrefix(x, ""), 1u);
  pool.Unpin(second.hashes);
  pool.Unpin(second.hashes);  // a pin already ended ends nothing
  EXPECT_EQ(pool.pinned_blocks(), 0u);
  EXPECT_TRUE(pool.Pin(Tokens(4, 5000), "").hashes.empty());  // not cached: nothing to pin
}

TEST(BlockPoolTest, BlockIdsAreSlotsOfThePool) {
  BlockPool pool = Pool(3);
  pool.Prefill(Tokens(12, 0), "");
  const PinnedBlocks pin = pool.Pin(Tokens(12, 0), "");
  EXPECT_EQ(pin.block_ids, (std::vector<uint32_t>{0, 1, 2}));
  pool.Unpin(pin.hashes);
  // Evicted blocks give their ids to the blocks that replace them.
  pool.Prefill(Tokens(8, 1000), "");
  for (uint32_t id : pool.Pin(Tokens(8, 1000), "").block_ids) EXPECT_LT(id, 3u);
}

TEST(BlockPoolTest, ResetEndsEveryPin) {
  BlockPool pool = Pool(16);
  pool.Prefill(Tokens(16), "");
  ASSERT_EQ(pool.Pin(Tokens(16), "").hashes.size(), 4u);
  pool.Reset();
  EXPECT_EQ(pool.pinned_blocks(), 0u);
  EXPECT_EQ(pool.size(), 0u);
  // Cached again, the blocks are evictable: a pool of 16 takes 16 others.
  pool.Prefill(Tokens(16), "");
  pool.Prefill(Tokens(64, 1000), "");
  EXPECT_EQ(pool.CachedPrefix(Tokens(16), ""), 0u);
}

TEST(PromptHistoryTest, CountsTheLeadingBlocksAnEarlierPromptHadUnderTheSameSalt) {
  PromptHistory history(/*block_size=*/4);
  EXPECT_EQ(history.Record(Tokens(18), ""), 0u);  // 4 full blocks, now seen
  EXPECT_EQ(history.Record(Tokens(18), ""), 4u);
  // Shares the first 2 blocks, then differs: the rest never counts as seen.
  const std::vector<int64_t> branch = Concat(Tokens(8), Tokens(8, 1000));
  EXPECT_EQ(history.Record(branch, ""), 2u);
  EXPECT_EQ(history.Record(branch, ""), 4u);
  EXPECT_EQ(history.Record(Tokens(18), "tenant-a"), 0u);  // the salt keys the chain
  EXPECT_EQ(history.Record(Tokens(3), ""), 0u);           // no full block
}

}  // namespace
}  // namespace kvgov::sim
