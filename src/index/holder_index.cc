#include "index/holder_index.h"

#include <algorithm>
#include <new>

namespace kvgov::index {

uint16_t HolderIndex::AddTiers(uint64_t key, uint32_t worker, uint16_t tiers) {
  const uint32_t added = Holder(worker, tiers);
  auto [slot, inserted] = table_.Insert(key, added);
  if (inserted) return 0;
  const uint32_t value = table_.ValueAt(slot);
  if ((value & kListBit) == 0) {
    if (WorkerOf(value) == worker) {
      table_.SetValueAt(slot, value | tiers);
      return TiersOf(value);
    }
    AppendHolder(slot, added);
    return 0;
  }
  const uint32_t offset = value & ~kListBit;
  uint32_t* first = &arena_[offset + 1];
  uint32_t* last = first + (arena_[offset] & kSizeMask);
  for (uint32_t* at = first; at != last; ++at) {
    if (WorkerOf(*at) == worker) {
      const uint16_t before = TiersOf(*at);
      *at |= tiers;
      return before;
    }
  }
  AppendHolder(slot, added);
  return 0;
}

void HolderIndex::AppendHolder(FlatMap<uint32_t>::Slot slot, uint32_t holder) {
  const uint32_t value = table_.ValueAt(slot);
  if ((value & kListBit) == 0) {
    const uint32_t offset = Allocate(0);
    arena_[offset] = Header(0, 2);
    arena_[offset + 1] = value;
    arena_[offset + 2] = holder;
    table_.SetValueAt(slot, kListBit | offset);
    ++live_lists_;
    return;
  }
  uint32_t offset = value & ~kListBit;
  unsigned cls = arena_[offset] >> kClassShift;
  const uint32_t size = arena_[offset] & kSizeMask;
  if (size == Capacity(cls)) {
    offset = Move(offset, ++cls);
    table_.SetValueAt(slot, kListBit | offset);
  }
  arena_[offset + 1 + size] = holder;
  arena_[offset] = Header(cls, size + 1);
  MaybeCompact();  // last: it rewrites table values under `slot`
}

uint16_t HolderIndex::RemoveTiers(uint64_t key, uint32_t worker, uint16_t tiers) {
  const auto slot = table_.Find(key);
  if (slot == FlatMap<uint32_t>::kNotFound) return 0;
  const uint32_t value = table_.ValueAt(slot);
  if ((value & kListBit) == 0) {
    if (WorkerOf(value) != worker) return 0;
    const uint16_t before = TiersOf(value);
    if ((before & ~tiers) != 0) {
      table_.SetValueAt(slot, value & ~uint32_t{tiers});
    } else {
      table_.EraseAt(slot);
    }
    return before;
  }
  const uint32_t offset = value & ~kListBit;
  uint32_t* first = &arena_[offset + 1];
  uint32_t* last = first + (arena_[offset] & kSizeMask);
  for (uint32_t* at = first; at != last; ++at) {
    if (WorkerOf(*at) != worker) continue;
    const uint16_t before = TiersOf(*at);
    if ((before & ~tiers) != 0) {
      *at &= ~uint32_t{tiers};
    } else {
      RemoveFromList(slot, offset, at);
    }
    return before;
  }
  return 0;
}

void HolderIndex::RemoveFromList(FlatMap<uint32_t>::Slot slot, uint32_t offset, uint32_t* at) {
  const unsigned cls = arena_[offset] >> kClassShift;
  uint32_t size = arena_[offset] & kSizeMask;
  uint32_t* first = &arena_[offset + 1];
  *at = first[size - 1];  // order is free: swap the last one in
  --size;
  if (size == 1) {
    // Back inline: a list of one is a word of table plus a block for nothing.
    table_.SetValueAt(slot, *first);
    Free(offset, cls);
    --live_lists_;
  } else {
    arena_[offset] = Header(cls, size);
    if (cls > 0 && size * 4 <= Capacity(cls)) {
      table_.SetValueAt(slot, kListBit | Move(offset, cls - 1));
    }
  }
  MaybeCompact();
}

void HolderIndex::ShrinkIfSparse() {
  // Only below a quarter of what the table may hold: the O(capacity)
  // rebuild is then paid for by the removals that emptied it, and a table
  // that merely dipped keeps its size.
  if (table_.size() < FlatMap<uint32_t>::MaxLoad(table_.capacity()) / 4) table_.ShrinkToFit();
  // The same amortised rule as after each removal, now against the smaller
  // table: a small worker cleared over and over must not walk a big table.
  MaybeCompact();
}

uint32_t HolderIndex::Allocate(unsigned cls) {
  const uint32_t words = BlockWords(cls);
  if (free_heads_[cls] != kNoBlock) {
    const uint32_t offset = free_heads_[cls];
    free_heads_[cls] = arena_[offset];
    free_words_ -= words;
    live_words_ += words;
    return offset;
  }
  // Offsets share the u32 table value with the list bit. Compaction keeps
  // the arena within about twice the live lists, so this is ~2^30 holder
  // entries of shared keys: tens of GiB of index, far past its envelope.
  if (arena_.size() + words > kListBit) throw std::bad_alloc();
  const auto offset = static_cast<uint32_t>(arena_.size());
  arena_.resize(arena_.size() + words);
  live_words_ += words;
  return offset;
}

void HolderIndex::Free(uint32_t offset, unsigned cls) {
  const uint32_t words = BlockWords(cls);
  live_words_ -= words;
  free_words_ += words;
  arena_[offset] = free_heads_[cls];
  free_heads_[cls] = offset;
}

uint32_t HolderIndex::Move(uint32_t offset, unsigned cls) {
  const uint32_t size = arena_[offset] & kSizeMask;
  const unsigned old_cls = arena_[offset] >> kClassShift;
  // Allocate may grow the arena: offsets, not pointers, across it.
  const uint32_t to = Allocate(cls);
  std::copy_n(arena_.begin() + offset + 1, size, arena_.begin() + to + 1);
  arena_[to] = Header(cls, size);
  Free(offset, old_cls);
  return to;
}

void HolderIndex::MaybeCompact() {
  if (live_lists_ == 0) {
    // Nothing refers to the arena: drop it rather than walk the table.
    if (!arena_.empty()) {
      std::vector<uint32_t>().swap(arena_);
      free_heads_ = MakeFreeHeads();
      live_words_ = 0;
      free_words_ = 0;
    }
    return;
  }
  if (free_words_ > live_words_ && free_words_ * 8 > table_.capacity()) Compact();
}

void HolderIndex::Compact() {
  std::vector<uint32_t> compacted;
  compacted.reserve(live_words_);
  table_.ForEachSlot([&](FlatMap<uint32_t>::Slot slot) {
    const uint32_t value = table_.ValueAt(slot);
    if ((value & kListBit) == 0) return;
    const uint32_t offset = value & ~kListBit;
    const uint32_t words = BlockWords(arena_[offset] >> kClassShift);
    const auto to = static_cast<uint32_t>(compacted.size());
    compacted.insert(compacted.end(), arena_.begin() + offset, arena_.begin() + offset + words);
    table_.SetValueAt(slot, kListBit | to);
  });
  arena_.swap(compacted);
  free_heads_ = MakeFreeHeads();
  free_words_ = 0;
}

}  // namespace kvgov::index
