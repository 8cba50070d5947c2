#pragma once

// Internal to kvgov_index: a worker's slot in the residency index and the
// tables it keeps (the layout: residency_index.cc's opening comment), shared
// by the index (residency_index.cc) and its snapshot codec
// (residency_snapshot.cc). Guarded as the index's own members are: a slot
// by its shard's lock.

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "index/flat_table.h"
#include "index/holder_index.h"
#include "kvgov/index/residency_index.h"

namespace kvgov::index {

constexpr uint16_t TierBit(ResidencyTier tier) {
  return static_cast<uint16_t>(1u << static_cast<unsigned>(tier));
}

// Position of a tier in kIndexedTiers; tiers the index does not report
// separately (remote, cxl, ...) are counted as unknown.
inline size_t TierSlot(ResidencyTier tier) {
  for (size_t i = 0; i < kIndexedTiers.size(); ++i) {
    if (kIndexedTiers[i] == tier) return i;
  }
  return kIndexedTiers.size() - 1;
}

// The hottest indexed tier in a mask; unknown when only unknown tiers remain.
inline size_t BestTierSlot(uint16_t tiers) {
  for (size_t i = 0; i + 1 < kIndexedTiers.size(); ++i) {
    if (tiers & TierBit(kIndexedTiers[i])) return i;
  }
  return kIndexedTiers.size() - 1;
}

// An engine ref's salt lineage (ResidencyIndex::Residue): the chain root's
// first extra key it descends from, interned per worker.
using LineageTag = uint16_t;
inline constexpr LineageTag kUnsalted = 0;
inline constexpr LineageTag kUnattributed = 1;
inline constexpr LineageTag kFirstLineage = 2;  // tag t is Lineages::interned[t - kFirstLineage]
static_assert(ResidencyIndex::kMaxLineages + kFirstLineage <=
              std::numeric_limits<LineageTag>::max());

// One KV-cache group's engine hash -> kvgov key map, and the lineage of the
// refs that have one recorded (see WorkerSlot::TagOf): every key of
// `lineage` is a key of `keys`.
struct EngineGroup {
  int64_t group_idx = 0;
  FlatMap<BlockKey> keys;
  FlatMap<LineageTag> lineage;
};

// For looking interned root extra keys up by string_view, without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>()(text); }
};

// A worker's lineages and how many engine refs each has. The unsalted
// lineage's count is not kept: it is what the others leave of the refs.
struct Lineages {
  struct Interned {
    std::string root_extra_key;  // empty while the tag is free
    uint64_t refs = 0;
  };
  std::vector<Interned> interned;
  std::unordered_map<std::string, LineageTag, StringHash, std::equal_to<>> tags;
  // Tags whose lineage no ref holds any more: reused, so that the cap
  // bounds the lineages held at once, not all a worker ever saw.
  std::vector<LineageTag> free_tags;
  uint64_t unattributed = 0;  // refs tagged kUnattributed
  // Refs a restore brought in (snapshots carry no lineage), not removed or
  // stored again since. They have no lineage entry; while any remain, every
  // ref stored gets one, unsalted too, so that no entry means restored.
  uint64_t restored = 0;

  // Past the cap, kUnattributed: the root may be any tenant's.
  LineageTag Intern(std::string_view root_extra_key) {
    if (const auto it = tags.find(root_extra_key); it != tags.end()) return it->second;
    LineageTag tag = kUnattributed;
    if (!free_tags.empty()) {
      tag = free_tags.back();
      free_tags.pop_back();
    } else if (interned.size() < ResidencyIndex::kMaxLineages) {
      tag = static_cast<LineageTag>(kFirstLineage + interned.size());
      interned.emplace_back();
    } else {
      return kUnattributed;
    }
    interned[tag - kFirstLineage].root_extra_key = std::string(root_extra_key);
    tags.emplace(root_extra_key, tag);
    return tag;
  }
  void Add(LineageTag tag) {
    if (tag == kUnattributed) ++unattributed;
    if (tag >= kFirstLineage) ++interned[tag - kFirstLineage].refs;
  }
  void Drop(LineageTag tag) {
    if (tag == kUnattributed) --unattributed;
    if (tag < kFirstLineage) return;
    Interned& lineage = interned[tag - kFirstLineage];
    if (--lineage.refs > 0) return;
    tags.erase(lineage.root_extra_key);
    lineage.root_extra_key = std::string();
    free_tags.push_back(tag);
  }
};

// For a vector of groups sorted by group_idx, const or not.
template <typename Groups>
auto LowerBound(Groups& groups, int64_t group_idx) {
  return std::lower_bound(
      groups.begin(), groups.end(), group_idx,
      [](const EngineGroup& group, int64_t idx) { return group.group_idx < idx; });
}
template <typename Groups>
auto FindIn(Groups& groups, int64_t group_idx) -> decltype(&groups.front()) {
  auto it = LowerBound(groups, group_idx);
  return it != groups.end() && it->group_idx == group_idx ? &*it : nullptr;
}

struct ResidencyIndex::Shard {
  mutable std::shared_mutex mu;
  HolderIndex holders;
};

struct ResidencyIndex::WorkerSlot {
  uint32_t number = 0;
  uint32_t rank = 0;  // position in by_id_
  std::string id;
  std::string model;
  int64_t block_size = 0;
  uint64_t pool_blocks = 0;  // as registered; 0 when not declared
  WorkerState state = WorkerState::kLive;
  // Engine hash -> kvgov key, for parents and removals; a table per group,
  // sorted by group_idx. Empty tables are dropped (but for group 0's while
  // it is sized for a declared pool and nothing has been removed), so a
  // worker that only ever uses group 0 has exactly one.
  std::vector<EngineGroup> engine_groups;
  // Keys resident here that no engine ref may name (the value is unused).
  // A key may be in it and named by a ref too; a key leaves it when it
  // stops being resident here.
  FlatMap<uint8_t> loose;
  uint64_t pairs = 0;  // keys resident here, in any tier
  std::array<uint64_t, kIndexedTiers.size()> blocks{};
  SaltReporting salts = SaltReporting::kUnknown;
  // Saltless root keys of salted chains sent here (ExpectSaltedRoot), oldest
  // first; only while `salts` is not kReported.
  std::deque<BlockKey> salted_roots;
  uint32_t salt_blind_matches = 0;  // expectations matched by a saltless root
  Lineages lineages;

  EngineGroup* FindEngineGroup(int64_t group_idx) { return FindIn(engine_groups, group_idx); }
  const EngineGroup* FindEngineGroup(int64_t group_idx) const {
    return FindIn(engine_groups, group_idx);
  }
  const FlatMap<BlockKey>* FindGroup(int64_t group_idx) const {
    const EngineGroup* group = FindEngineGroup(group_idx);
    return group == nullptr ? nullptr : &group->keys;
  }
  // Adds the group's tables if there are none. Adding a group moves the
  // others: pointers from FindEngineGroup or Group are not kept across a call.
  EngineGroup& Group(int64_t group_idx) {
    auto it = LowerBound(engine_groups, group_idx);
    if (it == engine_groups.end() || it->group_idx != group_idx) {
      it = engine_groups.insert(it, EngineGroup{group_idx, {}, {}});
    }
    return *it;
  }
  void DropGroupIfEmpty(int64_t group_idx) {
    auto it = LowerBound(engine_groups, group_idx);
    if (it != engine_groups.end() && it->group_idx == group_idx && it->keys.empty()) {
      engine_groups.erase(it);
    }
  }
  size_t EngineRefs() const {
    size_t refs = 0;
    for (const EngineGroup& group : engine_groups) refs += group.keys.size();
    return refs;
  }
  // The tier mask of every resident key, when one engine ref names each
  // and every one is in the same single tier (an engine that never
  // offloads): then it is known without reading the holder words. Why that
  // follows from the counts: the resident keys are among the keys refs
  // name (`loose` being empty), so with as many refs as resident keys, each
  // ref names a resident key of its own; and with every pair counted in
  // one tier slot that stands for a single tier, that tier is each key's
  // only one.
  std::optional<uint16_t> UniformTiers() const {
    if (!loose.empty() || EngineRefs() != pairs) return std::nullopt;
    size_t in_use = 0;
    size_t tier = 0;
    uint64_t counted = 0;
    for (size_t t = 0; t < blocks.size(); ++t) {
      counted += blocks[t];
      if (blocks[t] != 0) {
        ++in_use;
        tier = t;
      }
    }
    // The last slot counts several tiers (kIndexedTiers' unknown).
    if (in_use != 1 || counted != pairs || tier + 1 == blocks.size()) return std::nullopt;
    return TierBit(kIndexedTiers[tier]);
  }
  // Whether a ref of the group may have a lineage other than unsalted. When
  // not (a worker that never stored a salted chain and was not restored),
  // events skip the lineage tables altogether.
  bool TracksLineage(const EngineGroup& group) const {
    return !group.lineage.empty() || lineages.restored > 0;
  }
  // The lineage of a ref of the group: its entry's, or without one,
  // unsalted, unless refs a restore brought in are outstanding: those are
  // the refs without one then.
  LineageTag TagOf(const EngineGroup& group, EngineHash hash) const {
    if (const auto at = group.lineage.Find(hash); at != FlatMap<LineageTag>::kNotFound) {
      return group.lineage.ValueAt(at);
    }
    return lineages.restored > 0 ? kUnattributed : kUnsalted;
  }
  // Gives a ref just stored in the group (`new_ref`: its hash was not
  // there before) the event's lineage.
  void Tag(EngineGroup& group, EngineHash hash, bool new_ref, LineageTag tag) {
    if (!new_ref) {
      if (const auto at = group.lineage.Find(hash); at != FlatMap<LineageTag>::kNotFound) {
        const LineageTag had = group.lineage.ValueAt(at);
        if (had == tag) return;
        lineages.Drop(had);
        lineages.Add(tag);
        if (tag == kUnsalted && lineages.restored == 0) {
          group.lineage.EraseAt(at);
        } else {
          group.lineage.SetValueAt(at, tag);
        }
        return;
      }
      if (lineages.restored > 0) {
        --lineages.restored;  // a restored ref: its lineage is known now
      } else if (tag == kUnsalted) {
        return;
      }
    }
    if (tag == kUnsalted && lineages.restored == 0) return;
    group.lineage.Insert(hash, tag);
    lineages.Add(tag);
  }
  // A ref of the group is gone from the worker.
  void Untag(EngineGroup& group, EngineHash hash) {
    if (const auto at = group.lineage.Find(hash); at != FlatMap<LineageTag>::kNotFound) {
      lineages.Drop(group.lineage.ValueAt(at));
      group.lineage.EraseAt(at);
    } else if (lineages.restored > 0) {
      --lineages.restored;
    }
  }
  // The worker's part of ResidencyIndex::Residue, but its id and model.
  // `holders` is its shard's.
  LineageResidue Residue(const std::function<bool(std::string_view)>& matches, bool by_tier,
                         const HolderIndex& holders) const {
    LineageResidue residue;
    residue.unattributed_refs = lineages.unattributed + lineages.restored;
    std::vector<bool> matched;  // by tag, once any lineage matches
    for (size_t i = 0; i < lineages.interned.size(); ++i) {
      const Lineages::Interned& lineage = lineages.interned[i];
      if (lineage.refs == 0 || !matches(lineage.root_extra_key)) continue;
      if (matched.empty()) matched.resize(kFirstLineage + lineages.interned.size());
      matched[kFirstLineage + i] = true;
      residue.matched_refs += lineage.refs;
    }
    if (!by_tier || residue.matched_refs == 0) return residue;
    if (const std::optional<uint16_t> uniform = UniformTiers(); uniform.has_value()) {
      residue.matched_by_tier[BestTierSlot(*uniform)] = residue.matched_refs;
      return residue;
    }
    for (const EngineGroup& group : engine_groups) {
      group.lineage.ForEach([&](EngineHash hash, LineageTag tag) {
        if (!matched[tag]) return;
        const auto at = group.keys.Find(hash);
        // Always found (a lineage entry is a ref's); a key in no tier, or
        // none, counts as unknown rather than not at all.
        const uint16_t tiers =
            at == FlatMap<BlockKey>::kNotFound ? 0 : holders.Tiers(group.keys.ValueAt(at), number);
        ++residue.matched_by_tier[BestTierSlot(tiers)];
      });
    }
    return residue;
  }
  // Calls fn(key) for every key resident here, and for keys engine refs
  // name that are not; a key may come more than once.
  template <typename Fn>
  void ForEachKey(Fn&& fn) const {
    for (const EngineGroup& group : engine_groups) {
      group.keys.ForEach([&](EngineHash, BlockKey key) { fn(key); });
    }
    loose.ForEach([&](BlockKey key, uint8_t) { fn(key); });
  }
};

}  // namespace kvgov::index
