// The residency index's memory layout (docs/adr/0007, 0026).
//
// Tables are FlatMap (flat_table.h): linear probing over packed slots of
// key + value, load at most 0.8, backward-shift deletion, any capacity. Per
// resident (block, worker) pair, in slots:
//  - the worker's engine table, engine hash -> key: 8 + 8 = 16 bytes. One
//    table per KV-cache group rather than the group in every slot: the group
//    is almost always 0, and a hybrid model's few groups each get a table
//    as dense as group 0's;
//  - the shard's holders (holder_index.h), key -> one inline holder word (worker number
//    and tier mask), or a list in a shared arena for a key several workers
//    hold: 8 + 4 = 12 bytes per key, so a share of that per pair when the
//    key is shared.
// 28 bytes of slots per unshared pair, 35 at a load of 0.8 (a worker sized
// for its declared pool, when the pool is full). A ref of a salted chain
// (or any ref stored while refs a restore brought in are still unattributed)
// also has a slot in its group's lineage table, engine hash -> lineage tag:
// 8 + 2 = 10 bytes; a worker that never stores one has an empty table.
//
// Workers are sharded (docs/adr/0027): each shard has its own holder table,
// over its own workers only, behind its own lock. A key held by workers of
// two shards has a slot in each.
//
// A pair's tiers live only in its holder word. The worker's own tables name
// its keys: every key an engine ref names, and `loose`, the keys made
// resident without one (a transport's report by key, an engine ref that
// moved to another key). Walks of one worker (clear, snapshot, restore) go
// through those, so they stay proportional to that worker's residency.

#include "kvgov/index/residency_index.h"

#include <algorithm>
#include <deque>
#include <array>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "index/flat_table.h"
#include "index/holder_index.h"

namespace kvgov::index {
namespace {

// Blocks of one event applied per round of prefetches: enough misses in
// flight to cover the latency, few enough that the first prefetched lines
// are still cached when the writes reach them.
constexpr size_t kApplyChunk = 16;

constexpr uint16_t TierBit(ResidencyTier tier) {
  return static_cast<uint16_t>(1u << static_cast<unsigned>(tier));
}

// Position of a tier in kIndexedTiers; tiers the index does not report
// separately (remote, cxl, ...) are counted as unknown.
size_t TierSlot(ResidencyTier tier) {
  for (size_t i = 0; i < kIndexedTiers.size(); ++i) {
    if (kIndexedTiers[i] == tier) return i;
  }
  return kIndexedTiers.size() - 1;
}

// The hottest indexed tier in a mask; unknown when only unknown tiers remain.
size_t BestTierSlot(uint16_t tiers) {
  for (size_t i = 0; i + 1 < kIndexedTiers.size(); ++i) {
    if (tiers & TierBit(kIndexedTiers[i])) return i;
  }
  return kIndexedTiers.size() - 1;
}

// The group a chain's keys are rooted in. Routes ask for group 0's. A
// full-attention group holds the whole prefix, so route credit comes from
// it whatever number the engine gave it; any other kind of group (sliding
// window, mamba, ...) keeps only part of a prefix and is keyed apart, so its
// evictions never withdraw the full-attention group's credit. An engine that
// does not report kinds keeps its group numbers (docs/formats/block-keys.md).
int64_t NamespaceGroup(const BlockStored& stored) {
  if (stored.kv_cache_spec_kind.empty()) return stored.group_idx;
  if (stored.kv_cache_spec_kind == "full_attention") return 0;
  return stored.group_idx + (int64_t{1} << 32);
}

// Overlap's map from worker number to candidate, for workers that are none.
constexpr uint32_t kNotCandidate = ~uint32_t{0};

// Most blocks' lists compare equal to the one before. Most lists are short,
// where a plain loop beats a call to memcmp; long ones are left to it.
bool SameList(std::span<const uint32_t> a, std::span<const uint32_t> b) {
  if (a.size() != b.size()) return false;
  if (a.size() > 8) return std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

// Entries gathered shard by shard, put in worker id order; `ranks` holds
// each entry's worker's position in by_id_.
template <typename Entry>
std::vector<Entry> InRankOrder(std::vector<Entry> entries, std::span<const uint32_t> ranks) {
  std::vector<uint32_t> order(entries.size());
  std::iota(order.begin(), order.end(), uint32_t{0});
  auto by_rank = [&](uint32_t a, uint32_t b) { return ranks[a] < ranks[b]; };
  // Often so already: with one shard, a key's holders are listed in the
  // order they came, and workers' numbers often follow their ids.
  if (std::is_sorted(order.begin(), order.end(), by_rank)) return entries;
  std::sort(order.begin(), order.end(), by_rank);
  std::vector<Entry> sorted;
  sorted.reserve(entries.size());
  for (uint32_t at : order) sorted.push_back(std::move(entries[at]));
  return sorted;
}

// Whether a chain root's first extra key holds more than the LoRA name:
// the adapter writes a LoRA name an engine reports beside the hashes into
// the extra keys itself (AddReportedExtraKeys), so only what is beyond it
// can be the cache salt.
bool RootHoldsMoreThanLora(const BlockStored& stored) {
  if (stored.extra_keys.empty() || stored.extra_keys.front().empty()) return false;
  return stored.extra_keys.front() != FirstBlockExtraKey(stored.lora_name, "");
}

}  // namespace

std::string_view ToString(WorkerState state) {
  return state == WorkerState::kLive ? "live" : "stale";
}

std::string_view ToString(SaltReporting salts) {
  switch (salts) {
    case SaltReporting::kReported:
      return "reported";
    case SaltReporting::kNotReported:
      return "not_reported";
    case SaltReporting::kUnknown:
      break;
  }
  return "unknown";
}

namespace {

// An engine ref's salt lineage (ResidencyIndex::Residue): the chain root's
// first extra key it descends from, interned per worker.
using LineageTag = uint16_t;
constexpr LineageTag kUnsalted = 0;
constexpr LineageTag kUnattributed = 1;
constexpr LineageTag kFirstLineage = 2;  // tag t is Lineages::interned[t - kFirstLineage]
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

}  // namespace

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

ResidencyIndex::ResidencyIndex(BlockKeyHasher hasher, size_t shards) : hasher_(hasher) {
  shards_.resize(std::clamp<size_t>(shards, 1, kMaxShards));
  for (auto& shard : shards_) shard = std::make_unique<Shard>();
}
ResidencyIndex::~ResidencyIndex() = default;

template <typename Lock>
std::pair<ResidencyIndex::WorkerSlot*, Lock> ResidencyIndex::LockWorker(
    std::string_view worker) const {
  ReadLock registry(registry_mu_);
  WorkerSlot* slot = FindLocked(worker);
  if (slot == nullptr) return {nullptr, Lock()};
  return {slot, Lock(ShardOf(slot->number).mu)};
}

std::vector<ResidencyIndex::ReadLock> ResidencyIndex::LockAllForRead() const {
  std::vector<ReadLock> locks;
  locks.reserve(shards_.size());
  for (const auto& shard : shards_) locks.emplace_back(shard->mu);
  return locks;
}

ResidencyIndex::WorkerSlot* ResidencyIndex::FindLocked(std::string_view worker) const {
  auto it = worker_numbers_.find(std::string(worker));
  return it == worker_numbers_.end() ? nullptr : workers_[it->second].get();
}

Status ResidencyIndex::AddWorker(std::string_view worker, std::string_view model,
                                 int64_t block_size, uint64_t pool_blocks) {
  if (worker.empty()) return Status::InvalidArgument("worker: required, got empty");
  if (model.empty()) return Status::InvalidArgument("model: required, got empty");
  if (block_size <= 0) {
    return Status::InvalidArgument("block_size: must be > 0, got " + std::to_string(block_size));
  }
  WriteLock registry(registry_mu_);
  if (FindLocked(worker) != nullptr) {
    return Status::AlreadyExists("worker '" + std::string(worker) + "' is already registered");
  }
  if (free_numbers_.empty() && workers_.size() >= HolderIndex::kWorkerLimit) {
    return Status::ResourceExhausted("workers: the index holds at most " +
                                     std::to_string(HolderIndex::kWorkerLimit));
  }
  auto slot = std::make_unique<WorkerSlot>();
  if (free_numbers_.empty()) {
    slot->number = static_cast<uint32_t>(workers_.size());
    workers_.emplace_back();
  } else {
    // Reused: RemoveWorker took the number out of every holder list.
    slot->number = free_numbers_.back();
    free_numbers_.pop_back();
  }
  slot->id = std::string(worker);
  slot->model = std::string(model);
  slot->block_size = block_size;
  slot->pool_blocks = pool_blocks;
  if (pool_blocks > 0) {
    // Group 0 is the one engines without hybrid KV-cache groups use. Keys
    // land all over a table, so it costs its full size in memory once a few
    // thousand blocks are in, whether or not the pool ever fills: that is
    // why a pool is declared, not guessed.
    slot->Group(0).keys.Reserve(pool_blocks);
    // Keys with a holder in the shard are at least as many as one full
    // pool's blocks, however much its workers share: sized for that, the
    // table is never larger than this worker alone would make it.
    Shard& shard = ShardOf(slot->number);
    WriteLock lock(shard.mu);
    shard.holders.Reserve(std::max<uint64_t>(shard.holders.keys(), pool_blocks));
  }
  worker_numbers_.emplace(slot->id, slot->number);
  const auto at = std::lower_bound(
      by_id_.begin(), by_id_.end(), slot->id,
      [this](uint32_t number, const std::string& id) { return workers_[number]->id < id; });
  by_id_.insert(at, slot->number);
  workers_[slot->number] = std::move(slot);
  RankLocked();
  return Status::Ok();
}

void ResidencyIndex::RankLocked() {
  for (size_t i = 0; i < by_id_.size(); ++i) workers_[by_id_[i]]->rank = static_cast<uint32_t>(i);
}

Status ResidencyIndex::RemoveWorker(std::string_view worker) {
  WriteLock registry(registry_mu_);
  WorkerSlot* slot = FindLocked(worker);
  if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
  WriteLock lock(ShardOf(slot->number).mu);
  ClearLocked(*slot);
  worker_numbers_.erase(slot->id);
  by_id_.erase(by_id_.begin() + slot->rank);
  free_numbers_.push_back(slot->number);
  workers_[slot->number].reset();
  RankLocked();
  return Status::Ok();
}

Status ResidencyIndex::ClearWorker(std::string_view worker) {
  auto [slot, lock] = LockWorker<WriteLock>(worker);
  if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
  ClearLocked(*slot);
  return Status::Ok();
}

Status ResidencyIndex::SetState(std::string_view worker, WorkerState state) {
  auto [slot, lock] = LockWorker<WriteLock>(worker);
  if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
  slot->state = state;
  return Status::Ok();
}

void ResidencyIndex::ClearLocked(WorkerSlot& slot) {
  // A restart may be another engine version: learn its salt reporting again.
  slot.salts = SaltReporting::kUnknown;
  slot.salted_roots.clear();
  slot.salt_blind_matches = 0;
  slot.lineages = Lineages();
  std::vector<BlockKey> keys;
  keys.reserve(slot.pairs);
  slot.ForEachKey([&](BlockKey key) { keys.push_back(key); });
  HolderIndex& holders = ShardOf(slot.number).holders;
  for (BlockKey key : InHomeOrder(std::span<const BlockKey>(keys), [](BlockKey key) { return key; })) {
    holders.Remove(key, slot.number);
  }
  // Released, not kept for reuse: an engine that clears (a restart) refills
  // gradually, and a table's growth as it does is cheap beside holding the
  // old size for a worker that may stay small.
  slot.engine_groups.clear();
  slot.loose.Clear();
  slot.pairs = 0;
  slot.blocks.fill(0);
  holders.ShrinkIfSparse();
}

uint16_t ResidencyIndex::AddTierLocked(WorkerSlot& slot, BlockKey key, ResidencyTier tier) {
  const uint16_t bit = TierBit(tier);
  const uint16_t before = ShardOf(slot.number).holders.AddTiers(key, slot.number, bit);
  if (before == 0) ++slot.pairs;
  if ((before & bit) == 0) ++slot.blocks[TierSlot(tier)];
  return before;
}

ResidencyIndex::Removal ResidencyIndex::RemoveTierLocked(WorkerSlot& slot, BlockKey key,
                                                         ResidencyTier tier) {
  const uint16_t bit = TierBit(tier);
  const uint16_t before = ShardOf(slot.number).holders.RemoveTiers(key, slot.number, bit);
  if ((before & bit) == 0) return Removal::kNotResident;
  --slot.blocks[TierSlot(tier)];
  if ((before & ~bit) != 0) return Removal::kTierRemoved;
  --slot.pairs;
  if (!slot.loose.empty()) slot.loose.Erase(key);
  return Removal::kPairRemoved;
}

// What a BlockStored says of the engine's salt reporting: any extra key
// shows the engine publishes them, and vLLM's and SGLang's put the salt
// among them; a chain root without any, keyed as a salted chain sent here
// would key unsalted, is that chain with its salt dropped. True when the
// blocks are that chain's and must not be indexed.
//
// Only a chain root's first extra key is evidence, and only beyond the LoRA
// name (RootHoldsMoreThanLora).
bool ResidencyIndex::NoteSaltReportingLocked(WorkerSlot& slot, const BlockStored& stored) {
  if (stored.parent_block_hash.has_value() || stored.block_hashes.empty()) return false;
  if (RootHoldsMoreThanLora(stored)) {
    // The engine keys its roots with more than the LoRA name: it reports
    // salts, whatever an earlier coincidence suggested.
    slot.salts = SaltReporting::kReported;
    slot.salted_roots.clear();
    slot.salt_blind_matches = 0;
    return false;
  }
  if (slot.salts == SaltReporting::kReported || slot.salted_roots.empty()) return false;
  const BlockKey root = SaltlessRoot(
      hasher_, ChainNamespace{slot.model, stored.lora_name, NamespaceGroup(stored)},
      std::span(stored.token_ids).first(static_cast<size_t>(slot.block_size)));
  const auto expected = std::find(slot.salted_roots.begin(), slot.salted_roots.end(), root);
  if (expected == slot.salted_roots.end()) return false;
  slot.salted_roots.erase(expected);
  // One match may be an unsalted request for the same first block that
  // came in first; two are the engine. Either way these blocks may be the
  // salted request's, so they are not indexed.
  if (++slot.salt_blind_matches >= kSaltBlindMatches) slot.salts = SaltReporting::kNotReported;
  return true;
}

ApplyResult ResidencyIndex::ApplyStoredLocked(WorkerSlot& slot, const BlockStored& stored) {
  ApplyResult result;
  if (NoteSaltReportingLocked(slot, stored)) {
    // Its children arrive as orphans (their parent was never indexed).
    result.salt_blind_blocks = stored.block_hashes.size();
    return result;
  }
  const ResidencyTier tier = TierForMedium(stored.medium, stored.locality);
  BlockKey parent = 0;
  // Every block of the event descends from the same root: each one's
  // parent is the block before.
  LineageTag lineage = kUnsalted;
  if (stored.parent_block_hash.has_value()) {
    const EngineGroup* group = slot.FindEngineGroup(stored.group_idx);
    const auto at = group == nullptr ? FlatMap<BlockKey>::kNotFound
                                     : group->keys.Find(*stored.parent_block_hash);
    if (at == FlatMap<BlockKey>::kNotFound) {
      // Without the parent's key the chain cannot be keyed; crediting these
      // blocks under a guessed parent could match the wrong prefix.
      result.orphan_blocks = stored.block_hashes.size();
      return result;
    }
    parent = group->keys.ValueAt(at);
    lineage = slot.TagOf(*group, *stored.parent_block_hash);
  } else {
    parent = hasher_.Root(ChainNamespace{slot.model, stored.lora_name, NamespaceGroup(stored)});
  }
  if (stored.block_hashes.empty()) return result;
  if (!stored.parent_block_hash.has_value() && RootHoldsMoreThanLora(stored)) {
    lineage = slot.lineages.Intern(stored.extra_keys.front());
  }
  const size_t block_size = static_cast<size_t>(slot.block_size);
  std::span<const int64_t> tokens(stored.token_ids);
  EngineGroup& group = slot.Group(stored.group_idx);
  FlatMap<BlockKey>& refs = group.keys;
  // Decided once an event: an unsalted event on a worker with no lineage
  // to track touches no lineage table.
  const bool track_lineage = lineage != kUnsalted || slot.TracksLineage(group);
  HolderIndex& holders = ShardOf(slot.number).holders;
  const size_t blocks = stored.block_hashes.size();
  // A chunk's keys are hashed first, each key's slots in both tables
  // prefetched as soon as it is known, and only then written: the tables
  // are far larger than the cache, and block by block every write waited
  // for its own misses. The writes happen in the same order as before.
  std::array<BlockKey, kApplyChunk> keys;
  for (size_t begin = 0; begin < blocks; begin += kApplyChunk) {
    const size_t end = std::min(blocks, begin + kApplyChunk);
    for (size_t i = begin; i < end; ++i) {
      // Both arms string_view: a "" arm would make the result a temporary
      // std::string and leave `extra` dangling.
      std::string_view extra = i < stored.extra_keys.size()
                                   ? std::string_view(stored.extra_keys[i])
                                   : std::string_view();
      parent = hasher_.Next(parent, tokens.subspan(i * block_size, block_size), extra);
      keys[i - begin] = parent;
      refs.Prefetch(stored.block_hashes[i]);
      holders.Prefetch(parent);
      if (track_lineage) group.lineage.Prefetch(stored.block_hashes[i]);
    }
    for (size_t i = begin; i < end; ++i) {
      const BlockKey key = keys[i - begin];
      auto [ref, new_hash] = refs.Insert(stored.block_hashes[i], key);
      if (!new_hash) {
        const BlockKey named = refs.ValueAt(ref);
        if (named != key) {
          refs.SetValueAt(ref, key);
          // The key this hash named may still be resident with nothing else
          // naming it: keep it where the worker's walks find it.
          if (holders.Tiers(named, slot.number) != 0) slot.loose.Insert(named, 0);
        }
      }
      if (track_lineage) slot.Tag(group, stored.block_hashes[i], new_hash, lineage);
      // The same tokens already resident in this tier under another engine
      // hash: the engine hashes differently than it did (a hash seed that
      // changed, PYTHONHASHSEED unset across processes of one engine).
      if ((AddTierLocked(slot, key, tier) & TierBit(tier)) != 0 && new_hash) {
        ++result.hash_drift_blocks;
      }
    }
  }
  result.blocks_stored = stored.block_hashes.size();
  if (tier == ResidencyTier::kUnknown) result.unknown_medium = stored.block_hashes.size();
  return result;
}

ApplyResult ResidencyIndex::ApplyRemovedLocked(WorkerSlot& slot, const BlockRemoved& removed) {
  ApplyResult result;
  const ResidencyTier tier = TierForMedium(removed.medium, removed.locality);
  EngineGroup* group = slot.FindEngineGroup(removed.group_idx);
  if (group == nullptr) {
    result.unknown_removals = removed.block_hashes.size();
    return result;
  }
  FlatMap<BlockKey>* refs = &group->keys;
  const bool track_lineage = slot.TracksLineage(*group);
  const HolderIndex& holders = ShardOf(slot.number).holders;
  const std::span<const EngineHash> hashes(removed.block_hashes);
  for (size_t begin = 0; begin < hashes.size(); begin += kApplyChunk) {
    const std::span<const EngineHash> chunk =
        hashes.subspan(begin, std::min(kApplyChunk, hashes.size() - begin));
    // Prefetched in two waves (engine hash -> key, then the key's holder
    // slot) and only then removed, so the misses of a chunk overlap (see
    // ApplyStoredLocked). The hints change nothing: removal below looks
    // every hash up again.
    for (EngineHash hash : chunk) refs->Prefetch(hash);
    for (EngineHash hash : chunk) {
      const auto at = refs->Find(hash);
      if (at != FlatMap<BlockKey>::kNotFound) holders.Prefetch(refs->ValueAt(at));
    }
    for (EngineHash hash : chunk) {
      const auto at = refs->Find(hash);
      if (at == FlatMap<BlockKey>::kNotFound) {
        ++result.unknown_removals;
        continue;
      }
      const Removal removal = RemoveTierLocked(slot, refs->ValueAt(at), tier);
      if (removal == Removal::kNotResident) {
        ++result.unknown_removals;
        continue;
      }
      ++result.blocks_removed;
      // Keep the engine mapping while another tier still holds the block: a
      // later removal from that tier, or a child's parent lookup, needs it.
      // (`at` is still good: RemoveTierLocked changes other tables only.)
      if (removal != Removal::kPairRemoved) continue;
      refs->EraseAt(at);
      if (track_lineage) slot.Untag(*group, hash);
    }
  }
  slot.DropGroupIfEmpty(removed.group_idx);
  return result;
}

Result<ApplyResult> ResidencyIndex::Apply(std::string_view worker, const EngineEvent& event) {
  auto [slot, lock] = LockWorker<WriteLock>(worker);
  if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
  if (const auto* stored = std::get_if<BlockStored>(&event)) {
    if (stored->block_size != slot->block_size) {
      return Status::InvalidArgument("block_size: worker '" + slot->id + "' uses " +
                                     std::to_string(slot->block_size) + ", event has " +
                                     std::to_string(stored->block_size));
    }
    if (stored->token_ids.size() !=
        stored->block_hashes.size() * static_cast<size_t>(slot->block_size)) {
      return Status::InvalidArgument(
          "token_ids: " + std::to_string(stored->token_ids.size()) + " tokens for " +
          std::to_string(stored->block_hashes.size()) + " blocks of " +
          std::to_string(slot->block_size));
    }
    return ApplyStoredLocked(*slot, *stored);
  }
  if (const auto* removed = std::get_if<BlockRemoved>(&event)) {
    return ApplyRemovedLocked(*slot, *removed);
  }
  ClearLocked(*slot);
  return ApplyResult{};
}

Status ResidencyIndex::ExpectSaltedRoot(std::string_view worker, BlockKey saltless_root) {
  auto [slot, lock] = LockWorker<WriteLock>(worker);
  if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
  if (slot->salts == SaltReporting::kReported) return Status::Ok();
  if (slot->salted_roots.size() >= kMaxSaltedRoots) slot->salted_roots.pop_front();
  slot->salted_roots.push_back(saltless_root);
  return Status::Ok();
}

Status ResidencyIndex::AddBlocks(std::string_view worker, std::span<const BlockKey> keys,
                                 ResidencyTier tier) {
  auto [slot, lock] = LockWorker<WriteLock>(worker);
  if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
  for (BlockKey key : keys) {
    // No engine ref names a key a transport reports: the worker's walks
    // find it through `loose`.
    if (AddTierLocked(*slot, key, tier) == 0) slot->loose.Insert(key, 0);
  }
  return Status::Ok();
}

Status ResidencyIndex::RemoveBlocks(std::string_view worker, std::span<const BlockKey> keys,
                                    ResidencyTier tier) {
  auto [slot, lock] = LockWorker<WriteLock>(worker);
  if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
  for (BlockKey key : keys) RemoveTierLocked(*slot, key, tier);
  return Status::Ok();
}

Result<std::vector<BlockKey>> ResidencyIndex::KeysForEngineHashes(
    std::string_view worker, std::span<const EngineHash> hashes, int64_t group_idx) const {
  auto [slot, lock] = LockWorker<ReadLock>(worker);
  if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
  std::vector<BlockKey> keys;
  keys.reserve(hashes.size());
  const FlatMap<BlockKey>* refs = slot->FindGroup(group_idx);
  for (EngineHash hash : hashes) {
    const auto at = refs == nullptr ? FlatMap<BlockKey>::kNotFound : refs->Find(hash);
    if (at == FlatMap<BlockKey>::kNotFound) {
      return Status::NotFound("worker '" + slot->id + "' holds no block with engine hash " +
                              std::to_string(hash));
    }
    keys.push_back(refs->ValueAt(at));
  }
  return keys;
}

std::vector<WorkerResidency> ResidencyIndex::Workers() const {
  ReadLock registry(registry_mu_);
  const std::vector<ReadLock> locks = LockAllForRead();
  std::vector<WorkerResidency> out;
  out.reserve(by_id_.size());
  for (uint32_t number : by_id_) {
    const WorkerSlot& slot = *workers_[number];
    out.push_back({slot.id, slot.model, slot.block_size, slot.state, slot.blocks, slot.salts});
  }
  return out;
}

std::optional<WorkerResidency> ResidencyIndex::Worker(std::string_view worker) const {
  auto [slot, lock] = LockWorker<ReadLock>(worker);
  if (slot == nullptr) return std::nullopt;
  return WorkerResidency{slot->id,    slot->model,  slot->block_size,
                         slot->state, slot->blocks, slot->salts};
}

bool ResidencyIndex::Holds(std::string_view worker, BlockKey key) const {
  auto [slot, lock] = LockWorker<ReadLock>(worker);
  if (slot == nullptr) return false;
  uint32_t single = 0;
  for (uint32_t holder : ShardOf(slot->number).holders.Holders(key, single)) {
    if (HolderIndex::WorkerOf(holder) == slot->number) return true;
  }
  return false;
}

std::vector<WorkerOverlap> ResidencyIndex::Overlap(std::span<const BlockKey> chain) const {
  std::vector<WorkerOverlap> out;
  if (chain.empty()) return out;
  std::vector<uint32_t> ranks;  // of out's entries
  {
    ReadLock registry(registry_mu_);
    // One for every shard's walk: a worker is named only in its own
    // shard's holder lists, so no walk reads what another wrote.
    std::vector<uint32_t> position(workers_.size(), kNotCandidate);
    for (const auto& shard : shards_) {
      ReadLock lock(shard->mu);
      OverlapInShard(*shard, chain, position, out, ranks);
    }
  }
  return InRankOrder(std::move(out), ranks);
}

void ResidencyIndex::OverlapInShard(const Shard& shard, std::span<const BlockKey> chain,
                                    std::span<uint32_t> position,
                                    std::vector<WorkerOverlap>& all,
                                    std::vector<uint32_t>& ranks) const {
  const HolderIndex& table = shard.holders;
  struct Candidate {
    const WorkerSlot* slot;
    size_t blocks;  // leading blocks of the chain it holds, as far as walked
  };
  std::vector<Candidate> candidates;
  // Two buffers for lone holders, so the previous block's list stays valid
  // while the next one is read.
  std::array<uint32_t, 2> single{};
  std::span<const uint32_t> previous = table.Holders(chain[0], single[0]);
  if (previous.empty()) return;
  candidates.reserve(previous.size());
  for (uint32_t holder : previous) {
    const uint32_t number = HolderIndex::WorkerOf(holder);
    const WorkerSlot& slot = *workers_[number];
    if (slot.state != WorkerState::kLive) continue;
    position[number] = static_cast<uint32_t>(candidates.size());
    candidates.push_back({&slot, 0});
  }
  // One walk down the chain through the holder lists, rather than one per
  // candidate through its own table: a shared prefix's blocks are looked up
  // once, not once per worker holding it. A candidate that held every block
  // before i goes on if it holds block i; the walk ends when none does.
  std::vector<uint32_t> matching(candidates.size());  // candidates still matching
  std::iota(matching.begin(), matching.end(), uint32_t{0});
  std::vector<size_t> seen(candidates.size(), 0);  // the last block each was seen holding
  size_t walked = 1;
  for (size_t turn = 1; walked < chain.size() && !matching.empty(); ++walked, turn ^= 1) {
    const std::span<const uint32_t> holders = table.Holders(chain[walked], single[turn]);
    // The same holder words as the block before (a shared prefix's blocks
    // have the same list, in the same order, in the same tiers): whoever
    // held that block holds this one, so nobody stops here.
    if (SameList(holders, previous)) {
      turn ^= 1;  // `previous` still points into the other buffer
      continue;
    }
    for (uint32_t holder : holders) {
      const uint32_t at = position[HolderIndex::WorkerOf(holder)];
      if (at != kNotCandidate) seen[at] = walked;
    }
    std::erase_if(matching, [&](uint32_t at) {
      if (seen[at] == walked) return false;
      candidates[at].blocks = walked;
      return true;
    });
    previous = holders;
  }
  for (uint32_t at : matching) candidates[at].blocks = walked;

  // Each block's best tier. A worker whose blocks all count in one tier
  // slot (an engine that never offloads) has that slot as every block's:
  // no lookups. The others read their tier of each block from its holder
  // word, in one more walk down the chain for all of them.
  const size_t first = all.size();
  all.resize(first + candidates.size());
  const std::span<WorkerOverlap> out = std::span(all).subspan(first);
  for (const Candidate& candidate : candidates) ranks.push_back(candidate.slot->rank);
  size_t deepest = 0;  // blocks the multi-tier candidates need walked
  for (size_t at = 0; at < candidates.size(); ++at) {
    const Candidate& candidate = candidates[at];
    WorkerOverlap& overlap = out[at];
    overlap.worker = candidate.slot->id;
    size_t uniform = 0;
    size_t tiers_in_use = 0;
    for (size_t t = 0; t < kIndexedTiers.size(); ++t) {
      if (candidate.slot->blocks[t] == 0) continue;
      uniform = t;
      ++tiers_in_use;
    }
    if (tiers_in_use == 1) {
      overlap.blocks = candidate.blocks;
      overlap.by_tier[uniform] = candidate.blocks;
      overlap.best_tier.assign(candidate.blocks, static_cast<uint8_t>(uniform));
    } else {
      overlap.best_tier.reserve(candidate.blocks);
      deepest = std::max(deepest, candidate.blocks);
    }
  }
  for (size_t i = 0; i < deepest; ++i) {
    for (uint32_t holder : table.Holders(chain[i], single[0])) {
      const uint32_t at = position[HolderIndex::WorkerOf(holder)];
      if (at == kNotCandidate) continue;
      WorkerOverlap& overlap = out[at];
      // Skips the uniform candidates (filled above), and a multi-tier one
      // past its blocks or missing an earlier one.
      if (i >= candidates[at].blocks || overlap.best_tier.size() != i) continue;
      const size_t tier = BestTierSlot(HolderIndex::TiersOf(holder));
      ++overlap.by_tier[tier];
      overlap.best_tier.push_back(static_cast<uint8_t>(tier));
    }
  }
  for (WorkerOverlap& overlap : out) {
    // Never shorter, but for a block missing from its holder list (the walk
    // above found it there): the tiers read are what the answer stands on.
    overlap.blocks = overlap.best_tier.size();
  }
}

std::vector<LineageResidue> ResidencyIndex::Residue(
    const std::function<bool(std::string_view root_extra_key)>& matches, bool by_tier) const {
  std::vector<LineageResidue> out;
  std::vector<uint32_t> ranks;  // of out's entries
  {
    ReadLock registry(registry_mu_);
    for (size_t s = 0; s < shards_.size(); ++s) {
      const Shard& shard = *shards_[s];
      ReadLock lock(shard.mu);
      for (size_t number = s; number < workers_.size(); number += shards_.size()) {
        const WorkerSlot* slot = workers_[number].get();
        if (slot == nullptr) continue;
        LineageResidue residue = slot->Residue(matches, by_tier, shard.holders);
        if (residue.matched_refs == 0 && residue.unattributed_refs == 0) continue;
        residue.worker = slot->id;
        residue.model = slot->model;
        out.push_back(std::move(residue));
        ranks.push_back(slot->rank);
      }
    }
  }
  return InRankOrder(std::move(out), ranks);
}

uint64_t ResidencyIndex::ResidentPairs() const {
  ReadLock registry(registry_mu_);
  const std::vector<ReadLock> locks = LockAllForRead();
  uint64_t pairs = 0;
  for (const auto& slot : workers_) {
    if (slot) pairs += slot->pairs;
  }
  return pairs;
}

// ---------------------------------------------------------------------------
// Snapshots (docs/formats/index-snapshot.md).

namespace {

constexpr std::string_view kSnapshotMagic = "kvgovidx";
constexpr uint32_t kSnapshotVersion = 1;
constexpr size_t kSnapshotFixedHeader = 37;  // magic .. block_size
constexpr size_t kSnapshotChecksumBytes = 4;
// A one-byte model, no records: 37 + 1 + 1 + 1 + 1 + 4.
constexpr size_t kSnapshotMinBytes = kSnapshotFixedHeader + 4 + kSnapshotChecksumBytes;
constexpr size_t kMinKeyRecordBytes = 8 + 1 + 1;
constexpr size_t kMinEngineRefBytes = 8 + 1;
constexpr std::string_view kKeyProbeNamespace = "kvgov.index_snapshot.probe";

// Format v1 defines tier bit i as ResidencyTier value i. Pin the values so
// that reordering the enum breaks the build, not every stored snapshot.
static_assert(static_cast<int>(ResidencyTier::kUnknown) == 0);
static_assert(static_cast<int>(ResidencyTier::kHBM) == 1);
static_assert(static_cast<int>(ResidencyTier::kDRAM) == 2);
static_assert(static_cast<int>(ResidencyTier::kNumaFar) == 3);
static_assert(static_cast<int>(ResidencyTier::kCXL) == 4);
static_assert(static_cast<int>(ResidencyTier::kDisk) == 5);
static_assert(static_cast<int>(ResidencyTier::kRemote) == 6);
static_assert(static_cast<int>(ResidencyTier::kProvider) == 7);
static_assert(static_cast<int>(ResidencyTier::kRecompute) == 8);
constexpr uint16_t kSnapshotTierBits = 0x1ff;
static_assert(kSnapshotTierBits == HolderIndex::kAllTiers, "a holder word keeps every tier");
constexpr unsigned kSnapshotTierCount = 9;

// CRC-32C (Castagnoli), slice-by-8: about 6x SHA-256's speed here, and a
// CRC catches every burst of up to 32 bits, which a hash only makes likely.
using CrcTables = std::array<std::array<uint32_t, 256>, 8>;

constexpr CrcTables MakeCrcTables() {
  CrcTables tables{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82f63b78u : 0u);
    tables[0][i] = crc;
  }
  for (size_t t = 1; t < tables.size(); ++t) {
    for (size_t i = 0; i < 256; ++i) {
      const uint32_t prev = tables[t - 1][i];
      tables[t][i] = (prev >> 8) ^ tables[0][prev & 0xffu];
    }
  }
  return tables;
}
constexpr CrcTables kCrcTables = MakeCrcTables();

uint32_t Crc32c(std::string_view data) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t n = data.size();
  uint32_t crc = 0xffffffffu;
  while (n >= 8) {
    // Assembled byte by byte, so the host's byte order does not matter; the
    // compiler turns this into one load on little-endian hosts.
    uint64_t word = 0;
    for (int i = 7; i >= 0; --i) word = (word << 8) | p[i];
    word ^= crc;
    crc = kCrcTables[7][word & 0xff] ^ kCrcTables[6][(word >> 8) & 0xff] ^
          kCrcTables[5][(word >> 16) & 0xff] ^ kCrcTables[4][(word >> 24) & 0xff] ^
          kCrcTables[3][(word >> 32) & 0xff] ^ kCrcTables[2][(word >> 40) & 0xff] ^
          kCrcTables[1][(word >> 48) & 0xff] ^ kCrcTables[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = kCrcTables[0][(crc ^ *p++) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

size_t VarintSize(uint64_t value) {
  size_t n = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++n;
  }
  return n;
}

uint64_t ZigZag(int64_t value) {
  return (static_cast<uint64_t>(value) << 1) ^ static_cast<uint64_t>(value >> 63);
}

int64_t UnZigZag(uint64_t value) { return static_cast<int64_t>((value >> 1) ^ (~(value & 1) + 1)); }

// Appends to a string reserved to the exact size up front.
class SnapshotWriter {
 public:
  explicit SnapshotWriter(std::string& out) : out_(out) {}
  void Bytes(std::string_view bytes) { out_.append(bytes); }
  void U8(uint8_t value) { out_.push_back(static_cast<char>(value)); }
  void U32(uint32_t value) {
    for (int shift = 24; shift >= 0; shift -= 8) U8(static_cast<uint8_t>(value >> shift));
  }
  void U64(uint64_t value) {
    char bytes[8];
    for (int i = 7; i >= 0; --i) {
      bytes[i] = static_cast<char>(value & 0xff);
      value >>= 8;
    }
    out_.append(bytes, sizeof(bytes));
  }
  void Varint(uint64_t value) {
    while (value >= 0x80) {
      U8(static_cast<uint8_t>(value | 0x80));
      value >>= 7;
    }
    U8(static_cast<uint8_t>(value));
  }

 private:
  std::string& out_;
};

// Reads the body of a snapshot whose length and checksum were verified;
// every read is still bounds-checked, since a writer bug must not become an
// out-of-bounds read. Errors name the offset where the field starts.
class SnapshotReader {
 public:
  // `end` is where the checksum starts.
  SnapshotReader(std::string_view bytes, size_t offset, size_t end)
      : bytes_(bytes), offset_(offset), end_(end) {}

  size_t offset() const { return offset_; }
  size_t remaining() const { return end_ - offset_; }

  Status U8(std::string_view field, uint8_t& out) {
    KVGOV_RETURN_IF_ERROR(Need(field, 1));
    out = static_cast<uint8_t>(bytes_[offset_++]);
    return Status::Ok();
  }
  Status U64(std::string_view field, uint64_t& out) {
    KVGOV_RETURN_IF_ERROR(Need(field, 8));
    out = 0;
    for (size_t i = 0; i < 8; ++i) out = (out << 8) | static_cast<uint8_t>(bytes_[offset_ + i]);
    offset_ += 8;
    return Status::Ok();
  }
  Status Varint(std::string_view field, uint64_t& out) {
    const size_t start = offset_;
    out = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
      if (offset_ >= end_) {
        return Error(start, "truncated: varint " + std::string(field) + " runs into the checksum");
      }
      const auto byte = static_cast<uint8_t>(bytes_[offset_++]);
      // The tenth byte holds bit 63 only.
      if (shift == 63 && byte > 1) break;
      out |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return Status::Ok();
    }
    return Error(start, "varint " + std::string(field) + " is longer than 64 bits");
  }
  Status Bytes(std::string_view field, size_t n, std::string_view& out) {
    KVGOV_RETURN_IF_ERROR(Need(field, n));
    out = bytes_.substr(offset_, n);
    offset_ += n;
    return Status::Ok();
  }

  static Status Error(size_t offset, std::string_view what) {
    return Status::Corruption("index snapshot: byte " + std::to_string(offset) + ": " +
                              std::string(what));
  }

 private:
  Status Need(std::string_view field, size_t n) const {
    if (remaining() >= n) return Status::Ok();
    return Error(offset_, "truncated: " + std::string(field) + " needs " + std::to_string(n) +
                              " bytes, " + std::to_string(remaining()) +
                              " remain before the checksum");
  }

  std::string_view bytes_;
  size_t offset_;
  size_t end_;
};

std::string Hex(uint64_t value) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out = "0x";
  bool started = false;
  for (int shift = 60; shift >= 0; shift -= 4) {
    const unsigned digit = (value >> shift) & 0xf;
    if (digit != 0 || started || shift == 0) {
      out.push_back(kDigits[digit]);
      started = true;
    }
  }
  return out;
}

uint64_t KeyProbe(const BlockKeyHasher& hasher) {
  return hasher.Root(ChainNamespace{std::string(kKeyProbeNamespace), "", 0});
}

}  // namespace

Result<std::string> ResidencyIndex::SnapshotWorker(std::string_view worker) const {
  struct KeyTiers {
    BlockKey key;
    uint16_t tiers;
  };
  struct KeyRef {
    BlockKey key;
    int64_t group_idx;
    EngineHash hash;
  };
  std::string model;
  int64_t block_size = 0;
  WorkerState state = WorkerState::kLive;
  std::vector<KeyTiers> keys;
  std::vector<KeyRef> refs;
  // Every key's tier mask, when one engine ref names each resident key and
  // they all sit in one tier (WorkerSlot::UniformTiers).
  std::optional<uint16_t> uniform;
  {
    // Copy only: writers wait for this, not for the sort and the encoding.
    const auto [slot, lock] = LockWorker<ReadLock>(worker);
    if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
    model = slot->model;
    block_size = slot->block_size;
    state = slot->state;
    // This is the part writers wait for: the worker's tables walked in
    // order and, unless every key is in one known tier, each key's tiers
    // read from its holder word, in the holder table's order.
    // Fresh buffers each time, written once all over: huge pages spare
    // most of their first-touch faults.
    refs.reserve(slot->EngineRefs());
    AdviseHugePages(refs.data(), refs.capacity() * sizeof(KeyRef));
    for (const EngineGroup& group : slot->engine_groups) {
      group.keys.ForEach(
          [&](EngineHash hash, BlockKey key) { refs.push_back({key, group.group_idx, hash}); });
    }
    uniform = slot->UniformTiers();
    if (!uniform.has_value()) {
      keys.reserve(slot->pairs);
      AdviseHugePages(keys.data(), keys.capacity() * sizeof(KeyTiers));
      const HolderIndex& holders = ShardOf(slot->number).holders;
      const uint32_t number = slot->number;  // clang 14 (the fuzz tree) captures no structured binding
      auto read_tiers = [&](BlockKey key) {
        if (const uint16_t held = holders.Tiers(key, number); held != 0) {
          keys.push_back({key, held});
        }
      };
      for (const KeyRef& ref :
           InHomeOrder(std::span<const KeyRef>(refs), [](const KeyRef& ref) { return ref.key; })) {
        read_tiers(ref.key);
      }
      slot->loose.ForEach([&](BlockKey key, uint8_t) { read_tiers(key); });
    }
  }
  // The canonical order of the format: equal residency, equal bytes.
  std::sort(refs.begin(), refs.end(), [](const KeyRef& a, const KeyRef& b) {
    if (a.key != b.key) return a.key < b.key;
    if (a.group_idx != b.group_idx) return a.group_idx < b.group_idx;
    return a.hash < b.hash;
  });
  if (uniform.has_value()) {
    // Each ref names a resident key of its own (UniformTiers says why), so
    // the keys are the refs' keys, already in order: no second sort.
    keys.reserve(refs.size());
    for (const KeyRef& ref : refs) keys.push_back({ref.key, *uniform});
  } else {
    // A key several refs name (or a ref and `loose`) was read more than once.
    std::sort(keys.begin(), keys.end(),
              [](const KeyTiers& a, const KeyTiers& b) { return a.key < b.key; });
    keys.erase(std::unique(keys.begin(), keys.end(),
                           [](const KeyTiers& a, const KeyTiers& b) { return a.key == b.key; }),
               keys.end());
  }

  // Records are the union of resident keys and keys engine refs name; a
  // key only refs name is written with no tiers. Walked twice: once to size
  // the output exactly, once to write it.
  auto for_each_record = [&](auto&& visit) {
    size_t k = 0;
    size_t r = 0;
    while (k < keys.size() || r < refs.size()) {
      BlockKey key = 0;
      uint16_t tiers = 0;
      if (r == refs.size() || (k < keys.size() && keys[k].key <= refs[r].key)) {
        key = keys[k].key;
        tiers = keys[k].tiers;
        ++k;
      } else {
        key = refs[r].key;
      }
      const size_t first_ref = r;
      while (r < refs.size() && refs[r].key == key) ++r;
      visit(key, tiers, std::span<const KeyRef>(refs.data() + first_ref, r - first_ref));
    }
  };
  uint64_t key_count = 0;
  size_t size = kSnapshotFixedHeader + VarintSize(model.size()) + model.size() +
                VarintSize(refs.size()) + kSnapshotChecksumBytes;
  for_each_record([&](BlockKey, uint16_t tiers, std::span<const KeyRef> key_refs) {
    ++key_count;
    size += 8 + VarintSize(tiers) + VarintSize(key_refs.size());
    for (const KeyRef& ref : key_refs) size += 8 + VarintSize(ZigZag(ref.group_idx));
  });
  size += VarintSize(key_count);

  std::string out;
  out.reserve(size);
  AdviseHugePages(out.data(), size);
  SnapshotWriter writer(out);
  writer.Bytes(kSnapshotMagic);
  writer.U32(kSnapshotVersion);
  writer.U64(size);
  writer.U64(KeyProbe(hasher_));
  writer.U8(state == WorkerState::kLive ? 0 : 1);
  writer.U64(static_cast<uint64_t>(block_size));
  writer.Varint(model.size());
  writer.Bytes(model);
  writer.Varint(key_count);
  writer.Varint(refs.size());
  for_each_record([&](BlockKey key, uint16_t tiers, std::span<const KeyRef> key_refs) {
    writer.U64(key);
    writer.Varint(tiers);
    writer.Varint(key_refs.size());
    for (const KeyRef& ref : key_refs) {
      writer.U64(ref.hash);
      writer.Varint(ZigZag(ref.group_idx));
    }
  });
  writer.U32(Crc32c(out));
  return out;
}

// A snapshot decoded, not yet in the index: the worker's tables (its number
// unset, in no holder list) and each resident key's tiers, in key order.
struct ResidencyIndex::DecodedSnapshot {
  struct KeyTiers {
    BlockKey key;
    uint16_t tiers;
  };
  WorkerSlot slot;
  std::vector<KeyTiers> resident;
  // How engine refs go into the slot's tables: inserted in home order once
  // every record is read (fast), or as each record is read (slow). Only a
  // reader going record by record reports the first problem in a corrupt
  // snapshot (a ref named twice is found at its record), so a restore
  // whose fast decode fails decodes again in place for the error.
  bool refs_in_place = false;
  // The worker's declared pool: group 0's table is sized for it, as
  // AddWorker sized it, so the blocks stored after the restore do not
  // rehash a table just filled to its limit.
  uint64_t pool_blocks = 0;
};

Status ResidencyIndex::DecodeSnapshot(std::string_view snapshot, DecodedSnapshot& decoded) const {
  WorkerSlot& out = decoded.slot;
  using Reader = SnapshotReader;
  const size_t size = snapshot.size();
  // The fixed prefix, each field checked as soon as it is present, so that a
  // truncated value says so instead of failing the checksum.
  if (size < 8) {
    return Reader::Error(size,
                         "truncated: " + std::to_string(size) + " bytes, the magic alone needs 8");
  }
  if (snapshot.substr(0, 8) != kSnapshotMagic) {
    return Reader::Error(0, "wrong magic: not an index snapshot");
  }
  if (size < 12) {
    return Reader::Error(
        size, "truncated: " + std::to_string(size) + " bytes, the version needs 4 from byte 8");
  }
  uint32_t version = 0;
  for (size_t i = 8; i < 12; ++i) version = (version << 8) | static_cast<uint8_t>(snapshot[i]);
  if (version != kSnapshotVersion) {
    return Reader::Error(8, "unsupported version " + std::to_string(version) +
                                " (this build reads " + std::to_string(kSnapshotVersion) + ")");
  }
  if (size < 20) {
    return Reader::Error(
        size, "truncated: " + std::to_string(size) + " bytes, the length needs 8 from byte 12");
  }
  uint64_t length = 0;
  for (size_t i = 12; i < 20; ++i) length = (length << 8) | static_cast<uint8_t>(snapshot[i]);
  if (length < kSnapshotMinBytes) {
    return Reader::Error(12, "length " + std::to_string(length) +
                                 " is below the smallest snapshot (" +
                                 std::to_string(kSnapshotMinBytes) + " bytes)");
  }
  if (size < length) {
    return Reader::Error(size, "truncated: the snapshot declares " + std::to_string(length) +
                                   " bytes, " + std::to_string(size) + " are present");
  }
  if (size > length) {
    return Reader::Error(static_cast<size_t>(length),
                         std::to_string(size - length) +
                             " unexpected bytes after the declared length " +
                             std::to_string(length));
  }
  const size_t end = size - kSnapshotChecksumBytes;
  uint32_t stored_crc = 0;
  for (size_t i = end; i < size; ++i) {
    stored_crc = (stored_crc << 8) | static_cast<uint8_t>(snapshot[i]);
  }
  const uint32_t crc = Crc32c(snapshot.substr(0, end));
  if (stored_crc != crc) {
    return Reader::Error(end, "checksum mismatch: stored " + Hex(stored_crc) + ", computed " +
                                  Hex(crc) + " over bytes [0, " + std::to_string(end) + ")");
  }

  // The header. Past the checksum every read is still bounds-checked: a
  // writer bug must not become an out-of-bounds read.
  Reader reader(snapshot, 20, end);
  uint64_t probe = 0;
  KVGOV_RETURN_IF_ERROR(reader.U64("key_probe", probe));
  size_t at = reader.offset();
  uint8_t state = 0;
  KVGOV_RETURN_IF_ERROR(reader.U8("state", state));
  if (state > 1) {
    return Reader::Error(at,
                         "state " + std::to_string(state) + " is neither 0 (live) nor 1 (stale)");
  }
  at = reader.offset();
  uint64_t block_size = 0;
  KVGOV_RETURN_IF_ERROR(reader.U64("block_size", block_size));
  if (static_cast<int64_t>(block_size) <= 0) {
    return Reader::Error(
        at, "block_size " + std::to_string(static_cast<int64_t>(block_size)) + " is not positive");
  }
  at = reader.offset();
  uint64_t model_len = 0;
  KVGOV_RETURN_IF_ERROR(reader.Varint("model_len", model_len));
  if (model_len == 0) return Reader::Error(at, "empty model");
  if (model_len > reader.remaining()) {
    return Reader::Error(at, "model length " + std::to_string(model_len) + " runs past the end (" +
                                 std::to_string(reader.remaining()) + " bytes remain)");
  }
  std::string_view model;
  KVGOV_RETURN_IF_ERROR(reader.Bytes("model", static_cast<size_t>(model_len), model));
  const size_t key_count_at = reader.offset();
  uint64_t key_count = 0;
  KVGOV_RETURN_IF_ERROR(reader.Varint("key_count", key_count));
  const size_t ref_count_at = reader.offset();
  uint64_t ref_count = 0;
  KVGOV_RETURN_IF_ERROR(reader.Varint("ref_count", ref_count));
  // Counts are checked against the bytes left before anything is reserved:
  // a corrupt count must fail here, not as a multi-gigabyte allocation.
  if (key_count > reader.remaining() / kMinKeyRecordBytes) {
    return Reader::Error(key_count_at,
                         "key_count " + std::to_string(key_count) +
                             " runs past the end: " + std::to_string(reader.remaining()) +
                             " bytes remain, a key record takes at least " +
                             std::to_string(kMinKeyRecordBytes));
  }
  if (ref_count > reader.remaining() / kMinEngineRefBytes) {
    return Reader::Error(ref_count_at,
                         "ref_count " + std::to_string(ref_count) +
                             " runs past the end: " + std::to_string(reader.remaining()) +
                             " bytes remain, an engine ref takes at least " +
                             std::to_string(kMinEngineRefBytes));
  }

  out.model = std::string(model);
  out.block_size = static_cast<int64_t>(block_size);
  out.state = state == 0 ? WorkerState::kLive : WorkerState::kStale;
  out.engine_groups.clear();
  out.loose.Clear();
  out.blocks.fill(0);
  decoded.resident.clear();
  // Sized once for everything: at ten million keys, growing up to size
  // would rehash about as many entries again as the snapshot holds. The
  // refs are reserved in group 0, where they almost always are.
  decoded.resident.reserve(static_cast<size_t>(key_count));
  AdviseHugePages(decoded.resident.data(), decoded.resident.capacity() * sizeof(DecodedSnapshot::KeyTiers));
  struct EngineRef {
    EngineHash hash;
    BlockKey key;
  };
  std::vector<std::pair<int64_t, std::vector<EngineRef>>> refs_by_group;
  std::vector<EngineRef>* group_refs = nullptr;  // refs_by_group's vector of group_refs_idx
  FlatMap<BlockKey>* group_table = nullptr;      // in place: the table of group_refs_idx
  int64_t group_refs_idx = 0;
  if (decoded.refs_in_place) {
    if (ref_count > 0 || decoded.pool_blocks > 0) {
      out.Group(0).keys.Reserve(static_cast<size_t>(std::max(ref_count, decoded.pool_blocks)));
    }
  } else {
    refs_by_group.emplace_back(0, std::vector<EngineRef>());
    std::vector<EngineRef>& refs = refs_by_group.back().second;
    refs.reserve(static_cast<size_t>(ref_count));
    AdviseHugePages(refs.data(), refs.capacity() * sizeof(EngineRef));
  }

  uint64_t refs_seen = 0;
  BlockKey previous_key = 0;
  for (uint64_t i = 0; i < key_count; ++i) {
    const size_t record_at = reader.offset();
    // Built only on error: a label per record would be an allocation each.
    auto record = [i] { return "key record " + std::to_string(i); };
    BlockKey key = 0;
    KVGOV_RETURN_IF_ERROR(reader.U64("key", key));
    if (i > 0 && key <= previous_key) {
      return Reader::Error(record_at, record() + ": key " + Hex(key) +
                                          " is not greater than the previous key " +
                                          Hex(previous_key));
    }
    previous_key = key;
    at = reader.offset();
    uint64_t tiers = 0;
    KVGOV_RETURN_IF_ERROR(reader.Varint("tiers", tiers));
    if ((tiers & ~uint64_t{kSnapshotTierBits}) != 0) {
      return Reader::Error(at, record() + " (key " + Hex(key) + "): tier mask " + Hex(tiers) +
                                   " has bits outside the known tiers " + Hex(kSnapshotTierBits));
    }
    at = reader.offset();
    uint64_t nrefs = 0;
    KVGOV_RETURN_IF_ERROR(reader.Varint("nrefs", nrefs));
    if (tiers == 0 && nrefs == 0) {
      return Reader::Error(record_at,
                           record() + " (key " + Hex(key) + ") has no tier and no engine ref");
    }
    if (nrefs > ref_count - refs_seen) {
      return Reader::Error(at, record() + ": " + std::to_string(nrefs) +
                                   " engine refs exceed the " +
                                   std::to_string(ref_count - refs_seen) + " ref_count leaves");
    }
    if (nrefs > reader.remaining() / kMinEngineRefBytes) {
      return Reader::Error(at, record() + ": " + std::to_string(nrefs) +
                                   " engine refs run past the end (" +
                                   std::to_string(reader.remaining()) + " bytes remain)");
    }
    refs_seen += nrefs;
    if (tiers != 0) {
      decoded.resident.push_back({key, static_cast<uint16_t>(tiers)});
      if (nrefs == 0) out.loose.Insert(key, 0);
      for (unsigned bit = 0; bit < kSnapshotTierCount; ++bit) {
        if (tiers & (uint64_t{1} << bit)) ++out.blocks[TierSlot(static_cast<ResidencyTier>(bit))];
      }
    }
    EngineHash previous_hash = 0;
    int64_t previous_group = 0;
    for (uint64_t r = 0; r < nrefs; ++r) {
      const size_t ref_at = reader.offset();
      EngineHash hash = 0;
      uint64_t group = 0;
      KVGOV_RETURN_IF_ERROR(reader.U64("engine hash", hash));
      KVGOV_RETURN_IF_ERROR(reader.Varint("group", group));
      const int64_t group_idx = UnZigZag(group);
      if (r > 0 && (group_idx < previous_group ||
                    (group_idx == previous_group && hash <= previous_hash))) {
        return Reader::Error(ref_at, record() + ": engine ref (hash " + Hex(hash) + ", group " +
                                         std::to_string(group_idx) + ") is out of order");
      }
      previous_hash = hash;
      previous_group = group_idx;
      if (!decoded.refs_in_place) {
        if (group_refs == nullptr || group_idx != group_refs_idx) {
          auto it = std::find_if(refs_by_group.begin(), refs_by_group.end(),
                                 [&](const auto& entry) { return entry.first == group_idx; });
          if (it == refs_by_group.end()) {
            it = refs_by_group.emplace(refs_by_group.end(), group_idx, std::vector<EngineRef>());
          }
          group_refs = &it->second;  // may move the other vectors: re-fetched on change
          group_refs_idx = group_idx;
        }
        group_refs->push_back({hash, key});
        continue;
      }
      if (group_table == nullptr || group_idx != group_refs_idx) {
        group_table = &out.Group(group_idx).keys;  // may move the other tables: re-fetched on change
        group_refs_idx = group_idx;
      }
      if (!group_table->Insert(hash, key).second) {
        return Reader::Error(ref_at, record() + ": engine ref (hash " + Hex(hash) + ", group " +
                                         std::to_string(group_idx) + ") already names another key");
      }
    }
  }
  if (reader.remaining() != 0) {
    return Reader::Error(reader.offset(), std::to_string(reader.remaining()) +
                                              " unexpected bytes after the last key record");
  }
  if (refs_seen != ref_count) {
    return Reader::Error(ref_count_at, "ref_count " + std::to_string(ref_count) + " but the " +
                                           "records hold " + std::to_string(refs_seen));
  }
  for (const auto& [group_idx, refs] : refs_by_group) {
    if (refs.empty()) continue;
    // A fresh table, sized for every ref before the first goes in.
    FlatMap<BlockKey>& table = out.Group(group_idx).keys;
    table.Reserve(group_idx == 0 ? std::max<size_t>(refs.size(), decoded.pool_blocks)
                                 : refs.size());
    bool duplicate = false;
    for (const EngineRef& ref :
         InHomeOrder(std::span<const EngineRef>(refs), [](const EngineRef& ref) { return ref.hash; })) {
      duplicate |= !table.Insert(ref.hash, ref.key).second;
    }
    if (duplicate) {
      return Status::Corruption("index snapshot: an engine ref is named twice");
    }
  }
  if (decoded.refs_in_place && ref_count > 0 && decoded.pool_blocks == 0) {
    out.Group(0).keys.ShrinkToFit();  // a no-op when group 0 has every ref
    out.DropGroupIfEmpty(0);
  }
  if (const uint64_t ours = KeyProbe(hasher_); probe != ours) {
    return Status::FailedPrecondition(
        "index snapshot: its keys come from another block-key hasher (key probe " + Hex(probe) +
        ", this index's " + Hex(ours) + "); they would match no route request");
  }
  return Status::Ok();
}

Status ResidencyIndex::RestoreWorker(std::string_view worker, std::string_view snapshot) {
  // Decoded outside the lock: reading the records is the slow part, and
  // queries and other workers' events need not wait for it.
  uint64_t pool_blocks = 0;
  if (const auto [slot, lock] = LockWorker<ReadLock>(worker); slot != nullptr) {
    pool_blocks = slot->pool_blocks;
  }
  DecodedSnapshot decoded;
  decoded.pool_blocks = pool_blocks;
  if (Status fast = DecodeSnapshot(snapshot, decoded); !fast.ok()) {
    if (fast.code() != StatusCode::kCorruption) return fast;
    decoded = DecodedSnapshot{};
    decoded.refs_in_place = true;
    decoded.pool_blocks = pool_blocks;
    KVGOV_RETURN_IF_ERROR(DecodeSnapshot(snapshot, decoded));
  }
  const std::vector<DecodedSnapshot::KeyTiers>& resident = decoded.resident;
  {
    auto [slot, lock] = LockWorker<WriteLock>(worker);
    if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
    const WorkerSlot& restored = decoded.slot;
    if (restored.model != slot->model || restored.block_size != slot->block_size) {
      return Status::FailedPrecondition("index snapshot is of model '" + restored.model +
                                        "' with block size " +
                                        std::to_string(restored.block_size) + "; worker '" +
                                        slot->id + "' is registered with model '" +
                                        slot->model + "' and block size " +
                                        std::to_string(slot->block_size));
    }
    const uint32_t number = slot->number;
    HolderIndex& holders = ShardOf(number).holders;
    if (slot->pairs != 0) {
      // Keys that leave the worker. Only they and keys that enter or change
      // tiers touch the holders: a restore over similar state (a re-sync) then
      // leaves most holder lists alone.
      slot->ForEachKey([&](BlockKey key) {
        const auto at = std::lower_bound(
            resident.begin(), resident.end(), key,
            [](const DecodedSnapshot::KeyTiers& entry, BlockKey k) { return entry.key < k; });
        if (at == resident.end() || at->key != key) holders.Remove(key, number);
      });
    }
    using KeyTiers = DecodedSnapshot::KeyTiers;
    const HomeOrdered<KeyTiers> ordered =
        InHomeOrder(std::span<const KeyTiers>(resident), [](const KeyTiers& entry) { return entry.key; });
    // Room for the keys that no worker holds yet, before the first goes in
    // (InHomeOrder says why): keys others hold take no new slot. Grown by
    // half at least, as inserts grow it: at a restart every worker is
    // restored in turn, and the blocks stored after each want room too.
    size_t entering = 0;
    for (const KeyTiers& entry : ordered) entering += holders.Contains(entry.key) ? 0 : 1;
    holders.MakeRoom(holders.keys() + entering);
    for (const KeyTiers& entry : ordered) {
      const uint16_t had = holders.AddTiers(entry.key, number, entry.tiers);
      if ((had & ~entry.tiers) != 0) holders.RemoveTiers(entry.key, number, had & ~entry.tiers);
    }
    holders.ShrinkIfSparse();
    slot->engine_groups.swap(decoded.slot.engine_groups);
    slot->loose.swap(decoded.slot.loose);
    slot->pairs = resident.size();
    slot->blocks = restored.blocks;
    slot->state = restored.state;
    // Snapshots carry no lineage: every restored ref may be any tenant's
    // until it is removed or stored again (the new tables have no lineage
    // entries, so each of them is one without).
    slot->lineages = Lineages();
    slot->lineages.restored = slot->EngineRefs();
  }
  // `decoded` now holds the worker's old tables; they are freed here, after
  // the lock is released.
  return Status::Ok();
}

}  // namespace kvgov::index
