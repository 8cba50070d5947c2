#pragma once

// HolderIndex: which workers hold each block key, and in which tiers, for
// overlap queries and for every change of residency (docs/adr/0007, 0026).
// Private to kvgov_index.
//
// A holder is one u32 word: the worker number above kTierBits bits of tier
// mask (bit i is ResidencyTier value i). This is the only place a (key,
// worker) pair's tiers are kept: a worker's own tables map its engine's
// hashes to keys and no more.
//
// Most keys have one holder, and a fleet's shared prefixes have a handful,
// so the table keeps one holder inline: a 12-byte slot (key, u32) per key.
// A key with two or more holders has instead, in that u32, the offset of its
// list in one shared u32 arena. A list is a header word (size, and the
// power-of-two capacity class) followed by the holder words, unordered; no
// per-list heap allocation, pointer or malloc header.
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
  /// Bits of tier mask in a holder word: one per ResidencyTier value.
  static constexpr unsigned kTierBits = 9;
  static constexpr uint16_t kAllTiers = (uint16_t{1} << kTierBits) - 1;
  /// Worker numbers must be below this: the number, the tier mask and the
  /// inline/list bit share one word. Four million workers is far past any
  /// fleet one index serves.
  static constexpr uint32_t kWorkerLimit = uint32_t{1} << (31 - kTierBits);

  /// A holder word's parts.
  static constexpr uint32_t WorkerOf(uint32_t holder) { return holder >> kTierBits; }
  static constexpr uint16_t TiersOf(uint32_t holder) {
    return static_cast<uint16_t>(holder & kAllTiers);
  }
  static constexpr uint32_t Holder(uint32_t worker, uint16_t tiers) {
    return (worker << kTierBits) | tiers;
  }

  /// Adds `tiers` to `worker`'s tiers for `key`, making it a holder if it
  /// was not one. Returns the tiers it had before (0: it was no holder).
  /// REQUIRES: worker < kWorkerLimit, tiers within kAllTiers and not 0.
  /// Throws std::bad_alloc, like any container, when memory (or the
  /// arena's 2^31-word address space) runs out.
  uint16_t AddTiers(uint64_t key, uint32_t worker, uint16_t tiers);

  /// Takes `tiers` out of `worker`'s tiers for `key`; a holder left with
  /// none stops being one. Returns the tiers it had before (0: no holder).
  uint16_t RemoveTiers(uint64_t key, uint32_t worker, uint16_t tiers);

  /// Drops `worker` from `key`'s holders; returns the tiers it had (0: it
  /// was no holder).
  uint16_t Remove(uint64_t key, uint32_t worker) { return RemoveTiers(key, worker, kAllTiers); }

  /// `worker`'s tiers for `key`; 0 when it is no holder.
  uint16_t Tiers(uint64_t key, uint32_t worker) const {
    uint32_t single = 0;
    for (uint32_t holder : Holders(key, single)) {
      if (WorkerOf(holder) == worker) return TiersOf(holder);
    }
    return 0;
  }

  /// Calls fn(holder word) for each holder of `key`, in no particular order.
  template <typename Fn>
  void ForEachHolder(uint64_t key, Fn&& fn) const {
    uint32_t single = 0;
    for (uint32_t holder : Holders(key, single)) fn(holder);
  }

  /// The holder words of `key`, in no particular order, valid until the
  /// next change. A lone holder has no list in the arena: it is copied into
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
  bool Contains(uint64_t key) const { return table_.Contains(key); }

  void Reserve(size_t keys) { table_.Reserve(keys); }
  void MakeRoom(size_t keys) { table_.MakeRoom(keys); }

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

  // Appends a holder to `slot`'s key, which has at least one.
  void AppendHolder(FlatMap<uint32_t>::Slot slot, uint32_t holder);
  // Removes the holder at `at` (an arena index) from the list at `offset`.
  void RemoveFromList(FlatMap<uint32_t>::Slot slot, uint32_t offset, uint32_t* at);
  uint32_t Allocate(unsigned cls);
  void Free(uint32_t offset, unsigned cls);
  // Moves a list to a block of class `cls`; returns the new offset.
  uint32_t Move(uint32_t offset, unsigned cls);
  void MaybeCompact();
  void Compact();

  FlatMap<uint32_t> table_;  // key -> holder word, or kListBit | arena offset
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
