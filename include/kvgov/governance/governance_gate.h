#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
class GovernanceGate : public router::SpanGate {
 public:
  Limit Creditable(std::string_view worker, std::span<const index::BlockKey> chain,
                   size_t resident, int64_t now_ms) const override;

  void Quarantine(std::span<const index::BlockKey> keys);
  bool IsQuarantined(index::BlockKey key) const;
  size_t quarantined_blocks() const;

  /// Blocks under a pending invalidation earn no credit on their worker
  /// until it is witnessed; `whole_worker` stops all credit on the worker.
  void SetPending(std::string_view worker, std::span<const index::BlockKey> keys,
                  bool whole_worker, bool pending);

  /// The blocks `lease` covers on `worker`. The lease's state is judged
  /// at each route's clock, so an expiry needs no event to take effect.
  void CoverLease(const NIXLLease& lease, std::string_view worker,
                  std::span<const index::BlockKey> keys);
  /// The lease's new record after an event. Unknown leases are ignored.
  void UpdateLease(const NIXLLease& lease);

 private:
  struct Lease {
    std::string worker;
    std::vector<index::BlockKey> keys;
    NIXLLease record;
  };

  mutable std::shared_mutex mu_;
  std::set<index::BlockKey> quarantined_;  // guarded by mu_
  std::map<std::string, Lease, std::less<>> leases_;  // guarded by mu_
  // (worker, key) -> the lease covering it; the last lease to cover wins.
  std::map<std::pair<std::string, index::BlockKey>, std::string> covered_;  // guarded by mu_
  // Counts, since two directives may name one block.
  std::map<std::pair<std::string, index::BlockKey>, int> pending_;  // guarded by mu_
  std::map<std::string, int, std::less<>> pending_workers_;         // guarded by mu_
};

}  // namespace kvgov::governance
