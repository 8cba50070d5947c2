#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvgov/core/mutex.h"
#include "kvgov/core/nixl_lease.h"
#include "kvgov/index/block_key.h"
#include "kvgov/router/router.h"

namespace kvgov::governance {

/// What governance says about blocks, for the router: a quarantined block,
/// and every block that extends it, earns no credit on any worker (their KV
/// attended to it); a block a NIXL lease covers on its prefill worker earns
/// credit only while the lease is active. Credit is counted over a chain's
/// leading blocks, so stopping at the first refused block also refuses
/// everything that extends it: the causal closure needs no separate walk
/// for routing.
///
/// Thread-safe: a reader-writer lock; route calls read, governance writes.
/// While governance holds nothing at all, route calls skip the lock (a flag
/// every write updates under it says so).
class GovernanceGate : public router::SpanGate {
 public:
  Limit Creditable(std::string_view worker, std::span<const index::BlockKey> chain, size_t resident,
                   int64_t now_ms) const override;

  /// Quarantine `id` stops credit for `keys`, on every worker. Applying
  /// the same id again changes nothing (a replica applies its own writes
  /// from the log too).
  void Quarantine(std::string_view id, std::span<const index::BlockKey> keys);
  /// Ends quarantine `id`: its blocks earn credit again unless another
  /// quarantine names them. False for an id not in force.
  bool Lift(std::string_view id);
  bool IsQuarantined(index::BlockKey key) const;
  /// Whether any quarantine is in force; takes no lock.
  bool HoldsQuarantines() const { return holds_quarantines_.load(std::memory_order_acquire); }
  /// The ids of the quarantines in force that name any block of `chain`,
  /// sorted: the request whose prompt this is must not reach those blocks
  /// in any engine (docs/adr/0028). Takes no lock while nothing is
  /// quarantined.
  std::vector<std::string> QuarantinesCrossed(std::span<const index::BlockKey> chain) const;
  /// A request crossing `ids` was sent under a diverted salt. Ids no longer
  /// in force are skipped.
  void CountDiverted(std::span<const std::string> ids) const;
  /// Requests diverted by quarantine `id` since this process started (or
  /// since the quarantine was applied); 0 for an id not in force.
  uint64_t Diverted(std::string_view id) const;
  size_t quarantined_blocks() const;

  /// Blocks under a pending invalidation earn no credit on their worker
  /// until it is witnessed; `whole_worker` stops all credit on the worker.
  void SetPending(std::string_view worker, std::span<const index::BlockKey> keys, bool whole_worker,
                  bool pending);

  /// The blocks `lease` covers on `worker`. The lease's state is judged
  /// at each route's clock, so an expiry needs no event to take effect. A
  /// lease the gateway witnessed from its own handoff covers nothing here:
  /// it governs the decode worker's pull (the gateway checks it at the
  /// handoff's clock), while the prefill worker's prefix cache outlives the
  /// pin and is what its event stream says (docs/adr/0021).
  void CoverLease(const NIXLLease& lease, std::string_view worker,
                  std::span<const index::BlockKey> keys);
  /// The lease's new record after an event. Unknown leases are ignored.
  void UpdateLease(const NIXLLease& lease);

  /// Forgets what ended leases (not active at `now_ms`) no longer govern:
  /// a covered block its worker no longer holds (`held` false) stops being
  /// watched, since KV stored there again is the engine's own, under
  /// whatever covers it then; a lease none of whose blocks is still watched
  /// is dropped. A block still held keeps refusing credit: the ended
  /// lease's KV is there and not to be reused. So memory follows the ended
  /// leases' blocks still resident, not every lease ever reported.
  /// `held` is called with no lock of this gate held, for each ended lease
  /// at most every kEndedRecheckMs. Returns the leases dropped.
  // How often ForgetEnded asks about one ended lease's blocks: each ask is
  // an index lookup per block, and it runs on a 100 ms timer.
  static constexpr int64_t kEndedRecheckMs = 5000;
  size_t ForgetEnded(int64_t now_ms,
                     const std::function<bool(std::string_view worker, index::BlockKey key)>& held);
  size_t lease_count() const;

 private:
  struct Lease {
    std::string worker;
    std::vector<index::BlockKey> keys;
    NIXLLease record;
    int64_t next_check_ms = 0;  // ended: when ForgetEnded next asks about its blocks
  };
  // What governance holds against one worker. Absent, or with every member
  // empty and zero, it refuses nothing, so a route over a worker with no
  // entry here checks only the quarantine: most routes, since leases and
  // invalidations name few workers.
  struct WorkerRules {
    int whole_worker_pending = 0;
    // key -> directives pending on it; counted, since two may name one
    // block. Only counts above zero are kept.
    std::unordered_map<index::BlockKey, int> pending;
    // key -> the lease covering it; the last lease to cover wins.
    std::unordered_map<index::BlockKey, std::string> covered;
  };

  // Drops the worker's entry once it refuses nothing, so the quick path
  // above stays the common one.
  void ForgetIfEmpty(std::map<std::string, WorkerRules, std::less<>>::iterator it)
      KVGOV_REQUIRES(mu_);
  // Called last by every write.
  void UpdateHoldsAnything() KVGOV_REQUIRES(mu_);

  mutable SharedMutex mu_;
  // Whether anything is quarantined or held against any worker. Written
  // under mu_ by every write; a route that reads false needs no lock, as if
  // it had run just before the write that will set it.
  std::atomic<bool> holds_anything_{false};
  // Whether any quarantine is in force; written like holds_anything_.
  std::atomic<bool> holds_quarantines_{false};
  // id -> its keys; key -> how many quarantines in force name it.
  struct QuarantineEntry {
    std::vector<index::BlockKey> keys;  // sorted, unique
    // Counted by route calls, which hold mu_ shared only.
    mutable std::atomic<uint64_t> diverted{0};
  };
  std::map<std::string, QuarantineEntry, std::less<>> quarantines_ KVGOV_GUARDED_BY(mu_);
  std::unordered_map<index::BlockKey, int> quarantined_ KVGOV_GUARDED_BY(mu_);
  std::map<std::string, Lease, std::less<>> leases_ KVGOV_GUARDED_BY(mu_);
  std::map<std::string, WorkerRules, std::less<>> workers_ KVGOV_GUARDED_BY(mu_);
};

}  // namespace kvgov::governance
