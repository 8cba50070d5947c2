#pragma once

// HolderIndex: which workers hold each block key, for the first step of an
// overlap query (docs/adr/0007). Private to kvgov_index.
//
// Most keys have one holder, and a fleet's shared prefixes have a handful,
// so the table keeps one holder inline: a 12-byte slot (key, u32) per key.
// A key with two or more holders has instead, in that u32, the offset of its
// list in one shared u32 arena. A list is a header word (size, and the
// power-of-two capacity class) followed by the worker numbers, unordered;
// no per-list heap allocation, pointer or malloc header.
//
// A list outgrowing its block moves to the next class, and one shrinking to
// a quarter of its block to the previous one (the gap keeps a key whose
// holder count swings across a boundary from copying on every change).
// Freed blocks go to a free list of their class; and when freed blocks
// outweigh both the live lists and an eighth of the table's slots, the
// arena is compacted, rewriting every list's offset. Space is then at most
// about twice the live lists, and a compaction's walk of the table is paid
// for by at least that many words freed since the last one.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "index/flat_table.h"

namespace kvgov::index {

class HolderIndex {
 public:
  /// Worker numbers must be below this. It bounds a list's size, which
  /// shares its header word with the block's class; 67 million workers is
  /// far past any fleet one index serves.
  static constexpr uint32_t kWorkerLimit = uint32_t{1} << 26;

  /// Adds `worker` to `key`'s holders. REQUIRES: it is not one already, and
  /// worker < kWorkerLimit. Throws std::bad_alloc, like any container, when
  /// memory (or the arena's 2^31-word address space) runs out.
  void Add(uint64_t key, uint32_t worker);

  /// Drops `worker` from `key`'s holders; false if it was not one.
  bool Remove(uint64_t key, uint32_t worker);

  /// Calls fn(worker) for each holder of `key`, in no particular order.
  template <typename Fn>
  void ForEachHolder(uint64_t key, Fn&& fn) const {
    const auto slot = table_.Find(key);
    if (slot == FlatMap<uint32_t>::kNotFound) return;
    const uint32_t value = table_.ValueAt(slot);
    if ((value & kListBit) == 0) {
      fn(value);
      return;
    }
    const uint32_t offset = value & ~kListBit;
    const uint32_t size = arena_[offset] & kSizeMask;
    for (uint32_t i = 1; i <= size; ++i) fn(arena_[offset + i]);
  }

  /// The holders of `key`, in no particular order, valid until the next Add
  /// or Remove. A lone holder has no list in the arena: it is copied into
  /// `single`, which the span then points at.
  std::span<const uint32_t> Holders(uint64_t key, uint32_t& single) const {
    const auto slot = table_.Find(key);
    if (slot == FlatMap<uint32_t>::kNotFound) return {};
    const uint32_t value = table_.ValueAt(slot);
    if ((value & kListBit) == 0) {
      single = value;
      return {&single, 1};
    }
    const uint32_t offset = value & ~kListBit;
    return {arena_.data() + offset + 1, arena_[offset] & kSizeMask};
  }

  /// Starts loading `key`'s table slot into the cache (FlatMap::Prefetch).
  void Prefetch(uint64_t key) const { table_.Prefetch(key); }

  /// Keys with at least one holder.
  size_t keys() const { return table_.size(); }

  void Reserve(size_t keys) { table_.Reserve(keys); }

  /// After bulk removals (a worker cleared, removed or restored over):
  /// rebuilds a table that is mostly empty and compacts the arena, so that
  /// memory follows residency down as well as up.
  void ShrinkIfSparse();

  /// Heap bytes held (table and arena), for tests and accounting.
  size_t AllocatedBytes() const {
    return table_.AllocatedBytes() + arena_.capacity() * sizeof(uint32_t);
  }
  /// Words in the arena, live or free (for tests).
  size_t ArenaWords() const { return arena_.size(); }

 private:
  static constexpr uint32_t kListBit = uint32_t{1} << 31;
  // Header word: the block's class in the top bits, the list's size below.
  static constexpr unsigned kClassShift = 26;
  static constexpr uint32_t kSizeMask = (uint32_t{1} << kClassShift) - 1;
  static_assert(kWorkerLimit - 1 <= kSizeMask);
  static constexpr unsigned kClasses = kClassShift;  // capacities 2 .. 2^26
  static constexpr uint32_t kNoBlock = ~uint32_t{0};

  // Class c holds up to 2 << c workers, after its header.
  static constexpr uint32_t Capacity(unsigned cls) { return uint32_t{2} << cls; }
  static constexpr uint32_t BlockWords(unsigned cls) { return 1 + Capacity(cls); }
  static constexpr uint32_t Header(unsigned cls, uint32_t size) {
    return (static_cast<uint32_t>(cls) << kClassShift) | size;
  }

  uint32_t Allocate(unsigned cls);
  void Free(uint32_t offset, unsigned cls);
  // Moves a list to a block of class `cls`; returns the new offset.
  uint32_t Move(uint32_t offset, unsigned cls);
  void MaybeCompact();
  void Compact();

  FlatMap<uint32_t> table_;  // key -> worker, or kListBit | arena offset
  std::vector<uint32_t> arena_;
  std::array<uint32_t, kClasses> free_heads_ = MakeFreeHeads();  // by class, through word 0
  size_t live_words_ = 0;
  size_t free_words_ = 0;
  size_t live_lists_ = 0;

  static constexpr std::array<uint32_t, kClasses> MakeFreeHeads() {
    std::array<uint32_t, kClasses> heads{};
    heads.fill(kNoBlock);
    return heads;
  }
};

}  // namespace kvgov::index
