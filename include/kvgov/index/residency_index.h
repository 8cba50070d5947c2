#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvgov/core/engine_events.h"
#include "kvgov/core/status.h"
#include "kvgov/index/block_key.h"

namespace kvgov::index {

/// Whether a worker's residency can be believed.
enum class WorkerState {
  kLive,   // every event since a known-empty point was applied
  kStale,  // a gap could not be repaired: its blocks stop counting for routes
};
std::string_view ToString(WorkerState state);

/// Whether a worker's engine reports the cache salt in its events, so that
/// a tenant's salted blocks key apart from unsalted ones (ADR 0019).
enum class SaltReporting : uint8_t {
  kUnknown,      // no evidence yet either way
  kReported,     // its events carry extra keys (vLLM's extra_keys, SGLang's cache_salt)
  kNotReported,  // a salted request's blocks came back without the salt
};
/// "unknown", "reported", "not_reported".
std::string_view ToString(SaltReporting salts);

/// The tiers the index counts, in the order they are reported.
/// Hottest first; a block's best tier is the first of these it is in.
inline constexpr std::array<ResidencyTier, 5> kIndexedTiers = {
    ResidencyTier::kHBM, ResidencyTier::kDRAM, ResidencyTier::kDisk, ResidencyTier::kRemote,
    ResidencyTier::kUnknown};

/// What applying one event did, for counters.
struct ApplyResult {
  uint64_t blocks_stored = 0;
  uint64_t blocks_removed = 0;
  uint64_t orphan_blocks = 0;     // stored under a parent the index does not know
  // Stored under a new engine hash while the same key (same tokens, same
  // parent chain) was already resident in that tier: the engine's hashing
  // changed. Also counts a block a transport reported before the engine did.
  uint64_t hash_drift_blocks = 0;
  uint64_t unknown_removals = 0;  // removed hashes the index never saw stored
  uint64_t unknown_medium = 0;    // blocks whose medium mapped to no known tier
  // Blocks of a salted request that came back without the salt (the
  // engine may not report salts): not indexed, since they would key as
  // unsalted and credit routes the engine will not reuse them for.
  uint64_t salt_blind_blocks = 0;
};

/// One worker's view, for /v1/workers and metrics.
struct WorkerResidency {
  std::string id;
  std::string model;
  int64_t block_size = 0;
  WorkerState state = WorkerState::kLive;
  std::array<uint64_t, kIndexedTiers.size()> blocks{};  // by kIndexedTiers
  SaltReporting salts = SaltReporting::kUnknown;
};

/// How much of a chain one worker holds.
struct WorkerOverlap {
  std::string worker;
  uint64_t blocks = 0;  // leading blocks resident in any tier
  // Of those, by the best (hottest) tier each is in, by kIndexedTiers.
  std::array<uint64_t, kIndexedTiers.size()> by_tier{};
  // Block i's best tier, as an index into kIndexedTiers (size == blocks).
  std::vector<uint8_t> best_tier;
};

/// What one worker still holds of the lineages a Residue query asked about.
struct LineageResidue {
  std::string worker;
  std::string model;
  uint64_t matched_refs = 0;       // refs whose lineage's root extra key `matches` accepts
  uint64_t unattributed_refs = 0;  // refs whose lineage is unknown (see Residue)
  // Of matched_refs, by the best (hottest) tier their key is in, by
  // kIndexedTiers; filled only when asked for (Residue's by_tier). A ref
  // whose key is in no tier (a transport removed it by key) counts as
  // unknown.
  std::array<uint64_t, kIndexedTiers.size()> matched_by_tier{};
};

struct WorkerCapture;  // worker_capture.h

/// Which KV blocks live on which worker, in which tier, keyed by kvgov's own
/// block keys. Engine events are applied per worker; the engine's hashes are
/// mapped to kvgov keys through a per-worker table, so a BlockStored can find
/// its parent and a BlockRemoved its block.
///
/// Thread-safe, sharded by worker (docs/adr/0027): worker number n lives in
/// shard n mod shards(), and each shard has its own reader-writer lock over
/// its workers' tables and its own holder table. A change to one worker
/// (an event, a clear, a restore) locks only its shard, so two engines'
/// streams in different shards apply at once; queries share the locks. A
/// registry lock, held only briefly by everything but worker registration
/// and removal, guards which workers exist. A query over several workers
/// (Overlap, Workers, Residue) reads each shard as of one moment, one shard after
/// another: every worker's answer is consistent in itself.
class ResidencyIndex {
 public:
  /// At most this many shards; more would only spread shared keys wider.
  static constexpr size_t kMaxShards = 64;

  /// `shards` is clamped to [1, kMaxShards]. One shard is one lock for
  /// everything. More let that many workers' events apply in parallel, at
  /// the price of a key held in several shards being kept once in each, and
  /// an overlap query walking each shard's holders in turn. Answers never
  /// depend on it.
  explicit ResidencyIndex(BlockKeyHasher hasher = BlockKeyHasher(), size_t shards = 1);
  ~ResidencyIndex();

  const BlockKeyHasher& hasher() const { return hasher_; }
  size_t shards() const { return shards_.size(); }

  /// Registers a worker serving `model` with `block_size` tokens per block.
  /// `pool_blocks`, when known (0: not), is how many blocks the engine's KV
  /// pool holds: the worker's tables (and the shared holder table, to at
  /// least one full pool) are then sized here, instead of doubling their way
  /// there while the pool fills (each doubling rehashes, and faults in and
  /// releases a whole array); a clear releases the worker's tables as
  /// before. Sizing changes no answer. AlreadyExists if registered;
  /// InvalidArgument for an empty id or model or a block size <= 0;
  /// ResourceExhausted past 2^22 registered workers.
  Status AddWorker(std::string_view worker, std::string_view model, int64_t block_size,
                   uint64_t pool_blocks = 0);

  /// Deletes the worker and everything resident on it. NotFound if unknown.
  Status RemoveWorker(std::string_view worker);

  /// Applies one engine event to the worker. NotFound for an unknown
  /// worker; InvalidArgument for a BlockStored whose block size or token
  /// count does not match the worker's.
  Result<ApplyResult> Apply(std::string_view worker, const EngineEvent& event);

  /// Adds (or removes) residency of already-keyed blocks in one tier, for
  /// transports that report a span by token ids. NotFound for an unknown
  /// worker.
  Status AddBlocks(std::string_view worker, std::span<const BlockKey> keys, ResidencyTier tier);
  Status RemoveBlocks(std::string_view worker, std::span<const BlockKey> keys,
                      ResidencyTier tier);

  /// Empties the worker and keeps it registered. NotFound if unknown.
  Status ClearWorker(std::string_view worker);

  /// Marks the worker live or stale. NotFound if unknown.
  Status SetState(std::string_view worker, WorkerState state);

  /// A salted request's chain was sent to `worker`; `saltless_root` is the
  /// key its first block has when hashed without the salt (SaltlessRoot).
  /// Until the worker's events show whether it reports salts, a BlockStored
  /// chain root keyed `saltless_root` whose extra keys hold no more than
  /// the LoRA name is that request's, salt dropped: its blocks are not
  /// indexed (ApplyResult::salt_blind_blocks), and at the
  /// kSaltBlindMatches-th such root the worker is marked kNotReported. A
  /// root with more in its extra key marks it kReported. At most
  /// kMaxSaltedRoots are kept per worker, the oldest dropped first; a
  /// cleared worker (a restart) starts over at kUnknown. NotFound if unknown.
  static constexpr size_t kMaxSaltedRoots = 256;
  static constexpr uint32_t kSaltBlindMatches = 2;
  Status ExpectSaltedRoot(std::string_view worker, BlockKey saltless_root);

  /// kvgov keys of the worker's blocks named by engine hashes, in order;
  /// NotFound naming the first hash the worker does not hold.
  Result<std::vector<BlockKey>> KeysForEngineHashes(std::string_view worker,
                                                    std::span<const EngineHash> hashes,
                                                    int64_t group_idx) const;

  /// Every registered worker, sorted by id.
  std::vector<WorkerResidency> Workers() const;
  std::optional<WorkerResidency> Worker(std::string_view worker) const;

  /// Whether `worker` (live or stale) holds `key` in any tier; false for an
  /// unknown worker.
  bool Holds(std::string_view worker, BlockKey key) const;

  /// For each live worker holding chain[0], how many leading blocks of the
  /// chain it holds. Stale workers are left out. Sorted by worker id.
  std::vector<WorkerOverlap> Overlap(std::span<const BlockKey> chain) const;

  /// Salt lineage, for the residue of a revoked tenant: blocks of the
  /// tenant's old cache salts that engines still hold. A chain's salt shows
  /// only on its root (a BlockStored with no parent), in extra_keys[0];
  /// every later block inherits its parent's lineage. So each engine ref
  /// (engine hash in a KV-cache group on a worker) remembers the root extra
  /// key it descends from:
  ///  - unsalted: a root whose extra_keys[0] holds no more than the LoRA
  ///    name (FirstBlockExtraKey(lora_name, "")), and what descends from
  ///    one. Never offered to `matches`: no tenant's salt is in it;
  ///  - a lineage: a root's extra_keys[0] otherwise, interned per worker,
  ///    at most kMaxLineages at once (a lineage no ref holds any more frees
  ///    its place);
  ///  - unattributed: the lineage is unknown, so the ref may be any
  ///    tenant's: descendants of a root past kMaxLineages, and every ref a
  ///    RestoreWorker brought in (snapshots do not carry lineage) until it
  ///    is removed or stored again, and what descends from those.
  /// A hash stored again takes the new event's lineage; a ref leaves its
  /// lineage when it leaves the worker (every tier); ClearWorker and
  /// AllBlocksCleared forget every lineage. Blocks the index does not
  /// index (orphans, salt-blind roots) have none.
  static constexpr size_t kMaxLineages = 4096;

  /// Per worker (live or stale), how many engine refs descend from a
  /// lineage whose root extra key `matches` accepts, and how many are
  /// unattributed; a caller certifying a revocation must treat the
  /// unattributed ones as the revoked tenant's. One entry per worker with
  /// either, sorted by id; workers with neither are left out.
  ///
  /// `matches` is called once per lineage a worker's refs hold (never per
  /// block), with the registry's lock and that worker's shard's lock held
  /// shared: it must be quick, and must not call into this index. With
  /// `by_tier` false the query costs O(workers x lineages); with `by_tier`
  /// true, a worker with matched refs whose blocks are not all in one tier
  /// (an engine that offloads) also has its lineage entries walked and each
  /// matched ref's tiers read. Shards
  /// are read one after another, as Overlap does: each worker's entry is
  /// consistent in itself.
  std::vector<LineageResidue> Residue(
      const std::function<bool(std::string_view root_extra_key)>& matches, bool by_tier) const;

  /// Total (block, worker) residency pairs, for memory accounting.
  uint64_t ResidentPairs() const;

  /// The worker's whole residency (model, block size, live or stale, every
  /// engine hash -> key mapping, every key's tiers, including keys added by
  /// AddBlocks) as a versioned binary snapshot with a CRC-32C trailer
  /// (docs/formats/index-snapshot.md). Equal residency gives equal bytes.
  /// The lock is held shared only while the worker's tables are copied;
  /// sorting and encoding happen after it is released. NotFound if unknown.
  /// The same as EncodeWorkerSnapshot(CaptureWorker(worker)).
  Result<std::string> SnapshotWorker(std::string_view worker) const;

  /// The copy SnapshotWorker starts with (worker_capture.h), for a caller
  /// that encodes it elsewhere: the worker's residency at this moment,
  /// taken under its shard's lock held shared. NotFound if unknown.
  Result<WorkerCapture> CaptureWorker(std::string_view worker) const;

  /// Replaces the worker's residency (tables, tier counts, live or stale)
  /// with a snapshot's. The snapshot is decoded in full before the lock is
  /// taken, so on any error the worker is untouched. Returns:
  ///  - Corruption naming the byte offset and what is wrong (magic, version,
  ///    length, checksum, a count running past the end, a tier mask with
  ///    unknown bits, unordered or duplicate records);
  ///  - NotFound if the worker is not registered;
  ///  - FailedPrecondition when the snapshot's model or block size is not
  ///    the registration's (naming both), or its keys were computed by a
  ///    block-key hasher with another seed or scheme.
  /// Every engine ref it restores is unattributed (see Residue): snapshots
  /// carry no lineage.
  Status RestoreWorker(std::string_view worker, std::string_view snapshot);

 private:
  struct WorkerSlot;
  struct Shard;
  using WriteLock = std::unique_lock<std::shared_mutex>;
  using ReadLock = std::shared_lock<std::shared_mutex>;

  // REQUIRES: registry_mu_ held (shared is enough).
  WorkerSlot* FindLocked(std::string_view worker) const;
  // REQUIRES: registry_mu_ held exclusively.
  void RankLocked();  // renumbers every slot's position in by_id_
  Shard& ShardOf(uint32_t number) const { return *shards_[number % shards_.size()]; }
  // The worker's slot with its shard's lock held (WriteLock or ReadLock),
  // or null (and no lock) when it is not registered. The registry is held
  // until the shard's lock is: a RemoveWorker, which takes both, cannot
  // free the slot in between.
  template <typename Lock>
  std::pair<WorkerSlot*, Lock> LockWorker(std::string_view worker) const;
  // Every shard's lock, shared, taken in shard order.
  std::vector<ReadLock> LockAllForRead() const;
  // Overlap's walk over one shard's holders: appends an entry per live
  // worker of the shard holding chain[0], and its rank to `ranks`.
  // `position` (worker number -> this shard's candidate) has an entry per
  // worker number; the walk sets its own workers' entries.
  // REQUIRES: registry_mu_ and the shard's lock held (shared is enough).
  void OverlapInShard(const Shard& shard, std::span<const BlockKey> chain,
                      std::span<uint32_t> position, std::vector<WorkerOverlap>& out,
                      std::vector<uint32_t>& ranks) const;

  // The functions below REQUIRE the slot's shard lock held exclusively.
  // Returns the key's tiers on the worker before (0: it was not resident).
  uint16_t AddTierLocked(WorkerSlot& slot, BlockKey key, ResidencyTier tier);
  enum class Removal { kNotResident, kTierRemoved, kPairRemoved };
  Removal RemoveTierLocked(WorkerSlot& slot, BlockKey key, ResidencyTier tier);
  void ClearLocked(WorkerSlot& slot);
  ApplyResult ApplyStoredLocked(WorkerSlot& slot, const BlockStored& stored);
  bool NoteSaltReportingLocked(WorkerSlot& slot, const BlockStored& stored);
  ApplyResult ApplyRemovedLocked(WorkerSlot& slot, const BlockRemoved& removed);
  // Decodes and checks a snapshot into `out` (a detached slot: no number, in
  // no holder list, and its keys' tiers beside it). Needs no lock: it reads
  // only hasher_.
  struct DecodedSnapshot;
  Status DecodeSnapshot(std::string_view snapshot, DecodedSnapshot& out) const;

  const BlockKeyHasher hasher_;
  // Fixed at construction. Each guards its workers' slots (but their
  // `rank`) and its holder table.
  std::vector<std::unique_ptr<Shard>> shards_;
  // Guards the members below, and every slot's `rank`. Taken before any
  // shard's lock, never after.
  mutable std::shared_mutex registry_mu_;
  std::vector<std::unique_ptr<WorkerSlot>> workers_;  // index = worker number; null when removed
  std::vector<uint32_t> free_numbers_;                // numbers of removed workers, for reuse
  std::unordered_map<std::string, uint32_t> worker_numbers_;
  // Worker numbers in id order: listings and overlaps come out sorted by id
  // without sorting strings on every route. Each slot keeps its position.
  std::vector<uint32_t> by_id_;
};

}  // namespace kvgov::index
