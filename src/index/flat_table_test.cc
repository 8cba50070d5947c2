#include "index/flat_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <random>
#include <unordered_map>
#include <vector>

namespace kvgov::index {
namespace {

static_assert(FlatMap<uint16_t>::kSlotBytes == 10);
static_assert(FlatMap<uint32_t>::kSlotBytes == 12);
static_assert(FlatMap<uint64_t>::kSlotBytes == 16);

// The home slot of `key` in a table of `capacity` slots, as FlatMap computes it.
size_t HomeOf(uint64_t key, size_t capacity) {
  return static_cast<size_t>((static_cast<Uint128>(MixKey(key)) * capacity) >> 64);
}

// `n` nonzero keys whose home in a table of `capacity` slots is `home`.
std::vector<uint64_t> KeysWithHome(size_t home, size_t capacity, size_t n, uint64_t from = 1) {
  std::vector<uint64_t> keys;
  for (uint64_t key = from; keys.size() < n; ++key) {
    if (HomeOf(key, capacity) == home) keys.push_back(key);
  }
  return keys;
}

// Checks the map against a reference, both ways.
void ExpectSame(const FlatMap<uint64_t>& map, const std::unordered_map<uint64_t, uint64_t>& ref) {
  ASSERT_EQ(map.size(), ref.size());
  for (const auto& [key, value] : ref) {
    const auto slot = map.Find(key);
    ASSERT_NE(slot, FlatMap<uint64_t>::kNotFound) << "key " << key;
    EXPECT_EQ(map.KeyAt(slot), key);
    EXPECT_EQ(map.ValueAt(slot), value) << "key " << key;
  }
  size_t visited = 0;
  map.ForEach([&](uint64_t key, uint64_t value) {
    ++visited;
    auto it = ref.find(key);
    ASSERT_NE(it, ref.end()) << "key " << key;
    EXPECT_EQ(it->second, value);
  });
  EXPECT_EQ(visited, ref.size());
}

TEST(FlatMapTest, EmptyTableHoldsNothingAndAllocatesNothing) {
  FlatMap<uint64_t> map;
  EXPECT_TRUE(map.empty());
  EXPECT_EQ(map.capacity(), 0u);
  EXPECT_EQ(map.AllocatedBytes(), 0u);
  EXPECT_EQ(map.Find(0), FlatMap<uint64_t>::kNotFound);
  EXPECT_EQ(map.Find(42), FlatMap<uint64_t>::kNotFound);
  EXPECT_FALSE(map.Erase(42));
  map.ForEach([](uint64_t, uint64_t) { ADD_FAILURE() << "visited an entry of an empty map"; });
}

TEST(FlatMapTest, InsertFindOverwriteErase) {
  FlatMap<uint16_t> map;
  auto [slot, inserted] = map.Insert(7, 3);
  EXPECT_TRUE(inserted);
  EXPECT_EQ(map.ValueAt(slot), 3);
  auto [again, inserted_again] = map.Insert(7, 9);
  EXPECT_FALSE(inserted_again);
  EXPECT_EQ(again, slot);
  EXPECT_EQ(map.ValueAt(again), 3) << "Insert must not overwrite";
  map.InsertOrAssign(7, 9);
  EXPECT_EQ(map.ValueAt(map.Find(7)), 9);
  map.SetValueAt(map.Find(7), 0x1ff);
  EXPECT_EQ(map.ValueAt(map.Find(7)), 0x1ff);
  EXPECT_EQ(map.size(), 1u);
  EXPECT_TRUE(map.Erase(7));
  EXPECT_FALSE(map.Contains(7));
  EXPECT_TRUE(map.empty());
}

TEST(FlatMapTest, KeyZeroIsAnOrdinaryKey) {
  // 0 marks empty slots; the key 0 itself lives beside the array.
  FlatMap<uint64_t> map;
  EXPECT_TRUE(map.Insert(0, 11).second);
  EXPECT_FALSE(map.Insert(0, 12).second);
  EXPECT_TRUE(map.Insert(5, 55).second);
  EXPECT_EQ(map.size(), 2u);
  EXPECT_EQ(map.ValueAt(map.Find(0)), 11u);
  // It survives growth.
  for (uint64_t key = 1000; key < 1100; ++key) map.Insert(key, key);
  EXPECT_EQ(map.ValueAt(map.Find(0)), 11u);
  size_t zeros = 0;
  map.ForEach([&](uint64_t key, uint64_t value) {
    if (key == 0) {
      ++zeros;
      EXPECT_EQ(value, 11u);
    }
  });
  EXPECT_EQ(zeros, 1u);
  EXPECT_TRUE(map.Erase(0));
  EXPECT_FALSE(map.Contains(0));
  EXPECT_EQ(map.size(), 101u);
  EXPECT_TRUE(map.Contains(5));
}

TEST(FlatMapTest, GrowsByHalfAndKeepsLoadAtMostFourFifths) {
  FlatMap<uint64_t> map;
  std::unordered_map<uint64_t, uint64_t> ref;
  size_t last_capacity = 0;
  for (uint64_t i = 1; i <= 100000; ++i) {
    const uint64_t key = i * 0x100000001ULL;  // patterned, as engine hashes may be
    map.Insert(key, i);
    ref.emplace(key, i);
    if (map.capacity() != last_capacity) {
      EXPECT_EQ(map.capacity(), FlatMap<uint64_t>::GrownCapacity(last_capacity));
      // Grown by half, a table is still more than half full.
      if (last_capacity != 0) {
        EXPECT_GT(map.size() * 2, map.capacity()) << "at " << i;
      }
      last_capacity = map.capacity();
    }
    ASSERT_LE(map.size() * 5, map.capacity() * 4) << "at " << i;
  }
  EXPECT_NE(std::popcount(map.capacity()), 1) << "capacities are not only powers of two";
  ExpectSame(map, ref);
}

TEST(FlatMapTest, ReserveAvoidsRehashing) {
  FlatMap<uint64_t> map;
  map.Reserve(1000);
  const size_t capacity = map.capacity();
  EXPECT_GE(FlatMap<uint64_t>::MaxLoad(capacity), 1000u);
  EXPECT_LT(FlatMap<uint64_t>::MaxLoad(capacity - 1), 1000u) << "reserved more than needed";
  EXPECT_EQ(capacity, 1250u);  // exactly 0.8 full at 1,000 entries
  for (uint64_t key = 1; key <= 1000; ++key) map.Insert(key, key);
  EXPECT_EQ(map.capacity(), capacity);
  map.Reserve(10);  // never shrinks
  EXPECT_EQ(map.capacity(), capacity);
}

TEST(FlatMapTest, MakeRoomGrowsByHalfAtLeastAndNeverShrinks) {
  FlatMap<uint64_t> map;
  map.Reserve(1000);
  ASSERT_EQ(map.capacity(), 1250u);
  map.MakeRoom(1000);  // room already
  EXPECT_EQ(map.capacity(), 1250u);
  map.MakeRoom(1001);  // a little more: half again, not just enough
  EXPECT_EQ(map.capacity(), FlatMap<uint64_t>::GrownCapacity(1250));
  map.MakeRoom(10000);  // much more: enough
  EXPECT_EQ(map.capacity(), 12500u);
  map.MakeRoom(10);
  EXPECT_EQ(map.capacity(), 12500u);
  for (uint64_t key = 1; key <= 10000; ++key) map.Insert(key, key);
  EXPECT_EQ(map.capacity(), 12500u);
}

TEST(FlatMapTest, CollidingKeysAllResolve) {
  // Forty keys sharing one home in a 50-slot table: one run of forty.
  FlatMap<uint64_t> map;
  map.Reserve(40);
  ASSERT_EQ(map.capacity(), 50u);
  const std::vector<uint64_t> keys = KeysWithHome(5, 50, 40);
  for (uint64_t key : keys) ASSERT_TRUE(map.Insert(key, key + 1).second);
  ASSERT_EQ(map.capacity(), 50u);
  for (uint64_t key : keys) EXPECT_EQ(map.ValueAt(map.Find(key)), key + 1);
  // A key with the same home that is absent is reported absent.
  const uint64_t absent = KeysWithHome(5, 50, 1, keys.back() + 1)[0];
  EXPECT_FALSE(map.Contains(absent));
}

// A run that wraps past the end of a `capacity`-slot table: four keys
// homed at the second-to-last slot, two at the last, two at slot 0 and one
// at slot 1, erased from the front one at a time: every later key must stay
// reachable across the wrap, with no tombstones left.
void EraseAcrossTheWrap(size_t reserve, size_t capacity) {
  FlatMap<uint64_t> map;
  map.Reserve(reserve);
  ASSERT_EQ(map.capacity(), capacity);
  std::vector<uint64_t> keys = KeysWithHome(capacity - 2, capacity, 4);
  for (uint64_t key : KeysWithHome(capacity - 1, capacity, 2)) keys.push_back(key);
  for (uint64_t key : KeysWithHome(0, capacity, 2)) keys.push_back(key);
  keys.push_back(KeysWithHome(1, capacity, 1)[0]);
  std::unordered_map<uint64_t, uint64_t> ref;
  for (uint64_t key : keys) {
    map.Insert(key, key ^ 0xabc);
    ref.emplace(key, key ^ 0xabc);
  }
  ASSERT_EQ(map.capacity(), capacity);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(map.Erase(keys[i]));
    ref.erase(keys[i]);
    ExpectSame(map, ref);
    // No tombstones: the slots left in use are exactly the entries.
    size_t used = 0;
    for (size_t slot = 0; slot < map.capacity(); ++slot) used += map.KeyAt(slot) != 0;
    EXPECT_EQ(used, ref.size());
    // And every entry sits in the unbroken run from its home.
    for (size_t slot = 0; slot < map.capacity(); ++slot) {
      const uint64_t key = map.KeyAt(slot);
      if (key == 0) continue;
      for (size_t at = HomeOf(key, capacity); at != slot; at = (at + 1) % capacity) {
        EXPECT_NE(map.KeyAt(at), 0u) << "gap before key " << key;
      }
    }
  }
  EXPECT_TRUE(map.empty());
}

TEST(FlatMapTest, EraseShiftsTheRunBackWithoutTombstones) {
  EraseAcrossTheWrap(12, 16);
  EraseAcrossTheWrap(15, 19);  // a capacity no power of two
}

TEST(FlatMapTest, RandomOperationsMatchAReference) {
  // Small key space and few slots: long runs, wraps, and every mix of
  // insert, overwrite and erase, checked against std::unordered_map.
  std::mt19937_64 rng(20261129);
  FlatMap<uint64_t> map;
  std::unordered_map<uint64_t, uint64_t> ref;
  for (int step = 0; step < 200000; ++step) {
    const uint64_t key = rng() % 300;  // includes 0
    const uint64_t value = rng();
    switch (rng() % 4) {
      case 0:
        EXPECT_EQ(map.Insert(key, value).second, ref.emplace(key, value).second);
        break;
      case 1:
        map.InsertOrAssign(key, value);
        ref[key] = value;
        break;
      default:
        EXPECT_EQ(map.Erase(key), ref.erase(key) == 1);
        break;
    }
    if (step % 5000 == 0) ExpectSame(map, ref);
  }
  ExpectSame(map, ref);
}

TEST(FlatMapTest, RemovingEverythingAndReinsertingNeedsNoRehash) {
  // A tombstone table fills with markers under churn until it rehashes;
  // backward shift leaves the table as if the keys had never been there.
  FlatMap<uint16_t> map;
  std::mt19937_64 rng(7);
  std::vector<uint64_t> keys(50000);
  for (uint64_t& key : keys) key = rng() | 1;
  for (uint64_t key : keys) map.Insert(key, 1);
  const size_t capacity = map.capacity();
  for (int round = 0; round < 5; ++round) {
    for (uint64_t key : keys) ASSERT_TRUE(map.Erase(key));
    ASSERT_TRUE(map.empty());
    for (size_t slot = 0; slot < capacity; ++slot) ASSERT_EQ(map.KeyAt(slot), 0u);
    for (uint64_t& key : keys) key = rng() | 1;  // fresh keys each round
    for (uint64_t key : keys) map.Insert(key, 2);
    EXPECT_EQ(map.capacity(), capacity) << "round " << round;
    EXPECT_EQ(map.size(), keys.size());
  }
  for (uint64_t key : keys) EXPECT_EQ(map.ValueAt(map.Find(key)), 2);
}

TEST(FlatMapTest, ClearReleasesAndShrinkToFitRebuildsSmaller) {
  FlatMap<uint32_t> map;
  for (uint64_t key = 1; key <= 10000; ++key) map.Insert(key, static_cast<uint32_t>(key));
  const size_t big = map.capacity();
  for (uint64_t key = 1; key <= 9900; ++key) map.Erase(key);
  map.ShrinkToFit();
  EXPECT_LT(map.capacity(), big);
  EXPECT_EQ(map.capacity(), 125u);  // 100 entries at most 0.8 full
  for (uint64_t key = 9901; key <= 10000; ++key) EXPECT_EQ(map.ValueAt(map.Find(key)), key);
  map.Clear();
  EXPECT_TRUE(map.empty());
  EXPECT_EQ(map.capacity(), 0u);
  EXPECT_EQ(map.AllocatedBytes(), 0u);
  EXPECT_FALSE(map.Contains(10000));
  map.Insert(3, 4);  // usable after Clear
  EXPECT_EQ(map.ValueAt(map.Find(3)), 4u);
}

TEST(FlatMapTest, MovesAndSwapsTransferEverything) {
  FlatMap<uint64_t> a;
  a.Insert(0, 1);
  a.Insert(9, 2);
  FlatMap<uint64_t> b(std::move(a));
  EXPECT_EQ(b.size(), 2u);
  EXPECT_EQ(a.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(a.capacity(), 0u);
  a.Insert(5, 5);  // a moved-from map is usable
  a.swap(b);
  EXPECT_EQ(a.ValueAt(a.Find(9)), 2u);
  EXPECT_EQ(b.ValueAt(b.Find(5)), 5u);
  b = std::move(a);
  EXPECT_EQ(b.size(), 2u);
  EXPECT_TRUE(b.Contains(0));
}

TEST(FlatMapTest, ValuesAreNotTruncatedByPacking) {
  FlatMap<uint64_t> map;
  for (uint64_t key = 1; key <= 64; ++key) map.Insert(key, ~uint64_t{0} - key);
  for (uint64_t key = 1; key <= 64; ++key)
    EXPECT_EQ(map.ValueAt(map.Find(key)), ~uint64_t{0} - key);
  map.Insert(~uint64_t{0}, 1);
  EXPECT_EQ(map.ValueAt(map.Find(~uint64_t{0})), 1u);
}

}  // namespace
}  // namespace kvgov::index

namespace kvgov::index {
namespace {

TEST(FlatMapTest, PrefetchChangesNothing) {
  FlatMap<uint16_t> map;
  map.Prefetch(42);  // no array yet
  map.Prefetch(0);
  map.Insert(0, 1);  // key 0 alone: the array exists but holds no entry
  map.Prefetch(42);
  map.Insert(42, 2);
  for (uint64_t key : {uint64_t{0}, uint64_t{42}, uint64_t{43}}) map.Prefetch(key);
  EXPECT_EQ(map.size(), 2u);
  EXPECT_EQ(map.ValueAt(map.Find(0)), 1);
  EXPECT_EQ(map.ValueAt(map.Find(42)), 2);
  EXPECT_EQ(map.Find(43), FlatMap<uint16_t>::kNotFound);
}

TEST(FlatMapTest, InHomeOrderGivesEveryItemOnceInHomeOrder) {
  std::mt19937_64 rng(11);
  std::vector<uint64_t> keys(200000);
  for (uint64_t& key : keys) key = rng();
  auto identity = [](uint64_t key) { return key; };
  const HomeOrdered<uint64_t> ordered = InHomeOrder(std::span<const uint64_t>(keys), identity);
  ASSERT_EQ(ordered.size(), keys.size());
  // Bucketed by the top ten bits of the mixed key, buckets in order.
  for (size_t i = 1; i < ordered.size(); ++i) {
    ASSERT_LE(MixKey(ordered[i - 1]) >> 54, MixKey(ordered[i]) >> 54) << "at " << i;
  }
  std::vector<uint64_t> sorted(ordered.begin(), ordered.end());
  std::sort(sorted.begin(), sorted.end());
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(sorted, keys);
  // A small batch comes back as it was.
  const std::vector<uint64_t> few = {5, 3, 9};
  EXPECT_EQ(InHomeOrder(std::span<const uint64_t>(few), identity),
            HomeOrdered<uint64_t>(few.begin(), few.end()));
}

TEST(FlatMapTest, ABatchInHomeOrderNeedsItsRoomReservedFirst) {
  // A table at 0.8, then as many new keys again in home order. Reserved for
  // them first, the clusters stay as short as random filling leaves them.
  // Not reserved, the region the sweep has passed holds more keys than
  // slots until the table grows, and one run swallows the overflow: every
  // insert after it walks the run (the quadratic restore InHomeOrder warns
  // of).
  auto fill = [](bool reserve_first) {
    std::mt19937_64 rng(12);
    FlatMap<uint32_t> map;
    map.Reserve(100000);
    for (size_t i = 0; i < 100000; ++i) map.Insert(rng() | 1, 1);
    std::vector<uint64_t> batch(100000);
    for (uint64_t& key : batch) key = rng() | 1;
    const HomeOrdered<uint64_t> ordered =
        InHomeOrder(std::span<const uint64_t>(batch), [](uint64_t key) { return key; });
    if (reserve_first) map.Reserve(map.size() + ordered.size());
    size_t longest = 0;
    for (size_t i = 0; i < ordered.size(); ++i) {
      map.Insert(ordered[i], 2);
      if (i % 5000 == 0) longest = std::max(longest, map.LongestRun());
    }
    EXPECT_EQ(map.size(), 200000u);
    return longest;
  };
  // Seen: 285 slots reserved, 104,296 not.
  EXPECT_LT(fill(/*reserve_first=*/true), 1000u);
  EXPECT_GT(fill(/*reserve_first=*/false), 20000u);
}

}  // namespace
}  // namespace kvgov::index
