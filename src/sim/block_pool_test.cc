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
  return BlockPool(BlockPoolOptions{.capacity_blocks = capacity, .block_size = 4,
                                    .hash_seed = seed, .medium = "GPU"});
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

}  // namespace
}  // namespace kvgov::sim
