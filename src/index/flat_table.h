#pragma once

// FlatMap: the residency index's hash table (docs/adr/0007). Private to
// kvgov_index.
//
// Open addressing with linear probing over an array of fixed-size slots,
// each the 8-byte key followed directly by the value, with no padding and no
// per-slot metadata. Why:
//  - memory: a slot is 8 + sizeof(V) bytes (10 for a tier mask), where a
//    node-based map pays a node (key, value, next pointer, cached hash,
//    malloc header: 32-48 bytes) plus a bucket pointer per entry;
//  - speed: a lookup is one cache miss in the common case, and scans
//    (snapshots, clearing a worker) walk memory in order;
//  - deletion shifts the following entries back (Knuth's Algorithm R)
//    instead of leaving tombstones, so a table under constant insert/erase
//    churn (engine evictions) never degrades and never needs a cleanup
//    rehash.
// The cost: slots move, so a slot number is only valid until the next
// insert or erase, and the table must not be modified while iterated.
//
// The array may have any number of slots, not only a power of two: a key's
// home is its mixed hash scaled into [0, capacity) by one multiply
// (Lemire's "fastrange"). A table reserved for a known count (an engine's KV
// pool) is then sized to it, at a load of 0.8 when full, where a power of
// two would leave it anywhere between 0.4 and 0.8; and a growing table grows
// by half, not by doubling (ADR 0026).
//
// Key 0 marks an empty slot (so a fresh array is calloc's zero pages). The
// key 0 itself, possible for engine hashes, is kept in one extra slot past
// the array, so every key is stored and looked up the same way by slot.
//
// Slots are packed (a u16 value makes a 10-byte slot), so fields are read
// and written with memcpy: well defined for any alignment, and one plain
// load or store on x86-64 and AArch64.

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace kvgov::index {

/// Spreads every bit of a 64-bit key into the high bits the table indexes
/// by. Block keys are XXH3 output already, but engine hashes are whatever
/// the engine publishes (small integers in tests, structured values in some
/// engines); linear probing clusters badly on patterned keys, and the two
/// multiplies cost next to nothing beside the cache miss that follows.
/// (murmur3's fmix64 finalizer.)
constexpr uint64_t MixKey(uint64_t key) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  key *= 0xc4ceb9fe1a85ec53ULL;
  key ^= key >> 33;
  return key;
}

// GCC's and Clang's 128-bit integer, for the high half of a 64x64 product
// (one MUL on x86-64 and AArch64). __extension__: -Wpedantic names it
// non-standard, which it is.
__extension__ typedef unsigned __int128 Uint128;

/// Asks for transparent huge pages on the whole 2 MiB pages of a large
/// array about to be written all over (Linux; a hint, so any failure is
/// ignored). Its 4 KiB pages would each fault in on first touch: about
/// 90,000 faults for the tables of ten million pairs, which on a virtual
/// machine cost about as much as the inserts themselves (28% of a restart's
/// samples, docs/benchmarks.md). Call it before the first write.
inline void AdviseHugePages(void* array, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  const auto address = reinterpret_cast<uintptr_t>(array);
  const uintptr_t begin = (address + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (address + bytes) & ~(kHugePage - 1);
  // The first whole page as an offset into the array, not a cast back from
  // an integer, so the pointer keeps the array's provenance.
  if (end > begin) {
    (void)::madvise(static_cast<char*>(array) + (begin - address), end - begin, MADV_HUGEPAGE);
  }
#else
  (void)array;
  (void)bytes;
#endif
}

/// An allocator that leaves trivially copyable elements uninitialized when
/// a vector is sized, for buffers that are written in full right after: a
/// zeroing pass over hundreds of megabytes is one more walk of memory.
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* at) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(at)) U;
  }
  template <typename U, typename... Args>
  void construct(U* at, Args&&... args) {
    std::allocator_traits<std::allocator<T>>::construct(static_cast<std::allocator<T>&>(*this), at,
                                                        std::forward<Args>(args)...);
  }
};

template <typename T>
using HomeOrdered = std::vector<T, UninitializedAllocator<T>>;

/// The items in the order of their keys' home slots (coarsely: by the top
/// bits of MixKey, which is where a FlatMap of any capacity puts them), so
/// that a large batch of inserts or lookups walks a table's array from front
/// to back instead of jumping across it. Each stretch of the array then
/// comes into the cache and the TLB once rather than once per key:
/// restoring ten million keys this way is several times faster than in the
/// snapshot's key order, which is random to the table. Batches too small to
/// gain come back in their own order.
///
/// One trap: inserted in this order, new keys pile up at the front of the
/// sweep, so a table must have room for all of them before the first goes
/// in. Were the table's load plus the batch's share of its slots above 1,
/// the region already swept would hold more keys than slots, and every
/// later insert would walk the whole overflowing run (quadratic; seen at a
/// million keys). Count the keys that will be new, Reserve, then insert.
template <typename T, typename KeyOf>
HomeOrdered<T> InHomeOrder(std::span<const T> items, KeyOf&& key_of) {
  static_assert(std::is_trivially_copyable_v<T>);
  // 1,024 buckets: a bucket's stretch of a ten-million-slot table is about
  // 150 KiB, which the L2 cache holds, while the scatter below writes to
  // few enough places at once for its lines to stay cached.
  constexpr unsigned kBucketBits = 10;
  constexpr size_t kBuckets = size_t{1} << kBucketBits;
  constexpr size_t kMinItems = 64 * kBuckets;
  if (items.size() < kMinItems) return HomeOrdered<T>(items.begin(), items.end());
  auto bucket_of = [&](const T& item) {
    return static_cast<size_t>(MixKey(key_of(item)) >> (64 - kBucketBits));
  };
  std::vector<size_t> starts(kBuckets + 1, 0);
  for (const T& item : items) ++starts[bucket_of(item) + 1];
  for (size_t b = 0; b < kBuckets; ++b) starts[b + 1] += starts[b];
  HomeOrdered<T> ordered(items.size());  // every element written below
  AdviseHugePages(ordered.data(), ordered.size() * sizeof(T));
  for (const T& item : items) ordered[starts[bucket_of(item)]++] = item;
  return ordered;
}

/// A hash map from uint64_t keys to a small trivially copyable value.
/// Not thread-safe; the index's lock guards it.
template <typename V>
class FlatMap {
  static_assert(std::is_trivially_copyable_v<V>);

 public:
  /// A slot number: valid until the next Insert, Erase, Reserve or Clear.
  using Slot = size_t;
  static constexpr Slot kNotFound = ~Slot{0};
  static constexpr size_t kSlotBytes = sizeof(uint64_t) + sizeof(V);
  static constexpr size_t kMinCapacity = 16;

  FlatMap() = default;
  FlatMap(FlatMap&& other) noexcept { swap(other); }
  FlatMap& operator=(FlatMap&& other) noexcept {
    FlatMap moved(std::move(other));
    swap(moved);
    return *this;
  }
  FlatMap(const FlatMap&) = delete;
  FlatMap& operator=(const FlatMap&) = delete;
  ~FlatMap() = default;

  void swap(FlatMap& other) noexcept {
    std::swap(slots_, other.slots_);
    std::swap(capacity_, other.capacity_);
    std::swap(stored_, other.stored_);
    std::swap(has_zero_, other.has_zero_);
  }

  size_t size() const { return stored_ + (has_zero_ ? 1 : 0); }
  bool empty() const { return size() == 0; }
  /// Slots in the array, 0 before the first insert.
  size_t capacity() const { return capacity_; }
  /// Heap bytes the table holds.
  size_t AllocatedBytes() const { return capacity_ == 0 ? 0 : (capacity_ + 1) * kSlotBytes; }

  /// The most entries (besides key 0) a table of `capacity` slots holds
  /// before it grows: a load of 0.8. Past that, linear probing's cost for
  /// a miss (every insert of a new key is one) climbs fast: about 13 slots
  /// at 0.8, 32 at 0.875. Slots are 12-16 bytes, so 13 is about three cache
  /// lines read in order.
  static constexpr size_t MaxLoad(size_t capacity) { return capacity - (capacity + 4) / 5; }

  /// The capacity a table grows to from `capacity` when full: half again.
  /// Doubling would leave a grown table's load between 0.4 and 0.8; half
  /// again keeps it between 0.53 and 0.8, for 1.5x the rehashing.
  static constexpr size_t GrownCapacity(size_t capacity) {
    return capacity == 0 ? kMinCapacity : capacity + capacity / 2;
  }

  Slot Find(uint64_t key) const {
    if (key == 0) return has_zero_ ? capacity_ : kNotFound;
    if (stored_ == 0) return kNotFound;
    for (size_t i = Home(key);; i = Next(i)) {
      const uint64_t k = KeyAt(i);
      if (k == key) return i;
      if (k == 0) return kNotFound;
    }
  }
  bool Contains(uint64_t key) const { return Find(key) != kNotFound; }

  /// Starts loading `key`'s home slot into the cache, for a lookup, insert
  /// or erase soon after. Hinting several keys before touching any lets
  /// their cache misses overlap instead of each stalling in turn. A hint
  /// only: the table may change (even rehash) before the key is used.
  void Prefetch(uint64_t key) const {
    // Always issued, with a harmless address when there is no array: GCC 12
    // deletes a prefetch that is all a branch does.
    const void* at = capacity_ == 0 ? static_cast<const void*>(this) : SlotPtr(Home(key));
    __builtin_prefetch(at);
  }

  uint64_t KeyAt(Slot slot) const {
    uint64_t key;
    std::memcpy(&key, SlotPtr(slot), sizeof(key));
    return key;
  }
  V ValueAt(Slot slot) const {
    V value;
    std::memcpy(&value, SlotPtr(slot) + sizeof(uint64_t), sizeof(V));
    return value;
  }
  void SetValueAt(Slot slot, V value) {
    std::memcpy(SlotPtr(slot) + sizeof(uint64_t), &value, sizeof(V));
  }

  /// Inserts (key, value) unless the key is present, whose value is then
  /// left alone. Returns the key's slot and whether it was inserted.
  std::pair<Slot, bool> Insert(uint64_t key, V value) {
    if (key == 0) {
      if (capacity_ == 0) Rehash(kMinCapacity);
      if (has_zero_) return {capacity_, false};
      has_zero_ = true;
      Write(capacity_, 0, value);
      return {capacity_, true};
    }
    if (stored_ >= MaxLoad(capacity_)) {
      // Grow only for a key that is really new: a full table must still
      // answer for the keys it holds without doubling.
      if (Slot found = Find(key); found != kNotFound) return {found, false};
      Rehash(GrownCapacity(capacity_));
    }
    size_t i = Home(key);
    for (;; i = Next(i)) {
      const uint64_t k = KeyAt(i);
      if (k == key) return {i, false};
      if (k == 0) break;
    }
    Write(i, key, value);
    ++stored_;
    return {i, true};
  }

  /// Inserts the key or overwrites its value.
  void InsertOrAssign(uint64_t key, V value) {
    auto [slot, inserted] = Insert(key, value);
    if (!inserted) SetValueAt(slot, value);
  }

  /// Removes the entry in `slot` (from Find or Insert).
  void EraseAt(Slot slot) {
    if (slot == capacity_) {
      has_zero_ = false;
      return;
    }
    // Backward shift: walk the run after the hole and move back every entry
    // whose probe path (home .. where it sits) passes over the hole, so that
    // each remaining key is still reachable from its home without gaps.
    size_t hole = slot;
    for (size_t i = Next(slot);; i = Next(i)) {
      const uint64_t k = KeyAt(i);
      if (k == 0) break;
      if (Distance(Home(k), i) >= Distance(hole, i)) {
        std::memcpy(SlotPtr(hole), SlotPtr(i), kSlotBytes);
        hole = i;
      }
    }
    std::memset(SlotPtr(hole), 0, kSlotBytes);
    --stored_;
  }
  bool Erase(uint64_t key) {
    const Slot slot = Find(key);
    if (slot == kNotFound) return false;
    EraseAt(slot);
    return true;
  }

  /// Makes room for `entries` entries without growing again.
  void Reserve(size_t entries) {
    const size_t capacity = CapacityFor(entries);
    if (capacity > capacity_) Rehash(capacity);
  }

  /// Makes room for `entries` entries, like Reserve, but grows by at least
  /// half when it must grow at all: for a table that takes large batches
  /// one after another (a worker restored after another), whose exact
  /// reservations would each rehash everything and leave no room for the
  /// next insert.
  void MakeRoom(size_t entries) {
    if (MaxLoad(capacity_) >= entries) return;
    Rehash(std::max(CapacityFor(entries), GrownCapacity(capacity_)));
  }

  /// Rebuilds at the smallest capacity that holds the entries, when that is
  /// smaller: for tables that shrank a lot (a worker's residency replaced or
  /// cleared), whose empty slots would otherwise stay allocated.
  void ShrinkToFit() {
    if (size() == 0) {
      Clear();
      return;
    }
    const size_t capacity = CapacityFor(stored_);
    if (capacity < capacity_) Rehash(capacity);
  }

  /// Removes every entry and releases the array.
  void Clear() {
    slots_.reset();
    capacity_ = 0;
    stored_ = 0;
    has_zero_ = false;
  }

  /// The longest run of occupied slots (a cluster), which bounds what a
  /// miss costs: for tests of how a table was filled.
  size_t LongestRun() const {
    size_t longest = 0;
    size_t run = 0;
    // Twice round, so a run across the end of the array counts whole.
    for (size_t i = 0; i < 2 * capacity_; ++i) {
      run = KeyAt(i % capacity_) != 0 ? run + 1 : 0;
      longest = std::max(longest, std::min(run, capacity_));
    }
    return longest;
  }

  /// Calls fn(key, value) for every entry, in slot order (no meaningful
  /// order). The table must not change during the walk.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (size_t i = 0; i < capacity_; ++i) {
      const uint64_t key = KeyAt(i);
      if (key != 0) fn(key, ValueAt(i));
    }
    if (has_zero_) fn(uint64_t{0}, ValueAt(capacity_));
  }

  /// Same, with the slot, for walks that update values in place (SetValueAt
  /// is allowed; insert and erase are not).
  template <typename Fn>
  void ForEachSlot(Fn&& fn) {
    for (size_t i = 0; i < capacity_; ++i) {
      if (KeyAt(i) != 0) fn(Slot{i});
    }
    if (has_zero_) fn(Slot{capacity_});
  }

 private:
  struct FreeDeleter {
    void operator()(unsigned char* p) const { std::free(p); }
  };

  // The fewest slots that hold `entries` at a load of at most 0.8.
  static size_t CapacityFor(size_t entries) {
    size_t capacity = std::max(kMinCapacity, entries + entries / 4);
    while (MaxLoad(capacity) < entries) ++capacity;
    return capacity;
  }

  // The mixed key scaled into [0, capacity): its high bits pick the slot,
  // the multiplicative mix's best bits, as a shift would for a power of two.
  size_t Home(uint64_t key) const {
    return static_cast<size_t>((static_cast<Uint128>(MixKey(key)) * capacity_) >> 64);
  }
  size_t Next(size_t slot) const { return slot + 1 == capacity_ ? 0 : slot + 1; }
  // Slots from `from` forward to `to`, wrapping past the end.
  size_t Distance(size_t from, size_t to) const {
    return to >= from ? to - from : to + capacity_ - from;
  }

  unsigned char* SlotPtr(Slot slot) const { return slots_.get() + slot * kSlotBytes; }

  void Write(Slot slot, uint64_t key, V value) {
    std::memcpy(SlotPtr(slot), &key, sizeof(key));
    std::memcpy(SlotPtr(slot) + sizeof(uint64_t), &value, sizeof(V));
  }

  void Rehash(size_t capacity) {
    // calloc rather than new + fill: a large array comes straight from
    // mmap already zeroed, so pages are touched once, by the inserts below.
    // Running out of memory fails the way every standard container in this
    // module already does.
    auto* raw = static_cast<unsigned char*>(std::calloc(capacity + 1, kSlotBytes));
    if (raw == nullptr) throw std::bad_alloc();
    AdviseHugePages(raw, (capacity + 1) * kSlotBytes);
    std::unique_ptr<unsigned char[], FreeDeleter> old(raw);
    std::swap(old, slots_);
    const size_t old_capacity = capacity_;
    capacity_ = capacity;
    for (size_t j = 0; j < old_capacity; ++j) {
      const unsigned char* from = old.get() + j * kSlotBytes;
      uint64_t key;
      std::memcpy(&key, from, sizeof(key));
      if (key == 0) continue;
      size_t i = Home(key);
      while (KeyAt(i) != 0) i = Next(i);
      std::memcpy(SlotPtr(i), from, kSlotBytes);
    }
    if (has_zero_) {
      std::memcpy(SlotPtr(capacity_), old.get() + old_capacity * kSlotBytes, kSlotBytes);
    }
  }

  std::unique_ptr<unsigned char[], FreeDeleter> slots_;  // capacity_ + 1 slots
  size_t capacity_ = 0;
  size_t stored_ = 0;  // entries in the array (key 0 is not)
  bool has_zero_ = false;
};

}  // namespace kvgov::index
