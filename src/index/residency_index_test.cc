#include "kvgov/index/residency_index.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kvgov::index {
namespace {

constexpr int64_t kBlockSize = 4;

std::vector<int64_t> Tokens(size_t blocks, int64_t start = 100) {
  std::vector<int64_t> tokens(blocks * kBlockSize);
  std::iota(tokens.begin(), tokens.end(), start);
  return tokens;
}

BlockStored Stored(std::vector<EngineHash> hashes, std::optional<EngineHash> parent,
                   std::vector<int64_t> tokens, std::string medium = "GPU") {
  BlockStored stored;
  stored.block_hashes = std::move(hashes);
  stored.parent_block_hash = parent;
  stored.token_ids = std::move(tokens);
  stored.block_size = kBlockSize;
  stored.medium = std::move(medium);
  return stored;
}

uint64_t Blocks(const ResidencyIndex& index, std::string_view worker, ResidencyTier tier) {
  std::optional<WorkerResidency> residency = index.Worker(worker);
  if (!residency) return 0;
  for (size_t i = 0; i < kIndexedTiers.size(); ++i) {
    if (kIndexedTiers[i] == tier) return residency->blocks[i];
  }
  return 0;
}

class ResidencyIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(index_.AddWorker("w1", "llama", kBlockSize).ok());
    ASSERT_TRUE(index_.AddWorker("w2", "llama", kBlockSize).ok());
  }
  std::vector<BlockKey> Chain(const std::vector<int64_t>& tokens) const {
    return index_.hasher().Chain({"llama", "", 0}, tokens, kBlockSize);
  }
  ResidencyIndex index_;
};

TEST_F(ResidencyIndexTest, EngineHashesMapToSeedIndependentKeys) {
  // Two engines with different hash seeds store the same prefix.
  std::vector<int64_t> tokens = Tokens(3);
  ASSERT_TRUE(index_.Apply("w1", Stored({11, 12, 13}, std::nullopt, tokens)).ok());
  ASSERT_TRUE(index_.Apply("w2", Stored({901, 902}, std::nullopt,
                                        {tokens.begin(), tokens.begin() + 8}))
                  .ok());

  std::vector<WorkerOverlap> overlap = index_.Overlap(Chain(tokens));
  ASSERT_EQ(overlap.size(), 2u);
  EXPECT_EQ(overlap[0].worker, "w1");
  EXPECT_EQ(overlap[0].blocks, 3u);
  EXPECT_EQ(overlap[1].worker, "w2");
  EXPECT_EQ(overlap[1].blocks, 2u);
  EXPECT_EQ(overlap[0].by_tier[0], 3u);  // hbm
}

TEST_F(ResidencyIndexTest, ParentChainsAcrossEvents) {
  std::vector<int64_t> tokens = Tokens(3);
  ASSERT_TRUE(index_.Apply("w1", Stored({1}, std::nullopt, {tokens.begin(), tokens.begin() + 4}))
                  .ok());
  ASSERT_TRUE(
      index_.Apply("w1", Stored({2, 3}, EngineHash{1}, {tokens.begin() + 4, tokens.end()})).ok());
  EXPECT_EQ(index_.Overlap(Chain(tokens))[0].blocks, 3u);
}

TEST_F(ResidencyIndexTest, UnknownParentIsCountedNotGuessed) {
  Result<ApplyResult> result = index_.Apply("w1", Stored({5}, EngineHash{999}, Tokens(1)));
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->orphan_blocks, 1u);
  EXPECT_EQ(result->blocks_stored, 0u);
  EXPECT_EQ(index_.ResidentPairs(), 0u);
}

TEST_F(ResidencyIndexTest, RemovalIsPerTier) {
  std::vector<int64_t> tokens = Tokens(2);
  ASSERT_TRUE(index_.Apply("w1", Stored({1, 2}, std::nullopt, tokens, "GPU")).ok());
  ASSERT_TRUE(index_.Apply("w1", Stored({1, 2}, std::nullopt, tokens, "CPU")).ok());
  EXPECT_EQ(Blocks(index_, "w1", ResidencyTier::kHBM), 2u);
  EXPECT_EQ(Blocks(index_, "w1", ResidencyTier::kDRAM), 2u);

  BlockRemoved removed{{1, 2}, "GPU", 0};
  Result<ApplyResult> result = index_.Apply("w1", removed);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->blocks_removed, 2u);
  EXPECT_EQ(Blocks(index_, "w1", ResidencyTier::kHBM), 0u);
  EXPECT_EQ(Blocks(index_, "w1", ResidencyTier::kDRAM), 2u);
  std::vector<WorkerOverlap> overlap = index_.Overlap(Chain(tokens));
  ASSERT_EQ(overlap.size(), 1u);
  EXPECT_EQ(overlap[0].by_tier[0], 0u);
  EXPECT_EQ(overlap[0].by_tier[1], 2u);  // dram now

  // The CPU copy still resolves by engine hash.
  ASSERT_TRUE(index_.Apply("w1", BlockRemoved{{1, 2}, "CPU", 0}).ok());
  EXPECT_EQ(index_.ResidentPairs(), 0u);
  EXPECT_TRUE(index_.Overlap(Chain(tokens)).empty());
}

TEST_F(ResidencyIndexTest, RemovingUnknownHashesIsCounted) {
  Result<ApplyResult> result = index_.Apply("w1", BlockRemoved{{77}, "GPU", 0});
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->unknown_removals, 1u);
}

TEST_F(ResidencyIndexTest, UnknownMediumIsNeverCreditedAsHbm) {
  Result<ApplyResult> result = index_.Apply("w1", Stored({1}, std::nullopt, Tokens(1), "NVME9"));
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->unknown_medium, 1u);
  EXPECT_EQ(Blocks(index_, "w1", ResidencyTier::kHBM), 0u);
  EXPECT_EQ(Blocks(index_, "w1", ResidencyTier::kUnknown), 1u);
  EXPECT_EQ(index_.Overlap(Chain(Tokens(1)))[0].by_tier[3], 1u);
}

TEST_F(ResidencyIndexTest, GroupsAreSeparateKeySpaces) {
  BlockStored group1 = Stored({1}, std::nullopt, Tokens(1));
  group1.group_idx = 1;
  ASSERT_TRUE(index_.Apply("w1", group1).ok());
  EXPECT_TRUE(index_.Overlap(Chain(Tokens(1))).empty());  // chain of group 0
  EXPECT_EQ(index_.Overlap(index_.hasher().Chain({"llama", "", 1}, Tokens(1), kBlockSize)).size(),
            1u);
}

TEST_F(ResidencyIndexTest, ClearEmptiesButKeepsTheWorker) {
  ASSERT_TRUE(index_.Apply("w1", Stored({1, 2}, std::nullopt, Tokens(2))).ok());
  ASSERT_TRUE(index_.Apply("w1", AllBlocksCleared{}).ok());
  EXPECT_EQ(index_.ResidentPairs(), 0u);
  EXPECT_TRUE(index_.Worker("w1").has_value());
  // Its engine-hash table went too: a removal after the clear is unknown.
  EXPECT_EQ(index_.Apply("w1", BlockRemoved{{1}, "GPU", 0})->unknown_removals, 1u);
}

TEST_F(ResidencyIndexTest, RemoveWorkerDeletesItsResidency) {
  ASSERT_TRUE(index_.Apply("w1", Stored({1}, std::nullopt, Tokens(1))).ok());
  ASSERT_TRUE(index_.Apply("w2", Stored({1}, std::nullopt, Tokens(1))).ok());
  ASSERT_TRUE(index_.RemoveWorker("w1").ok());
  EXPECT_FALSE(index_.Worker("w1").has_value());
  std::vector<WorkerOverlap> overlap = index_.Overlap(Chain(Tokens(1)));
  ASSERT_EQ(overlap.size(), 1u);
  EXPECT_EQ(overlap[0].worker, "w2");
  EXPECT_EQ(index_.RemoveWorker("w1").code(), StatusCode::kNotFound);
  EXPECT_EQ(index_.Apply("w1", AllBlocksCleared{}).status().code(), StatusCode::kNotFound);
  // The id can be registered again.
  EXPECT_TRUE(index_.AddWorker("w1", "llama", kBlockSize).ok());
}

TEST_F(ResidencyIndexTest, StaleWorkersStopCounting) {
  ASSERT_TRUE(index_.Apply("w1", Stored({1}, std::nullopt, Tokens(1))).ok());
  ASSERT_TRUE(index_.SetState("w1", WorkerState::kStale).ok());
  EXPECT_TRUE(index_.Overlap(Chain(Tokens(1))).empty());
  EXPECT_EQ(index_.Worker("w1")->state, WorkerState::kStale);
  ASSERT_TRUE(index_.SetState("w1", WorkerState::kLive).ok());
  EXPECT_EQ(index_.Overlap(Chain(Tokens(1))).size(), 1u);
}

TEST_F(ResidencyIndexTest, RejectsMismatchedBlockSizeAndTokenCount) {
  BlockStored wrong_size = Stored({1}, std::nullopt, Tokens(1));
  wrong_size.block_size = 16;
  EXPECT_EQ(index_.Apply("w1", wrong_size).status().code(), StatusCode::kInvalidArgument);
  BlockStored short_tokens = Stored({1, 2}, std::nullopt, Tokens(1));
  EXPECT_EQ(index_.Apply("w1", short_tokens).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ResidencyIndexTest, AddAndRemoveBlocksByKey) {
  std::vector<BlockKey> keys = Chain(Tokens(2));
  ASSERT_TRUE(index_.AddBlocks("w2", keys, ResidencyTier::kDRAM).ok());
  EXPECT_EQ(index_.Overlap(keys)[0].by_tier[1], 2u);
  ASSERT_TRUE(index_.RemoveBlocks("w2", keys, ResidencyTier::kDRAM).ok());
  EXPECT_TRUE(index_.Overlap(keys).empty());
}

TEST_F(ResidencyIndexTest, KeysForEngineHashes) {
  ASSERT_TRUE(index_.Apply("w1", Stored({1, 2}, std::nullopt, Tokens(2))).ok());
  Result<std::vector<BlockKey>> keys = index_.KeysForEngineHashes("w1", {{2, 1}}, 0);
  ASSERT_TRUE(keys.ok());
  std::vector<BlockKey> chain = Chain(Tokens(2));
  EXPECT_EQ(*keys, (std::vector<BlockKey>{chain[1], chain[0]}));
  EXPECT_EQ(index_.KeysForEngineHashes("w1", {{3}}, 0).status().code(), StatusCode::kNotFound);
}

TEST_F(ResidencyIndexTest, AddWorkerValidates) {
  EXPECT_EQ(index_.AddWorker("w1", "llama", 4).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(index_.AddWorker("", "llama", 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(index_.AddWorker("w3", "", 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(index_.AddWorker("w3", "llama", 0).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvgov::index

namespace kvgov::index {
namespace {

// Regression: a long extra key (a 32-hex-digit tenant salt, past the small
// string buffer) must key the block exactly as a route request computes it.
TEST_F(ResidencyIndexTest, LongSaltedExtraKeyMatchesTheRequestChain) {
  const std::string salt = "0079f1f6ab31dfb167de038fa2313896";
  BlockStored stored = Stored({1, 2}, std::nullopt, Tokens(2));
  stored.extra_keys = {FirstBlockExtraKey("", salt), ""};
  ASSERT_TRUE(index_.Apply("w1", stored).ok());
  std::vector<BlockKey> chain = RequestChain(index_.hasher(), {"llama", "", 0}, salt, Tokens(2),
                                             kBlockSize);
  std::vector<WorkerOverlap> overlap = index_.Overlap(chain);
  ASSERT_EQ(overlap.size(), 1u);
  EXPECT_EQ(overlap[0].blocks, 2u);
}

}  // namespace
}  // namespace kvgov::index
