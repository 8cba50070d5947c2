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

std::vector<uint32_t> Holders(const HolderIndex& index, uint64_t key) {
  std::vector<uint32_t> out;
  index.ForEachHolder(key, [&](uint32_t worker) { out.push_back(worker); });
  std::sort(out.begin(), out.end());
  return out;
}

TEST(HolderIndexTest, OneHolderNeedsNoList) {
  HolderIndex index;
  index.Add(10, 3);
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
    index.Add(0, worker);  // key 0 is a key like any other
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
    for (uint64_t key = 1; key <= kKeys; ++key) index.Add(key, worker);
  }
  EXPECT_LE(index.ArenaWords(), 2 * 33 * kKeys);
  for (uint64_t key = 1; key <= kKeys; ++key) ASSERT_EQ(Holders(index, key).size(), 32u);
}

TEST(HolderIndexTest, RandomOperationsMatchAReference) {
  std::mt19937_64 rng(99);
  HolderIndex index;
  std::map<uint64_t, std::set<uint32_t>> ref;
  for (int step = 0; step < 200000; ++step) {
    const uint64_t key = rng() % 500;
    const auto worker = static_cast<uint32_t>(rng() % 40);
    std::set<uint32_t>& holders = ref[key];
    if (rng() % 2 == 0) {
      if (holders.insert(worker).second) index.Add(key, worker);
    } else {
      EXPECT_EQ(index.Remove(key, worker), holders.erase(worker) == 1);
    }
    if (step % 10000 == 0) {
      for (const auto& [k, set] : ref) {
        ASSERT_EQ(Holders(index, k), std::vector<uint32_t>(set.begin(), set.end())) << k;
      }
    }
  }
  size_t keys = 0;
  for (const auto& [k, set] : ref) {
    keys += set.empty() ? 0 : 1;
    ASSERT_EQ(Holders(index, k), std::vector<uint32_t>(set.begin(), set.end())) << k;
  }
  EXPECT_EQ(index.keys(), keys);
}

TEST(HolderIndexTest, ShrinkIfSparseReleasesMemory) {
  HolderIndex index;
  for (uint64_t key = 1; key <= 100000; ++key) {
    index.Add(key, 1);
    if (key % 10 == 0) index.Add(key, 2);
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
  index.Add(7, 3);
  std::span<const uint32_t> lone = index.Holders(7, single);
  ASSERT_EQ(lone.size(), 1u);
  EXPECT_EQ(lone.data(), &single);  // no list: copied out of the table
  EXPECT_EQ(lone[0], 3u);
  index.Add(7, 9);
  index.Add(7, 4);
  std::span<const uint32_t> list = index.Holders(7, single);
  std::vector<uint32_t> sorted(list.begin(), list.end());
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<uint32_t>{3, 4, 9}));
  EXPECT_EQ(sorted, Holders(index, 7));
}

TEST(HolderIndexTest, PrefetchIsOnlyAHint) {
  HolderIndex index;
  index.Prefetch(5);  // an empty table: nothing to touch
  index.Prefetch(0);
  index.Add(5, 1);
  index.Prefetch(5);
  index.Prefetch(6);
  index.Prefetch(0);
  EXPECT_EQ(Holders(index, 5), std::vector<uint32_t>{1});
  EXPECT_EQ(index.keys(), 1u);
}

}  // namespace
}  // namespace kvgov::index
