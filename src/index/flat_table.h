#pragma once

// FlatMap: the residency index's hash table (docs/adr/0007). Private to
// kvgov_index.
//
// Open addressing with linear probing over a power-of-two array of
// fixed-size slots, each the 8-byte key followed directly by the value, with
// no padding and no per-slot metadata. Why:
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
// Key 0 marks an empty slot (so a fresh array is calloc's zero pages). The
// key 0 itself, possible for engine hashes, is kept in one extra slot past
// the array, so every key is stored and looked up the same way by slot.
//
// Slots are packed (a u16 value makes a 10-byte slot), so fields are read
// and written with memcpy: well defined for any alignment, and one plain
// load or store on x86-64 and AArch64.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

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
    std::swap(shift_, other.shift_);
    std::swap(stored_, other.stored_);
    std::swap(has_zero_, other.has_zero_);
  }

  size_t size() const { return stored_ + (has_zero_ ? 1 : 0); }
  bool empty() const { return size() == 0; }
  /// Slots in the array (a power of two), 0 before the first insert.
  size_t capacity() const { return capacity_; }
  /// Heap bytes the table holds.
  size_t AllocatedBytes() const { return capacity_ == 0 ? 0 : (capacity_ + 1) * kSlotBytes; }

  /// The most entries (besides key 0) a table of `capacity` slots holds
  /// before it doubles: a load of 0.8. Past that, linear probing's cost for
  /// a miss (every insert of a new key is one) climbs fast: about 13 slots
  /// at 0.8, 32 at 0.875. Slots are 10-16 bytes, so 13 is two cache lines
  /// read in order.
  static constexpr size_t MaxLoad(size_t capacity) { return capacity / 5 * 4; }

  Slot Find(uint64_t key) const {
    if (key == 0) return has_zero_ ? capacity_ : kNotFound;
    if (stored_ == 0) return kNotFound;
    for (size_t i = Home(key);; i = (i + 1) & (capacity_ - 1)) {
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
      Rehash(capacity_ == 0 ? kMinCapacity : capacity_ * 2);
    }
    size_t i = Home(key);
    for (;; i = (i + 1) & (capacity_ - 1)) {
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
    const size_t mask = capacity_ - 1;
    size_t hole = slot;
    for (size_t i = (slot + 1) & mask;; i = (i + 1) & mask) {
      const uint64_t k = KeyAt(i);
      if (k == 0) break;
      if (((i - Home(k)) & mask) >= ((i - hole) & mask)) {
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
    shift_ = 64;
    stored_ = 0;
    has_zero_ = false;
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

  static size_t CapacityFor(size_t entries) {
    size_t capacity = kMinCapacity;
    while (MaxLoad(capacity) < entries) capacity *= 2;
    return capacity;
  }

  // The top bits of the mixed key: a multiplicative mix's best bits.
  size_t Home(uint64_t key) const { return static_cast<size_t>(MixKey(key) >> shift_); }

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
    std::unique_ptr<unsigned char[], FreeDeleter> old(raw);
    std::swap(old, slots_);
    const size_t old_capacity = capacity_;
    capacity_ = capacity;
    shift_ = 64 - std::countr_zero(capacity);
    const size_t mask = capacity - 1;
    for (size_t j = 0; j < old_capacity; ++j) {
      const unsigned char* from = old.get() + j * kSlotBytes;
      uint64_t key;
      std::memcpy(&key, from, sizeof(key));
      if (key == 0) continue;
      size_t i = Home(key);
      while (KeyAt(i) != 0) i = (i + 1) & mask;
      std::memcpy(SlotPtr(i), from, kSlotBytes);
    }
    if (has_zero_) {
      std::memcpy(SlotPtr(capacity_), old.get() + old_capacity * kSlotBytes, kSlotBytes);
    }
  }

  std::unique_ptr<unsigned char[], FreeDeleter> slots_;  // capacity_ + 1 slots
  size_t capacity_ = 0;
  int shift_ = 64;
  size_t stored_ = 0;  // entries in the array (key 0 is not)
  bool has_zero_ = false;
};

}  // namespace kvgov::index
