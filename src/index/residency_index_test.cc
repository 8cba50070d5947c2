#include "kvgov/index/residency_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

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
  ASSERT_TRUE(
      index_.Apply("w2", Stored({901, 902}, std::nullopt, {tokens.begin(), tokens.begin() + 8}))
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
  ASSERT_TRUE(
      index_.Apply("w1", Stored({1}, std::nullopt, {tokens.begin(), tokens.begin() + 4})).ok());
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
  EXPECT_EQ(index_.Overlap(Chain(Tokens(1)))[0].by_tier[4], 1u);
}

TEST_F(ResidencyIndexTest, GroupsAreSeparateKeySpaces) {
  BlockStored group1 = Stored({1}, std::nullopt, Tokens(1));
  group1.group_idx = 1;
  ASSERT_TRUE(index_.Apply("w1", group1).ok());
  EXPECT_TRUE(index_.Overlap(Chain(Tokens(1))).empty());  // chain of group 0
  EXPECT_EQ(index_.Overlap(index_.hasher().Chain({"llama", "", 1}, Tokens(1), kBlockSize)).size(),
            1u);
}

// A hybrid model (vLLM's kv_cache_spec_kind): credit comes from the
// full-attention group whatever its number; a sliding-window group evicts
// early, and those evictions never withdraw the full-attention credit.
TEST_F(ResidencyIndexTest, HybridModelsEarnCreditFromTheFullAttentionGroup) {
  BlockStored sliding = Stored({1, 2}, std::nullopt, Tokens(2));
  sliding.group_idx = 0;
  sliding.kv_cache_spec_kind = "sliding_window";
  sliding.kv_cache_spec_sliding_window = 4;
  BlockStored full = Stored({1, 2}, std::nullopt, Tokens(2));
  full.group_idx = 1;
  full.kv_cache_spec_kind = "full_attention";
  ASSERT_TRUE(index_.Apply("w1", sliding).ok());
  ASSERT_TRUE(index_.Apply("w1", full).ok());
  ASSERT_EQ(index_.Overlap(Chain(Tokens(2))).size(), 1u);
  EXPECT_EQ(index_.Overlap(Chain(Tokens(2)))[0].blocks, 2u);
  // The sliding window drops the first block (same engine hash, its group).
  Result<ApplyResult> evicted = index_.Apply("w1", BlockRemoved{{1}, "GPU", 0});
  ASSERT_TRUE(evicted.ok());
  EXPECT_EQ(evicted->blocks_removed, 1u);
  EXPECT_EQ(index_.Overlap(Chain(Tokens(2)))[0].blocks, 2u);
  // The full-attention group's own eviction does withdraw it.
  ASSERT_TRUE(index_.Apply("w1", BlockRemoved{{2}, "GPU", 1}).ok());
  EXPECT_EQ(index_.Overlap(Chain(Tokens(2)))[0].blocks, 1u);
}

// The same tokens stored again under another engine hash: the engine's
// hashing changed (a hash seed that is not pinned).
TEST_F(ResidencyIndexTest, TheSameTokensUnderNewHashesAreCountedAsDrift) {
  ASSERT_TRUE(index_.Apply("w1", Stored({1, 2}, std::nullopt, Tokens(2))).ok());
  Result<ApplyResult> again = index_.Apply("w1", Stored({1, 2}, std::nullopt, Tokens(2)));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->hash_drift_blocks, 0u);  // a re-store under the same hashes
  Result<ApplyResult> drifted = index_.Apply("w1", Stored({71, 72}, std::nullopt, Tokens(2)));
  ASSERT_TRUE(drifted.ok());
  EXPECT_EQ(drifted->hash_drift_blocks, 2u);
  // Another tier of the same block is an offload, not drift.
  Result<ApplyResult> offloaded =
      index_.Apply("w1", Stored({81, 82}, std::nullopt, Tokens(2), "CPU"));
  ASSERT_TRUE(offloaded.ok());
  EXPECT_EQ(offloaded->hash_drift_blocks, 0u);
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

TEST_F(ResidencyIndexTest, KeysNoEngineHashNamesAreClearedSnapshottedAndRestored) {
  // Two ways a key is resident with no engine ref naming it: a transport
  // reports it by key, and an engine hash is stored again over other
  // tokens (the key it named stays resident). Both must follow the worker
  // through a snapshot, a restore and a clear like any other key.
  const std::vector<BlockKey> moved = Chain(Tokens(1, 100));
  const std::vector<BlockKey> reported = Chain(Tokens(1, 500));
  ASSERT_TRUE(index_.Apply("w1", Stored({1}, std::nullopt, Tokens(1, 100))).ok());
  ASSERT_TRUE(index_.Apply("w1", Stored({1}, std::nullopt, Tokens(1, 300))).ok());
  ASSERT_TRUE(index_.AddBlocks("w1", reported, ResidencyTier::kDRAM).ok());
  ASSERT_EQ(index_.ResidentPairs(), 3u);
  ASSERT_EQ(index_.Overlap(moved).size(), 1u);

  const std::string snapshot = index_.SnapshotWorker("w1").value();
  ResidencyIndex restored;
  ASSERT_TRUE(restored.AddWorker("w1", "llama", kBlockSize).ok());
  ASSERT_TRUE(restored.RestoreWorker("w1", snapshot).ok());
  EXPECT_EQ(restored.ResidentPairs(), 3u);
  EXPECT_EQ(restored.Overlap(moved).size(), 1u);
  ASSERT_EQ(restored.Overlap(reported).size(), 1u);
  EXPECT_EQ(restored.Overlap(reported)[0].by_tier[1], 1u);  // dram
  EXPECT_EQ(restored.SnapshotWorker("w1").value(), snapshot);

  // A clear takes every one of them out of the holder lists.
  ASSERT_TRUE(index_.ClearWorker("w1").ok());
  EXPECT_EQ(index_.ResidentPairs(), 0u);
  EXPECT_TRUE(index_.Overlap(moved).empty());
  EXPECT_TRUE(index_.Overlap(reported).empty());
  EXPECT_TRUE(index_.Overlap(Chain(Tokens(1, 300))).empty());

  // A reported key the transport withdraws leaves the snapshot too.
  ASSERT_TRUE(restored.RemoveBlocks("w1", reported, ResidencyTier::kDRAM).ok());
  EXPECT_EQ(restored.ResidentPairs(), 2u);
  ResidencyIndex again;
  ASSERT_TRUE(again.AddWorker("w1", "llama", kBlockSize).ok());
  ASSERT_TRUE(again.RestoreWorker("w1", restored.SnapshotWorker("w1").value()).ok());
  EXPECT_EQ(again.ResidentPairs(), 2u);
  EXPECT_TRUE(again.Overlap(reported).empty());
}

TEST_F(ResidencyIndexTest, ATierAddedByKeyIsTheEnginesBlocksTierToo) {
  // One (block, worker) pair, two sources of its tiers: the engine stores
  // it in HBM, a transport reports a DRAM copy. Overlap sees both; the
  // engine's removal leaves the DRAM copy; the transport's, nothing.
  const std::vector<BlockKey> chain = Chain(Tokens(2));
  ASSERT_TRUE(index_.Apply("w1", Stored({1, 2}, std::nullopt, Tokens(2))).ok());
  ASSERT_TRUE(index_.AddBlocks("w1", chain, ResidencyTier::kDRAM).ok());
  EXPECT_EQ(index_.ResidentPairs(), 2u);
  EXPECT_EQ(Blocks(index_, "w1", ResidencyTier::kDRAM), 2u);
  ASSERT_TRUE(index_.Apply("w1", BlockRemoved{{1, 2}, "GPU", 0}).ok());
  std::vector<WorkerOverlap> overlap = index_.Overlap(chain);
  ASSERT_EQ(overlap.size(), 1u);
  EXPECT_EQ(overlap[0].blocks, 2u);
  EXPECT_EQ(overlap[0].best_tier, (std::vector<uint8_t>{1, 1}));  // dram
  ASSERT_TRUE(index_.RemoveBlocks("w1", chain, ResidencyTier::kDRAM).ok());
  EXPECT_TRUE(index_.Overlap(chain).empty());
  EXPECT_EQ(index_.ResidentPairs(), 0u);
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

// An engine whose chain roots carry more than the LoRA name in their extra
// key reports salts; one that returns a salted request's root without it
// may drop them, and those blocks are not indexed (they would key as
// unsalted). Two such roots decide. ADR 0019.
TEST_F(ResidencyIndexTest, SaltReportingIsLearnedFromTheEvents) {
  EXPECT_EQ(index_.Worker("w1")->salts, SaltReporting::kUnknown);
  const std::vector<int64_t> tokens = Tokens(3);
  const std::vector<int64_t> other = Tokens(3, 700);
  auto root_of = [&](const std::vector<int64_t>& chain) {
    return SaltlessRoot(index_.hasher(), {"llama", "", 0}, std::span(chain).first(kBlockSize));
  };
  EXPECT_EQ(root_of(tokens), Chain(tokens).front());  // what the index would key it as

  // w1 (an older vLLM) returns two salted chains without their salts.
  ASSERT_TRUE(index_.ExpectSaltedRoot("w1", root_of(tokens)).ok());
  ASSERT_TRUE(index_.ExpectSaltedRoot("w1", root_of(other)).ok());
  Result<ApplyResult> applied = index_.Apply("w1", Stored({11, 12, 13}, std::nullopt, tokens));
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(applied->salt_blind_blocks, 3u);
  EXPECT_EQ(applied->blocks_stored, 0u);
  EXPECT_EQ(index_.Worker("w1")->salts, SaltReporting::kUnknown);  // one may be a coincidence
  applied = index_.Apply("w1", Stored({14}, 13, Tokens(1, 500)));
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(applied->orphan_blocks, 1u);  // its continuation has no indexed parent
  applied = index_.Apply("w1", Stored({15, 16, 17}, std::nullopt, other));
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(applied->salt_blind_blocks, 3u);
  EXPECT_EQ(index_.Worker("w1")->salts, SaltReporting::kNotReported);
  EXPECT_EQ(Blocks(index_, "w1", ResidencyTier::kHBM), 0u);
  // The same tokens unsalted (the expectations are used up) are indexed.
  applied = index_.Apply("w1", Stored({21, 22, 23}, std::nullopt, tokens));
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(applied->blocks_stored, 3u);
  // A restart may be another version: it is learned again.
  ASSERT_TRUE(index_.ClearWorker("w1").ok());
  EXPECT_EQ(index_.Worker("w1")->salts, SaltReporting::kUnknown);

  // w2 (a current vLLM) returns it with the salt in its root's extra key.
  ASSERT_TRUE(index_.ExpectSaltedRoot("w2", root_of(tokens)).ok());
  BlockStored salted = Stored({31, 32, 33}, std::nullopt, tokens);
  salted.extra_keys = {R"(["salt-a"])", "", ""};
  ASSERT_TRUE(index_.Apply("w2", salted).ok());
  EXPECT_EQ(index_.Worker("w2")->salts, SaltReporting::kReported);
  EXPECT_EQ(Blocks(index_, "w2", ResidencyTier::kHBM), 3u);
  // Reported is evidence enough: unsalted blocks of the same tokens later
  // are another request's, indexed as they are.
  ASSERT_TRUE(index_.ExpectSaltedRoot("w2", root_of(tokens)).ok());
  applied = index_.Apply("w2", Stored({41, 42, 43}, std::nullopt, tokens));
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(applied->salt_blind_blocks, 0u);
  EXPECT_EQ(index_.Worker("w2")->salts, SaltReporting::kReported);
}

// A LoRA name is no evidence of salts: the adapter writes one an engine
// reports beside the hashes into the extra keys itself.
TEST_F(ResidencyIndexTest, ALoraNameAloneIsNoEvidenceOfSalts) {
  const std::vector<int64_t> tokens = Tokens(2);
  auto lora_stored = [&](std::vector<EngineHash> hashes, std::optional<EngineHash> parent,
                         std::vector<int64_t> chain) {
    BlockStored stored = Stored(std::move(hashes), parent, std::move(chain));
    stored.lora_name = "adapter";
    stored.extra_keys.assign(stored.block_hashes.size(), FirstBlockExtraKey("adapter", ""));
    return stored;
  };
  ASSERT_TRUE(index_.Apply("w1", lora_stored({1, 2}, std::nullopt, Tokens(2, 900))).ok());
  ASSERT_TRUE(index_.Apply("w1", lora_stored({3}, 2, Tokens(1, 950))).ok());
  EXPECT_EQ(index_.Worker("w1")->salts, SaltReporting::kUnknown);
  // A salted LoRA request returned without its salt still matches.
  const BlockKey root =
      SaltlessRoot(index_.hasher(), {"llama", "adapter", 0}, std::span(tokens).first(kBlockSize));
  ASSERT_TRUE(index_.ExpectSaltedRoot("w1", root).ok());
  Result<ApplyResult> applied = index_.Apply("w1", lora_stored({5, 6}, std::nullopt, tokens));
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(applied->salt_blind_blocks, 2u);
}

TEST_F(ResidencyIndexTest, UnexpectedChainsAndOldExpectationsChangeNothing) {
  const std::vector<int64_t> salted = Tokens(1, 900);
  const BlockKey root = SaltlessRoot(index_.hasher(), {"llama", "", 0}, salted);
  ASSERT_TRUE(index_.ExpectSaltedRoot("w1", root).ok());
  // Other chains, without extra keys, say nothing about salts.
  ASSERT_TRUE(index_.Apply("w1", Stored({1, 2}, std::nullopt, Tokens(2))).ok());
  EXPECT_EQ(index_.Worker("w1")->salts, SaltReporting::kUnknown);
  // The oldest expectation goes once the bound is reached.
  for (size_t i = 0; i < ResidencyIndex::kMaxSaltedRoots; ++i) {
    ASSERT_TRUE(index_.ExpectSaltedRoot("w1", 1000 + i).ok());
  }
  Result<ApplyResult> applied = index_.Apply("w1", Stored({3}, std::nullopt, salted));
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(applied->blocks_stored, 1u);
  EXPECT_EQ(index_.Worker("w1")->salts, SaltReporting::kUnknown);
  EXPECT_EQ(index_.ExpectSaltedRoot("nobody", root).code(), StatusCode::kNotFound);
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
  std::vector<BlockKey> chain =
      RequestChain(index_.hasher(), {"llama", "", 0}, salt, Tokens(2), kBlockSize);
  std::vector<WorkerOverlap> overlap = index_.Overlap(chain);
  ASSERT_EQ(overlap.size(), 1u);
  EXPECT_EQ(overlap[0].blocks, 2u);
}

}  // namespace
}  // namespace kvgov::index

namespace kvgov::index {
namespace {

// Overlap walks the chain once through the holder lists and reads tiers from
// a worker's counts when it uses one tier only. Checked against the plain
// definition (each live worker holding chain[0], walked block by block in
// its own residency) over random residency: shared and partial prefixes,
// holes, holder lists built in different orders, mixed and unindexed tiers,
// stale workers, and workers removed and registered again.
TEST(ResidencyIndexOverlapTest, RandomResidencyMatchesTheDefinition) {
  constexpr std::array<ResidencyTier, 6> kTiers = {ResidencyTier::kHBM,    ResidencyTier::kDRAM,
                                                   ResidencyTier::kDisk,   ResidencyTier::kCXL,
                                                   ResidencyTier::kRemote, ResidencyTier::kUnknown};
  auto best_slot = [](const std::set<ResidencyTier>& tiers) -> uint8_t {
    for (size_t slot = 0; slot + 1 < kIndexedTiers.size(); ++slot) {
      if (tiers.contains(kIndexedTiers[slot])) return static_cast<uint8_t>(slot);
    }
    return static_cast<uint8_t>(kIndexedTiers.size() - 1);
  };
  std::mt19937_64 rng(7);
  for (int round = 0; round < 40; ++round) {
    // One, two or three shards: the answers are the definition's whatever
    // the workers' spread.
    ResidencyIndex index(BlockKeyHasher(), 1 + round % 3);
    // worker -> key -> tiers; and which are stale.
    std::map<std::string, std::map<BlockKey, std::set<ResidencyTier>>> model;
    std::set<std::string> stale;
    const int workers = 1 + static_cast<int>(rng() % 12);
    std::vector<std::string> ids;
    for (int w = 0; w < workers; ++w) ids.push_back("w" + std::to_string(rng() % 1000));
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    std::shuffle(ids.begin(), ids.end(), rng);  // registered out of id order
    for (const std::string& id : ids) {
      ASSERT_TRUE(index.AddWorker(id, "llama", 4).ok());
      model[id];
    }
    // A chain over a small key universe (so prefixes are shared and a key
    // may even repeat), and residency mostly along it.
    const size_t length = 1 + rng() % 40;
    std::vector<BlockKey> chain(length);
    for (BlockKey& key : chain) key = 1 + rng() % 60;
    for (int op = 0; op < 300; ++op) {
      const std::string& id = ids[rng() % ids.size()];
      const bool one_tier = id.back() % 2 == 0;  // these use hbm only
      const ResidencyTier tier = one_tier ? ResidencyTier::kHBM : kTiers[rng() % kTiers.size()];
      const size_t begin = rng() % length;
      const size_t end = std::min(length, begin + 1 + rng() % 12);
      std::vector<BlockKey> keys(chain.begin() + static_cast<long>(begin),
                                 chain.begin() + static_cast<long>(end));
      if (rng() % 4 == 0) {
        ASSERT_TRUE(index.RemoveBlocks(id, keys, tier).ok());
        for (BlockKey key : keys) {
          auto it = model[id].find(key);
          if (it == model[id].end()) continue;
          it->second.erase(tier);
          if (it->second.empty()) model[id].erase(it);
        }
      } else {
        ASSERT_TRUE(index.AddBlocks(id, keys, tier).ok());
        for (BlockKey key : keys) model[id][key].insert(tier);
      }
    }
    // Some stale, and one removed and registered again (its number reused).
    for (const std::string& id : ids) {
      if (rng() % 5 == 0) {
        ASSERT_TRUE(index.SetState(id, WorkerState::kStale).ok());
        stale.insert(id);
      }
    }
    if (ids.size() > 1) {
      const std::string& id = ids[rng() % ids.size()];
      ASSERT_TRUE(index.RemoveWorker(id).ok());
      ASSERT_TRUE(index.AddWorker(id, "llama", 4).ok());
      model[id].clear();
      stale.erase(id);
      std::vector<BlockKey> prefix(chain.begin(), chain.begin() + static_cast<long>(length / 2));
      ASSERT_TRUE(index.AddBlocks(id, prefix, ResidencyTier::kDRAM).ok());
      for (BlockKey key : prefix) model[id][key].insert(ResidencyTier::kDRAM);
    }

    std::vector<WorkerOverlap> expected;
    for (const auto& [id, resident] : model) {  // std::map: sorted by id
      if (stale.contains(id) || !resident.contains(chain[0])) continue;
      WorkerOverlap overlap;
      overlap.worker = id;
      for (BlockKey key : chain) {
        auto it = resident.find(key);
        if (it == resident.end()) break;
        const uint8_t slot = best_slot(it->second);
        ++overlap.blocks;
        ++overlap.by_tier[slot];
        overlap.best_tier.push_back(slot);
      }
      expected.push_back(std::move(overlap));
    }
    std::vector<WorkerOverlap> got = index.Overlap(chain);
    ASSERT_EQ(got.size(), expected.size()) << "round " << round;
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE("round " + std::to_string(round) + ", worker " + expected[i].worker);
      EXPECT_EQ(got[i].worker, expected[i].worker);
      EXPECT_EQ(got[i].blocks, expected[i].blocks);
      EXPECT_EQ(got[i].by_tier, expected[i].by_tier);
      EXPECT_EQ(got[i].best_tier, expected[i].best_tier);
    }
  }
}

class ResidencyIndexShardsTest : public ::testing::TestWithParam<size_t> {};

TEST_P(ResidencyIndexShardsTest, WorkersStaySortedByIdAcrossRemovalsAndReuse) {
  ResidencyIndex index(BlockKeyHasher(), GetParam());
  for (const char* id : {"m", "c", "x", "a", "q"}) {
    ASSERT_TRUE(index.AddWorker(id, "llama", 4).ok());
  }
  ASSERT_TRUE(index.RemoveWorker("c").ok());
  ASSERT_TRUE(index.AddWorker("b", "llama", 4).ok());  // takes c's number
  ASSERT_TRUE(index.RemoveWorker("x").ok());
  ASSERT_TRUE(index.AddWorker("z", "llama", 4).ok());
  std::vector<std::string> ids;
  for (const WorkerResidency& worker : index.Workers()) ids.push_back(worker.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "b", "m", "q", "z"}));
  const std::vector<BlockKey> chain = {11, 12};
  for (const std::string& id : ids) {
    ASSERT_TRUE(index.AddBlocks(id, chain, ResidencyTier::kHBM).ok());
  }
  std::vector<std::string> overlapping;
  for (const WorkerOverlap& overlap : index.Overlap(chain)) overlapping.push_back(overlap.worker);
  EXPECT_EQ(overlapping, ids);
}

INSTANTIATE_TEST_SUITE_P(Shards, ResidencyIndexShardsTest, ::testing::Values(1, 2, 3));

}  // namespace
}  // namespace kvgov::index

namespace kvgov::index {
namespace {

// A declared pool only sizes the tables: the same events leave the same
// residency, snapshot for snapshot, whether the pool is declared, smaller
// than what arrives, or not given.
TEST(ResidencyIndexPoolTest, DeclaredPoolChangesNoAnswer) {
  ResidencyIndex index;
  ASSERT_TRUE(index.AddWorker("plain", "llama", 4).ok());
  ASSERT_TRUE(index.AddWorker("sized", "llama", 4, 4096).ok());
  ASSERT_TRUE(index.AddWorker("small", "llama", 4, 3).ok());
  std::mt19937_64 rng(3);
  std::vector<EngineHash> live;
  for (int event = 0; event < 200; ++event) {
    EngineEvent applied;
    if (event % 3 == 2 && !live.empty()) {
      BlockRemoved removed;
      removed.medium = "GPU";
      removed.block_hashes.push_back(live[rng() % live.size()]);
      applied = removed;
    } else {
      BlockStored stored;
      stored.block_size = 4;
      stored.medium = event % 5 == 0 ? "CPU" : "GPU";
      for (int b = 0; b < 4; ++b) {
        stored.block_hashes.push_back(rng());
        for (int t = 0; t < 4; ++t) {
          stored.token_ids.push_back(static_cast<int64_t>(rng() % 1000));
        }
      }
      live.insert(live.end(), stored.block_hashes.begin(), stored.block_hashes.end());
      applied = stored;
    }
    for (const char* id : {"plain", "sized", "small"}) {
      ASSERT_TRUE(index.Apply(id, applied).ok());
    }
  }
  Result<std::string> plain = index.SnapshotWorker("plain");
  ASSERT_TRUE(plain.ok());
  for (const char* id : {"sized", "small"}) {
    Result<std::string> sized = index.SnapshotWorker(id);
    ASSERT_TRUE(sized.ok());
    EXPECT_EQ(index.Worker(id)->blocks, index.Worker("plain")->blocks) << id;
    // The snapshot names no worker, so equal residency is equal bytes.
    EXPECT_EQ(*sized, *plain) << id;
  }
  // Restored into workers with and without a pool, then fed the same
  // events: the same residency again.
  ResidencyIndex restored;
  ASSERT_TRUE(restored.AddWorker("plain", "llama", 4).ok());
  ASSERT_TRUE(restored.AddWorker("sized", "llama", 4, 4096).ok());
  ASSERT_TRUE(restored.RestoreWorker("plain", *plain).ok());
  ASSERT_TRUE(restored.RestoreWorker("sized", *plain).ok());
  BlockStored more;
  more.block_size = 4;
  more.medium = "GPU";
  for (int b = 0; b < 8; ++b) {
    more.block_hashes.push_back(rng());
    for (int t = 0; t < 4; ++t) more.token_ids.push_back(static_cast<int64_t>(rng() % 1000));
  }
  for (const char* id : {"plain", "sized"}) ASSERT_TRUE(restored.Apply(id, more).ok());
  EXPECT_EQ(restored.SnapshotWorker("sized").value(), restored.SnapshotWorker("plain").value());

  EXPECT_EQ(index.Apply("sized", AllBlocksCleared{}).status().code(), StatusCode::kOk);
  EXPECT_EQ(index.Worker("sized")->blocks, (std::array<uint64_t, kIndexedTiers.size()>{}));
}

}  // namespace
}  // namespace kvgov::index
