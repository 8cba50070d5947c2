#include "kvgov/core/engine_events.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kvgov/core/kv_transfer.h"
#include "kvgov/core/lookup_verdict.h"

namespace kvgov {
namespace {

TEST(TierForMediumTest, MapsEveryKnownMediumCaseInsensitively) {
  struct Case {
    const char* medium;
    ResidencyTier tier;
  };
  const Case cases[] = {
      {"", ResidencyTier::kHBM},
      {"GPU", ResidencyTier::kHBM},
      {"gpu", ResidencyTier::kHBM},
      {"CPU", ResidencyTier::kDRAM},
      {"cpu", ResidencyTier::kDRAM},
      {"CPU_TIER1", ResidencyTier::kDRAM},
      {"cpu_tier1", ResidencyTier::kDRAM},
      {"CPU_TIER2", ResidencyTier::kDisk},
      {"DISK", ResidencyTier::kDisk},
      {"disk", ResidencyTier::kDisk},
      {"L1", ResidencyTier::kHBM},
      {"l2", ResidencyTier::kDRAM},
      {"L3", ResidencyTier::kDisk},
      // vLLM's storage tiers (FS, OBJ in 0.26; STORAGE after vllm#48123).
      {"FS", ResidencyTier::kDisk},
      {"STORAGE", ResidencyTier::kDisk},
      {"OBJ", ResidencyTier::kRemote},
      // SGLang's StorageMedium (sglang#22894).
      {"CPU_PINNED", ResidencyTier::kDRAM},
      {"EXTERNAL", ResidencyTier::kRemote},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(TierForMedium(c.medium), c.tier) << "medium '" << c.medium << "'";
    EXPECT_EQ(TierForMedium(c.medium, "LOCAL"), c.tier) << "medium '" << c.medium << "'";
  }
}

// A REMOTE block is reachable from the worker, not held by it.
TEST(TierForMediumTest, RemoteLocalityIsNeverThisWorkersTier) {
  for (const char* medium : {"GPU", "CPU", "FS", "STORAGE", "OBJ", "disk"}) {
    EXPECT_EQ(TierForMedium(medium, "REMOTE"), ResidencyTier::kRemote) << medium;
    EXPECT_EQ(TierForMedium(medium, "remote"), ResidencyTier::kRemote) << medium;
  }
  EXPECT_EQ(TierForMedium("NVME9", "REMOTE"), ResidencyTier::kUnknown);
  EXPECT_EQ(TierForMedium("GPU", "ELSEWHERE"), ResidencyTier::kUnknown);
}

TEST(TierForMediumTest, UnknownMediumIsNeverHBM) {
  for (const char* medium : {"HBM", "NVME", "L4", "GPU ", " gpu", "CPU_TIER3", "remote", "G"}) {
    EXPECT_EQ(TierForMedium(medium), ResidencyTier::kUnknown) << "medium '" << medium << "'";
  }
}

TEST(EngineEventTypeNameTest, NamesEachAlternative) {
  EXPECT_EQ(EngineEventTypeName(BlockStored{}), "BlockStored");
  EXPECT_EQ(EngineEventTypeName(BlockRemoved{}), "BlockRemoved");
  EXPECT_EQ(EngineEventTypeName(AllBlocksCleared{}), "AllBlocksCleared");
}

BlockStored TwoStoredBlocks() {
  BlockStored stored;
  stored.block_hashes = {0x1, 0xFFFFFFFFFFFFFFFFull};
  stored.token_ids = {1, 2, 3, 4, 5, 6, 7, 8};
  stored.block_size = 4;
  stored.medium = "CPU";
  stored.group_idx = 3;
  return stored;
}

TEST(LowerEngineEventTest, StoreLowersToOneServableEntryPerBlock) {
  std::vector<Entry> entries = LowerEngineEvent(TwoStoredBlocks(), "worker-a", 16);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].id,
            (EntryId{"0000000000000001", MediaType::kKVSpan, 4, LengthUnit::kPositions}));
  EXPECT_EQ(entries[1].id.digest, "ffffffffffffffff");
  for (const Entry& entry : entries) {
    EXPECT_EQ(entry.plane, Plane::kKVTransfer);
    EXPECT_EQ(entry.source, Source::kRideEngine);
    EXPECT_EQ(entry.residency.tier, ResidencyTier::kDRAM);
    EXPECT_EQ(entry.residency.owner, "worker-a");
    EXPECT_EQ(entry.labels.at("direction"), "store");
    EXPECT_EQ(entry.labels.at("outcome"), "ok");
    EXPECT_EQ(entry.labels.at("to_tier"), "dram");
    EXPECT_EQ(entry.labels.at("worker"), "worker-a");
    EXPECT_EQ(entry.labels.at("group_idx"), "3");
    EXPECT_FALSE(entry.labels.contains("from_tier"));
    EXPECT_TRUE(ValidateEntry(entry).ok());
    LookupVerdict verdict = KVTransferVerdict(entry);
    EXPECT_EQ(verdict.kind, LookupKind::kHit);
    EXPECT_TRUE(verdict.CanServe());
    // Residency is evidence, not trust: nothing is admitted by lowering.
    EXPECT_EQ(entry.security.taint, Taint::kTainted);
  }
}

TEST(LowerEngineEventTest, StoreWithoutOwnBlockSizeUsesCallerBlockSize) {
  BlockStored stored = TwoStoredBlocks();
  stored.block_size = 0;  // a Mooncake store that did not say
  std::vector<Entry> entries = LowerEngineEvent(stored, "w", 16);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].id.length, 16);
}

TEST(LowerEngineEventTest, HashDigestIsZeroPaddedLowercaseHex) {
  BlockStored stored;
  stored.block_hashes = {0xABCDEF0123ull};
  stored.block_size = 16;
  stored.token_ids.resize(16);
  std::vector<Entry> entries = LowerEngineEvent(stored, "w", 16);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].id.digest, "000000abcdef0123");
}

TEST(LowerEngineEventTest, UnknownMediumStoreHasUnknownTier) {
  BlockStored stored = TwoStoredBlocks();
  stored.medium = "NVME";
  std::vector<Entry> entries = LowerEngineEvent(stored, "w", 4);
  ASSERT_FALSE(entries.empty());
  EXPECT_EQ(entries[0].residency.tier, ResidencyTier::kUnknown);
  EXPECT_FALSE(entries[0].labels.contains("to_tier"));
}

TEST(LowerEngineEventTest, RemovalIsAnEvictedMissPerBlock) {
  BlockRemoved removed;
  removed.block_hashes = {7, 8, 9};
  removed.medium = "GPU";
  removed.group_idx = 1;
  std::vector<Entry> entries = LowerEngineEvent(removed, "worker-b", 16);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[2].id,
            (EntryId{"0000000000000009", MediaType::kKVSpan, 16, LengthUnit::kPositions}));
  for (const Entry& entry : entries) {
    EXPECT_EQ(entry.labels.at("direction"), "evict");
    EXPECT_EQ(entry.labels.at("from_tier"), "hbm");
    EXPECT_FALSE(entry.labels.contains("to_tier"));
    EXPECT_EQ(entry.residency.tier, ResidencyTier::kUnknown);
    EXPECT_EQ(entry.labels.at("worker"), "worker-b");
    EXPECT_EQ(entry.labels.at("group_idx"), "1");
    LookupVerdict verdict = KVTransferVerdict(entry);
    EXPECT_EQ(verdict.kind, LookupKind::kMiss);
    EXPECT_EQ(verdict.reason, LookupReason::kEvicted);
    EXPECT_FALSE(verdict.CanServe());
  }
}

TEST(LowerEngineEventTest, ClearedIsOneWildcardEviction) {
  std::vector<Entry> entries = LowerEngineEvent(AllBlocksCleared{}, "worker-c", 16);
  ASSERT_EQ(entries.size(), 1u);
  const Entry& entry = entries[0];
  EXPECT_EQ(entry.id.digest, "*");
  EXPECT_EQ(entry.labels.at("direction"), "evict");
  EXPECT_EQ(entry.labels.at("worker"), "worker-c");
  EXPECT_FALSE(entry.labels.contains("group_idx"));
  EXPECT_EQ(entry.residency.owner, "worker-c");
  LookupVerdict verdict = KVTransferVerdict(entry);
  EXPECT_EQ(verdict.kind, LookupKind::kMiss);
  EXPECT_EQ(verdict.reason, LookupReason::kEvicted);
}

TEST(LowerEngineEventTest, EmptyStoreLowersToNothingAndNegativeBlockSizeIsClamped) {
  EXPECT_TRUE(LowerEngineEvent(BlockStored{}, "w", 16).empty());
  BlockRemoved removed;
  removed.block_hashes = {1};
  std::vector<Entry> entries = LowerEngineEvent(removed, "w", -5);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].id.length, 0);
  EXPECT_TRUE(ValidateEntry(entries[0]).ok());
}

}  // namespace
}  // namespace kvgov

namespace kvgov {
namespace {

// LowerEngineEventEach builds one entry per event and rewrites its digest
// per block; every entry it hands over must be the one a block's own
// report lowers to.
Entry BlockEntry(KVTransferDirection direction, EngineHash hash, int64_t tokens,
                 ResidencyTier to_tier, ResidencyTier from_tier, const std::string& worker,
                 int64_t group_idx) {
  char digest[17];
  std::snprintf(digest, sizeof(digest), "%016llx", static_cast<unsigned long long>(hash));
  KVTransfer transfer;
  transfer.direction = direction;
  transfer.span.span_digest = digest;
  transfer.span.tokens = tokens;
  transfer.span.to_tier = to_tier;
  transfer.span.from_tier = from_tier;
  transfer.span.owner = worker;
  Entry entry = FromKVTransfer(transfer).value();
  entry.labels["worker"] = worker;
  entry.labels["group_idx"] = std::to_string(group_idx);
  return entry;
}

std::vector<Entry> Each(const EngineEvent& event, std::string_view worker, int64_t block_size) {
  std::vector<Entry> entries;
  LowerEngineEventEach(event, worker, block_size,
                       [&entries](const Entry& entry) { entries.push_back(entry); });
  return entries;
}

TEST(LowerEngineEventEachTest, EveryBlockGetsTheEntryItsOwnReportLowersTo) {
  BlockStored stored = TwoStoredBlocks();
  stored.block_hashes = {0x1, 0xFFFFFFFFFFFFFFFFull, 0, 0xABCDEF0123ull};
  stored.token_ids.resize(16);
  std::vector<Entry> entries = Each(stored, "worker-a", 16);
  ASSERT_EQ(entries.size(), 4u);
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i], BlockEntry(KVTransferDirection::kStore, stored.block_hashes[i], 4,
                                     ResidencyTier::kDRAM, ResidencyTier::kUnknown, "worker-a", 3))
        << "block " << i;
  }
  EXPECT_EQ(entries, LowerEngineEvent(stored, "worker-a", 16));

  BlockRemoved removed;
  removed.block_hashes = {9, 0x123456789ull};
  removed.medium = "DISK";
  removed.group_idx = 2;
  entries = Each(removed, "worker-b", 16);
  ASSERT_EQ(entries.size(), 2u);
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i], BlockEntry(KVTransferDirection::kEvict, removed.block_hashes[i], 16,
                                     ResidencyTier::kUnknown, ResidencyTier::kDisk, "worker-b", 2))
        << "block " << i;
  }
  EXPECT_EQ(entries, LowerEngineEvent(removed, "worker-b", 16));

  EXPECT_EQ(Each(AllBlocksCleared{}, "worker-c", 16),
            LowerEngineEvent(AllBlocksCleared{}, "worker-c", 16));
  EXPECT_TRUE(Each(BlockStored{}, "w", 16).empty());
  EXPECT_TRUE(Each(BlockRemoved{}, "w", 16).empty());
}

}  // namespace
}  // namespace kvgov
