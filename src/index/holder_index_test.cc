#include "index/holder_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <span>
#include <vector>

namespace kvgov::index {
namespace {

constexpr uint16_t kHbm = 1u << 1;

// The workers holding `key`, sorted.
std::vector<uint32_t> Holders(const HolderIndex& index, uint64_t key) {
  std::vector<uint32_t> out;
  index.ForEachHolder(key, [&](uint32_t holder) { out.push_back(HolderIndex::WorkerOf(holder)); });
  std::sort(out.begin(), out.end());
  return out;
}

TEST(HolderIndexTest, OneHolderNeedsNoList) {
  HolderIndex index;
  index.AddTiers(10, 3, kHbm);
  EXPECT_EQ(Holders(index, 10), std::vector<uint32_t>{3});
  EXPECT_EQ(index.ArenaWords(), 0u);
  EXPECT_TRUE(Holders(index, 11).empty());
  EXPECT_FALSE(index.Remove(10, 4));
  EXPECT_FALSE(index.Remove(11, 3));
  EXPECT_TRUE(index.Remove(10, 3));
  EXPECT_EQ(index.keys(), 0u);
}

TEST(HolderIndexTest, ListsGrowShrinkAndFallBackInline) {
  HolderIndex index;
  std::vector<uint32_t> expected;
  for (uint32_t worker = 0; worker < 100; ++worker) {
    index.AddTiers(0, worker, kHbm);  // key 0 is a key like any other
    expected.push_back(worker);
    ASSERT_EQ(Holders(index, 0), expected);
  }
  EXPECT_GT(index.ArenaWords(), 100u);
  // Take them out in a scrambled order.
  std::mt19937 rng(1);
  std::shuffle(expected.begin(), expected.end(), rng);
  while (expected.size() > 1) {
    ASSERT_TRUE(index.Remove(0, expected.back()));
    EXPECT_FALSE(index.Remove(0, expected.back()));
    expected.pop_back();
    std::vector<uint32_t> sorted = expected;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(Holders(index, 0), sorted);
  }
  // One holder left: inline again, and with no list live the arena is gone.
  EXPECT_EQ(index.ArenaWords(), 0u);
  EXPECT_TRUE(index.Remove(0, expected[0]));
  EXPECT_TRUE(Holders(index, 0).empty());
}

TEST(HolderIndexTest, CompactionBoundsTheArena) {
  // Each key climbs through classes 2, 4, 8, 16, 32, freeing a block at
  // every step, and no key ever wants a small block again: without
  // compaction the arena would hold 3 + 5 + 9 + 17 + 33 = 67 words a key
  // for 33 live ones.
  HolderIndex index;
  constexpr uint64_t kKeys = 1000;
  for (uint32_t worker = 0; worker < 32; ++worker) {
    for (uint64_t key = 1; key <= kKeys; ++key) index.AddTiers(key, worker, kHbm);
  }
  EXPECT_LE(index.ArenaWords(), 2 * 33 * kKeys);
  for (uint64_t key = 1; key <= kKeys; ++key) ASSERT_EQ(Holders(index, key).size(), 32u);
}

TEST(HolderIndexTest, RandomOperationsMatchAReference) {
  // Tiers added and taken away at random, some of them the last a holder
  // had, checked against std::map: each call's answer, every holder's
  // tiers, and the holder lists themselves.
  std::mt19937_64 rng(99);
  HolderIndex index;
  std::map<uint64_t, std::map<uint32_t, uint16_t>> ref;
  auto expect_same = [&] {
    size_t keys = 0;
    for (const auto& [k, holders] : ref) {
      keys += holders.empty() ? 0 : 1;
      std::vector<uint32_t> workers;
      for (const auto& [worker, tiers] : holders) {
        workers.push_back(worker);
        ASSERT_EQ(index.Tiers(k, worker), tiers) << k << " " << worker;
      }
      ASSERT_EQ(Holders(index, k), workers) << k;
    }
    EXPECT_EQ(index.keys(), keys);
  };
  for (int step = 0; step < 200000; ++step) {
    const uint64_t key = rng() % 500;
    const auto worker = static_cast<uint32_t>(rng() % 40);
    const auto tiers = static_cast<uint16_t>(1u << (rng() % 3) | (rng() % 4 == 0 ? 1u << 5 : 0u));
    std::map<uint32_t, uint16_t>& holders = ref[key];
    const uint16_t before = holders.count(worker) ? holders[worker] : 0;
    switch (rng() % 3) {
      case 0:
        ASSERT_EQ(index.AddTiers(key, worker, tiers), before);
        holders[worker] = before | tiers;
        break;
      case 1:
        ASSERT_EQ(index.RemoveTiers(key, worker, tiers), before);
        if ((before & ~tiers) != 0) {
          holders[worker] = before & ~tiers;
        } else {
          holders.erase(worker);
        }
        break;
      default:
        ASSERT_EQ(index.Remove(key, worker), before);
        holders.erase(worker);
        break;
    }
    if (step % 10000 == 0) expect_same();
  }
  expect_same();
}

TEST(HolderIndexTest, EveryWorkerNumberAndTierMaskRoundTrips) {
  HolderIndex index;
  const uint32_t last = HolderIndex::kWorkerLimit - 1;
  EXPECT_EQ(index.AddTiers(1, last, HolderIndex::kAllTiers), 0);
  EXPECT_EQ(index.AddTiers(1, 0, 1), 0);  // now a list
  EXPECT_EQ(index.Tiers(1, last), HolderIndex::kAllTiers);
  EXPECT_EQ(index.Tiers(1, 0), 1);
  EXPECT_EQ(index.RemoveTiers(1, 0, 1), 1);  // inline again
  EXPECT_EQ(index.Tiers(1, last), HolderIndex::kAllTiers);
  EXPECT_EQ(Holders(index, 1), std::vector<uint32_t>{last});
  EXPECT_EQ(index.RemoveTiers(1, last, static_cast<uint16_t>(HolderIndex::kAllTiers & ~1u)),
            HolderIndex::kAllTiers);
  EXPECT_EQ(index.Tiers(1, last), 1);
}

TEST(HolderIndexTest, ShrinkIfSparseReleasesMemory) {
  HolderIndex index;
  for (uint64_t key = 1; key <= 100000; ++key) {
    index.AddTiers(key, 1, kHbm);
    if (key % 10 == 0) index.AddTiers(key, 2, kHbm);
  }
  const size_t full = index.AllocatedBytes();
  for (uint64_t key = 1; key <= 99000; ++key) {
    index.Remove(key, 1);
    index.Remove(key, 2);
  }
  index.ShrinkIfSparse();
  EXPECT_LT(index.AllocatedBytes(), full / 20);
  for (uint64_t key = 99001; key <= 100000; ++key) {
    ASSERT_EQ(Holders(index, key).size(), key % 10 == 0 ? 2u : 1u);
  }
}

}  // namespace
}  // namespace kvgov::index

namespace kvgov::index {
namespace {

TEST(HolderIndexTest, HoldersSpanAListOrTheLoneHolder) {
  HolderIndex index;
  uint32_t single = 0;
  EXPECT_TRUE(index.Holders(7, single).empty());
  index.AddTiers(7, 3, kHbm);
  std::span<const uint32_t> lone = index.Holders(7, single);
  ASSERT_EQ(lone.size(), 1u);
  EXPECT_EQ(lone.data(), &single);  // no list: copied out of the table
  EXPECT_EQ(lone[0], HolderIndex::Holder(3, kHbm));
  index.AddTiers(7, 9, kHbm);
  index.AddTiers(7, 4, kHbm);
  std::span<const uint32_t> list = index.Holders(7, single);
  std::vector<uint32_t> sorted;
  for (uint32_t holder : list) sorted.push_back(HolderIndex::WorkerOf(holder));
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<uint32_t>{3, 4, 9}));
  EXPECT_EQ(sorted, Holders(index, 7));
}

TEST(HolderIndexTest, PrefetchIsOnlyAHint) {
  HolderIndex index;
  index.Prefetch(5);  // an empty table: nothing to touch
  index.Prefetch(0);
  index.AddTiers(5, 1, kHbm);
  index.Prefetch(5);
  index.Prefetch(6);
  index.Prefetch(0);
  EXPECT_EQ(Holders(index, 5), std::vector<uint32_t>{1});
  EXPECT_EQ(index.keys(), 1u);
}

}  // namespace
}  // namespace kvgov::index
