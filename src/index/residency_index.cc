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
#include <array>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "index/flat_table.h"
#include "index/holder_index.h"
#include "index/worker_slot.h"

namespace kvgov::index {
namespace {

// Blocks of one event applied per round of prefetches: enough misses in
// flight to cover the latency, few enough that the first prefetched lines
// are still cached when the writes reach them.
constexpr size_t kApplyChunk = 16;

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
  for (BlockKey key :
       InHomeOrder(std::span<const BlockKey>(keys), [](BlockKey key) { return key; })) {
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
  const BlockKey root =
      SaltlessRoot(hasher_, ChainNamespace{slot.model, stored.lora_name, NamespaceGroup(stored)},
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
      std::string_view extra = i < stored.extra_keys.size() ? std::string_view(stored.extra_keys[i])
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
      return Status::InvalidArgument("token_ids: " + std::to_string(stored->token_ids.size()) +
                                     " tokens for " + std::to_string(stored->block_hashes.size()) +
                                     " blocks of " + std::to_string(slot->block_size));
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
                                    std::span<uint32_t> position, std::vector<WorkerOverlap>& all,
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

}  // namespace kvgov::index
