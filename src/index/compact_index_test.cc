// The residency index over its compact tables (docs/adr/0007): churn,
// edge keys, KV-cache groups and shared holders, observed only through the
// public API.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kvgov/index/residency_index.h"

namespace kvgov::index {
namespace {

constexpr int64_t kBlockSize = 4;

BlockStored Stored(std::vector<EngineHash> hashes, std::optional<EngineHash> parent,
                   int64_t first_token, int64_t group_idx = 0) {
  BlockStored stored;
  stored.token_ids.resize(hashes.size() * kBlockSize);
  std::iota(stored.token_ids.begin(), stored.token_ids.end(), first_token);
  stored.block_hashes = std::move(hashes);
  stored.parent_block_hash = parent;
  stored.block_size = kBlockSize;
  stored.medium = "GPU";
  stored.group_idx = group_idx;
  return stored;
}

BlockRemoved Removed(std::vector<EngineHash> hashes, int64_t group_idx = 0,
                     std::string medium = "GPU") {
  BlockRemoved removed;
  removed.block_hashes = std::move(hashes);
  removed.group_idx = group_idx;
  removed.medium = std::move(medium);
  return removed;
}

uint64_t Hbm(const ResidencyIndex& index, std::string_view worker) {
  return index.Worker(worker)->blocks[0];
}

TEST(CompactIndexTest, HalfAMillionKeysRemovedAndReAddedTwice) {
  // Every key leaves and new ones come, a third shared by two workers: the
  // tables' backward-shift deletion must leave nothing behind that a lookup
  // trips on, and the holder lists must follow. (2^19 keys: a second in a
  // sanitizer build.)
  ResidencyIndex index;
  ASSERT_TRUE(index.AddWorker("a", "m", kBlockSize).ok());
  ASSERT_TRUE(index.AddWorker("b", "m", kBlockSize).ok());
  constexpr size_t kKeys = size_t{1} << 19;
  std::mt19937_64 rng(5);
  std::vector<BlockKey> keys(kKeys);
  for (int round = 0; round < 2; ++round) {
    for (BlockKey& key : keys) key = rng();
    ASSERT_TRUE(index.AddBlocks("a", keys, ResidencyTier::kHBM).ok());
    ASSERT_TRUE(index.AddBlocks("b", std::span(keys).first(kKeys / 2), ResidencyTier::kDRAM).ok());
    ASSERT_EQ(index.ResidentPairs(), kKeys + kKeys / 2);
    ASSERT_EQ(Hbm(index, "a"), kKeys);
    // The first key is on both; the last only on a.
    std::vector<WorkerOverlap> both = index.Overlap(std::span(keys).first(1));
    ASSERT_EQ(both.size(), 2u);
    EXPECT_EQ(both[1].by_tier[1], 1u);  // b holds it in dram
    EXPECT_EQ(index.Overlap(std::span(keys).last(1)).size(), 1u);
    ASSERT_TRUE(index.RemoveBlocks("a", keys, ResidencyTier::kHBM).ok());
    ASSERT_TRUE(
        index.RemoveBlocks("b", std::span(keys).first(kKeys / 2), ResidencyTier::kDRAM).ok());
    ASSERT_EQ(index.ResidentPairs(), 0u);
    EXPECT_TRUE(index.Overlap(std::span(keys).first(1)).empty());
  }
}

TEST(CompactIndexTest, ChurnOfEngineEventsMatchesAFreshIndex) {
  // Stores and evictions in a random order, then the same final residency
  // stored into a fresh index: equal snapshots, byte for byte.
  ResidencyIndex churned;
  ASSERT_TRUE(churned.AddWorker("w", "m", kBlockSize).ok());
  std::mt19937_64 rng(11);
  constexpr EngineHash kHashes = 20000;
  std::vector<bool> present(kHashes + 1, false);
  for (int step = 0; step < 200000; ++step) {
    const EngineHash hash = 1 + rng() % kHashes;
    if (present[hash]) {
      ASSERT_EQ(churned.Apply("w", Removed({hash}))->blocks_removed, 1u);
    } else {
      ASSERT_EQ(churned.Apply("w", Stored({hash}, std::nullopt, static_cast<int64_t>(hash) * 10))
                    ->blocks_stored,
                1u);
    }
    present[hash] = !present[hash];
  }
  ResidencyIndex fresh;
  ASSERT_TRUE(fresh.AddWorker("w", "m", kBlockSize).ok());
  uint64_t resident = 0;
  for (EngineHash hash = 1; hash <= kHashes; ++hash) {
    if (!present[hash]) continue;
    ++resident;
    ASSERT_TRUE(
        fresh.Apply("w", Stored({hash}, std::nullopt, static_cast<int64_t>(hash) * 10)).ok());
  }
  EXPECT_EQ(churned.ResidentPairs(), resident);
  EXPECT_EQ(Hbm(churned, "w"), resident);
  EXPECT_EQ(churned.SnapshotWorker("w").value(), fresh.SnapshotWorker("w").value());
}

TEST(CompactIndexTest, ZeroKeyAndZeroEngineHash) {
  // 0 is the tables' empty marker internally; as a key it must behave like
  // any other, here and through a snapshot.
  ResidencyIndex index;
  ASSERT_TRUE(index.AddWorker("w", "m", kBlockSize).ok());
  const BlockKey zero_key = 0;
  ASSERT_TRUE(index.AddBlocks("w", std::span(&zero_key, 1), ResidencyTier::kDisk).ok());
  ASSERT_TRUE(index.Apply("w", Stored({0, 1}, std::nullopt, 1)).ok());
  ASSERT_TRUE(index.Apply("w", Stored({2}, EngineHash{0}, 100)).ok());  // parent: engine hash 0
  Result<std::vector<BlockKey>> keys =
      index.KeysForEngineHashes("w", std::vector<EngineHash>{0, 1, 2}, 0);
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(index.ResidentPairs(), 4u);
  EXPECT_EQ(index.Overlap(std::span(&zero_key, 1)).at(0).blocks, 1u);

  const std::string snapshot = index.SnapshotWorker("w").value();
  ResidencyIndex restored;
  ASSERT_TRUE(restored.AddWorker("w", "m", kBlockSize).ok());
  ASSERT_TRUE(restored.RestoreWorker("w", snapshot).ok());
  EXPECT_EQ(restored.SnapshotWorker("w").value(), snapshot);
  EXPECT_EQ(restored.KeysForEngineHashes("w", std::vector<EngineHash>{0, 1, 2}, 0).value(), *keys);
  EXPECT_EQ(restored.Overlap(std::span(&zero_key, 1)).at(0).blocks, 1u);

  ASSERT_EQ(index.Apply("w", Removed({0}))->blocks_removed, 1u);
  EXPECT_FALSE(index.KeysForEngineHashes("w", std::vector<EngineHash>{0}, 0).ok());
  ASSERT_TRUE(index.RemoveBlocks("w", std::span(&zero_key, 1), ResidencyTier::kDisk).ok());
  EXPECT_TRUE(index.Overlap(std::span(&zero_key, 1)).empty());
  EXPECT_EQ(index.ResidentPairs(), 2u);
}

TEST(CompactIndexTest, GroupsComeAndGo) {
  ResidencyIndex index;
  ASSERT_TRUE(index.AddWorker("w", "m", kBlockSize).ok());
  // The same engine hashes in three groups name three different chains.
  for (int64_t group : {7, 0, 1}) {
    ASSERT_TRUE(index.Apply("w", Stored({1, 2}, std::nullopt, 1, group)).ok());
    ASSERT_TRUE(index.Apply("w", Stored({3}, EngineHash{2}, 50, group)).ok());
  }
  EXPECT_EQ(index.ResidentPairs(), 9u);
  std::vector<BlockKey> g1 =
      index.KeysForEngineHashes("w", std::vector<EngineHash>{1, 2, 3}, 1).value();
  const std::string snapshot = index.SnapshotWorker("w").value();

  // Emptying group 7 leaves the others alone; refilling it works.
  ASSERT_EQ(index.Apply("w", Removed({1, 2, 3}, 7))->blocks_removed, 3u);
  EXPECT_FALSE(index.KeysForEngineHashes("w", std::vector<EngineHash>{1}, 7).ok());
  EXPECT_EQ(index.Apply("w", Removed({1}, 7))->unknown_removals, 1u);
  EXPECT_EQ(index.Apply("w", Stored({9}, EngineHash{1}, 1, 7))->orphan_blocks, 1u);
  EXPECT_EQ(index.KeysForEngineHashes("w", std::vector<EngineHash>{1, 2, 3}, 1).value(), g1);
  ASSERT_TRUE(index.Apply("w", Stored({1, 2}, std::nullopt, 1, 7)).ok());
  ASSERT_TRUE(index.Apply("w", Stored({3}, EngineHash{2}, 50, 7)).ok());
  EXPECT_EQ(index.SnapshotWorker("w").value(), snapshot);

  // A snapshot with no group-0 refs restores without one.
  ASSERT_TRUE(index.Apply("w", Removed({1, 2, 3}, 0)).ok());
  const std::string no_group_zero = index.SnapshotWorker("w").value();
  ResidencyIndex restored;
  ASSERT_TRUE(restored.AddWorker("w", "m", kBlockSize).ok());
  ASSERT_TRUE(restored.RestoreWorker("w", no_group_zero).ok());
  EXPECT_EQ(restored.SnapshotWorker("w").value(), no_group_zero);
  EXPECT_FALSE(restored.KeysForEngineHashes("w", std::vector<EngineHash>{1}, 0).ok());
  EXPECT_EQ(restored.KeysForEngineHashes("w", std::vector<EngineHash>{1, 2, 3}, 1).value(), g1);
}

TEST(CompactIndexTest, ManyWorkersShareAChain) {
  ResidencyIndex index;
  const BlockStored chain = Stored({1, 2, 3, 4}, std::nullopt, 1);
  constexpr int kWorkers = 40;
  for (int w = 0; w < kWorkers; ++w) {
    const std::string id = "w" + std::to_string(100 + w);  // sorts like w
    ASSERT_TRUE(index.AddWorker(id, "m", kBlockSize).ok());
    // Worker w holds the first 1 + w % 4 blocks.
    BlockStored prefix = chain;
    prefix.block_hashes.resize(1 + w % 4);
    prefix.token_ids.resize(prefix.block_hashes.size() * kBlockSize);
    ASSERT_TRUE(index.Apply(id, prefix).ok());
  }
  const std::vector<BlockKey> keys =
      index.hasher().Chain({"m", "", 0}, chain.token_ids, kBlockSize);
  std::vector<WorkerOverlap> overlap = index.Overlap(keys);
  ASSERT_EQ(overlap.size(), static_cast<size_t>(kWorkers));
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_EQ(overlap[w].worker, "w" + std::to_string(100 + w));
    EXPECT_EQ(overlap[w].blocks, static_cast<uint64_t>(1 + w % 4));
  }
  // Take every other worker away, in different ways.
  for (int w = 0; w < kWorkers; w += 2) {
    const std::string id = "w" + std::to_string(100 + w);
    if (w % 4 == 0) {
      ASSERT_TRUE(index.RemoveWorker(id).ok());
    } else {
      ASSERT_TRUE(index.ClearWorker(id).ok());
    }
  }
  overlap = index.Overlap(keys);
  ASSERT_EQ(overlap.size(), static_cast<size_t>(kWorkers / 2));
  for (size_t i = 0; i < overlap.size(); ++i) {
    EXPECT_EQ(overlap[i].worker, "w" + std::to_string(101 + 2 * i));
  }
}

TEST(CompactIndexTest, ReusedWorkerNumbersStartEmpty) {
  ResidencyIndex index;
  ASSERT_TRUE(index.AddWorker("a", "m", kBlockSize).ok());
  ASSERT_TRUE(index.AddWorker("b", "m", kBlockSize).ok());
  const BlockStored chain = Stored({1, 2}, std::nullopt, 1);
  ASSERT_TRUE(index.Apply("a", chain).ok());
  ASSERT_TRUE(index.Apply("b", chain).ok());
  const std::vector<BlockKey> keys =
      index.hasher().Chain({"m", "", 0}, chain.token_ids, kBlockSize);
  ASSERT_TRUE(index.RemoveWorker("a").ok());
  ASSERT_TRUE(index.AddWorker("c", "m", kBlockSize).ok());  // takes a's place
  EXPECT_EQ(index.ResidentPairs(), 2u);
  EXPECT_EQ(index.Worker("c")->blocks[0], 0u);
  std::vector<WorkerOverlap> overlap = index.Overlap(keys);
  ASSERT_EQ(overlap.size(), 1u);
  EXPECT_EQ(overlap[0].worker, "b");
  ASSERT_TRUE(index.Apply("c", Stored({1}, std::nullopt, 1)).ok());
  overlap = index.Overlap(keys);
  ASSERT_EQ(overlap.size(), 2u);
  EXPECT_EQ(overlap[1].worker, "c");
  EXPECT_EQ(overlap[1].blocks, 1u);
  // Re-registering the removed id starts it empty too.
  ASSERT_TRUE(index.AddWorker("a", "m", kBlockSize).ok());
  EXPECT_EQ(index.Worker("a")->blocks[0], 0u);
  EXPECT_EQ(index.Overlap(keys).size(), 2u);
}

TEST(CompactIndexTest, RestoreOverSharedStateKeepsOtherHolders) {
  // A restore only moves the restored worker in and out of holder lists.
  ResidencyIndex index;
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(index.AddWorker(id, "m", kBlockSize).ok());
  ASSERT_TRUE(index.Apply("a", Stored({1, 2, 3}, std::nullopt, 1)).ok());
  ASSERT_TRUE(index.Apply("b", Stored({1, 2, 3}, std::nullopt, 1)).ok());
  ASSERT_TRUE(index.Apply("c", Stored({1, 2, 3}, std::nullopt, 1)).ok());
  const std::string two_blocks = [&] {
    ResidencyIndex other;
    EXPECT_TRUE(other.AddWorker("x", "m", kBlockSize).ok());
    EXPECT_TRUE(other.Apply("x", Stored({7, 8}, std::nullopt, 1)).ok());
    return other.SnapshotWorker("x").value();
  }();
  ASSERT_TRUE(index.RestoreWorker("b", two_blocks).ok());
  const std::vector<BlockKey> keys =
      index.hasher().Chain({"m", "", 0}, Stored({1, 2, 3}, std::nullopt, 1).token_ids, kBlockSize);
  std::vector<WorkerOverlap> overlap = index.Overlap(keys);
  ASSERT_EQ(overlap.size(), 3u);
  EXPECT_EQ(overlap[0].blocks, 3u);
  EXPECT_EQ(overlap[1].blocks, 2u);  // b: the snapshot's first two blocks
  EXPECT_EQ(overlap[2].blocks, 3u);
  EXPECT_EQ(index.ResidentPairs(), 8u);
}

TEST(CompactIndexTest, EveryResidentKeyFollowsItsWorkerThroughSnapshotsAndClears) {
  // Random engine stores (engine hashes reused over other tokens, so refs
  // move to other keys), removals in two tiers, and transport reports by
  // key on two workers. Whatever made a key resident, the worker's own
  // tables must find it: a snapshot restored elsewhere answers every
  // overlap query as the original does, and a clear leaves the worker in
  // no holder list.
  std::mt19937_64 rng(26);
  ResidencyIndex index;
  const std::vector<std::string> workers = {"a", "b"};
  for (const std::string& id : workers) ASSERT_TRUE(index.AddWorker(id, "m", kBlockSize).ok());
  std::vector<std::vector<BlockKey>> chains;  // every chain ever made resident
  auto chain_of = [&](const std::vector<int64_t>& tokens) {
    return index.hasher().Chain({"m", "", 0}, tokens, kBlockSize);
  };
  auto random_tokens = [&](size_t blocks) {
    std::vector<int64_t> tokens(blocks * kBlockSize);
    for (int64_t& token : tokens) token = static_cast<int64_t>(rng() % 3);  // few distinct
    return tokens;
  };
  auto expect_restored_answers_alike = [&](const std::string& id) {
    ResidencyIndex restored;
    ASSERT_TRUE(restored.AddWorker(id, "m", kBlockSize).ok());
    ASSERT_TRUE(restored.RestoreWorker(id, index.SnapshotWorker(id).value()).ok());
    EXPECT_EQ(restored.Worker(id)->blocks, index.Worker(id)->blocks) << id;
    for (const std::vector<BlockKey>& chain : chains) {
      std::vector<WorkerOverlap> original = index.Overlap(chain);
      std::erase_if(original, [&](const WorkerOverlap& o) { return o.worker != id; });
      const std::vector<WorkerOverlap> copy = restored.Overlap(chain);
      ASSERT_EQ(copy.size(), original.size()) << id;
      if (copy.empty()) continue;
      EXPECT_EQ(copy[0].blocks, original[0].blocks) << id;
      EXPECT_EQ(copy[0].best_tier, original[0].best_tier) << id;
    }
  };
  for (int step = 0; step < 3000; ++step) {
    const std::string& id = workers[rng() % workers.size()];
    switch (rng() % 5) {
      case 0:
      case 1: {
        const size_t blocks = 1 + rng() % 3;
        BlockStored stored;
        stored.block_size = kBlockSize;
        stored.medium = rng() % 4 == 0 ? "CPU" : "GPU";
        stored.token_ids = random_tokens(blocks);
        for (size_t b = 0; b < blocks; ++b) stored.block_hashes.push_back(1 + rng() % 40);
        chains.push_back(chain_of(stored.token_ids));
        ASSERT_TRUE(index.Apply(id, stored).ok());
        break;
      }
      case 2: {
        BlockRemoved removed;
        removed.medium = rng() % 2 == 0 ? "CPU" : "GPU";
        for (int b = 0; b < 3; ++b) removed.block_hashes.push_back(1 + rng() % 40);
        ASSERT_TRUE(index.Apply(id, removed).ok());
        break;
      }
      case 3: {
        chains.push_back(chain_of(random_tokens(1 + rng() % 2)));
        const ResidencyTier tier = rng() % 2 == 0 ? ResidencyTier::kDRAM : ResidencyTier::kHBM;
        ASSERT_TRUE(index.AddBlocks(id, chains.back(), tier).ok());
        break;
      }
      default: {
        if (chains.empty()) break;
        const ResidencyTier tier = rng() % 2 == 0 ? ResidencyTier::kDRAM : ResidencyTier::kHBM;
        ASSERT_TRUE(index.RemoveBlocks(id, chains[rng() % chains.size()], tier).ok());
        break;
      }
    }
    if (step % 300 == 299) {
      for (const std::string& worker : workers) expect_restored_answers_alike(worker);
    }
  }
  uint64_t pairs = index.ResidentPairs();
  EXPECT_GT(pairs, 0u);
  for (const std::string& id : workers) {
    ASSERT_TRUE(index.ClearWorker(id).ok());
    for (const std::vector<BlockKey>& chain : chains) {
      for (const WorkerOverlap& overlap : index.Overlap(chain)) EXPECT_NE(overlap.worker, id);
    }
  }
  EXPECT_EQ(index.ResidentPairs(), 0u);
}

// Engine events storing `blocks` blocks as chains of 1,000 from engine
// hash `first_hash` on, tokens distinct from `first_token` on.
void StoreBlocks(ResidencyIndex& index, const std::string& worker, EngineHash first_hash,
                 int64_t first_token, size_t blocks) {
  for (size_t done = 0; done < blocks; done += 1000) {
    std::vector<EngineHash> hashes(std::min<size_t>(1000, blocks - done));
    std::iota(hashes.begin(), hashes.end(), first_hash + done);
    const int64_t tokens = first_token + static_cast<int64_t>(done) * kBlockSize;
    ASSERT_TRUE(index.Apply(worker, Stored(std::move(hashes), std::nullopt, tokens)).ok());
  }
}

// Restores in a row into one index, as a restart makes them (large, then
// small, then larger, past the sizes where a restore orders its keys by
// home slot): each leaves exactly its own snapshot's state, nothing of the
// one before.
TEST(CompactIndexTest, RestoresInARowLeaveEachWorkerExactlyItsSnapshot) {
  const std::vector<std::pair<std::string, size_t>> workers = {
      {"large", 70'000}, {"small", 300}, {"larger", 90'000}};
  ResidencyIndex original;
  EngineHash next_hash = 1;
  int64_t next_token = 0;
  for (const auto& [id, blocks] : workers) {
    ASSERT_TRUE(original.AddWorker(id, "m", kBlockSize).ok());
    StoreBlocks(original, id, next_hash, next_token, blocks);
    next_hash += blocks;
    next_token += static_cast<int64_t>(blocks) * kBlockSize;
  }
  ResidencyIndex restored;
  for (const auto& [id, blocks] : workers) {
    ASSERT_TRUE(restored.AddWorker(id, "m", kBlockSize).ok());
    ASSERT_TRUE(restored.RestoreWorker(id, original.SnapshotWorker(id).value()).ok()) << id;
    EXPECT_EQ(Hbm(restored, id), blocks) << id;
  }
  for (const auto& [id, blocks] : workers) {
    EXPECT_EQ(restored.SnapshotWorker(id).value(), original.SnapshotWorker(id).value()) << id;
  }
  EXPECT_EQ(restored.ResidentPairs(), original.ResidentPairs());
}

}  // namespace
}  // namespace kvgov::index
