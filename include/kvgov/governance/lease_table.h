#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/mutex.h"
#include "kvgov/core/nixl_lease.h"
#include "kvgov/core/status.h"

namespace kvgov::governance {

/// One state change of a lease, for the journal and the metrics.
struct LeaseTransition {
  std::string lease_id;
  std::optional<NIXLLeaseState> from;  // nullopt: the lease was just created
  NIXLLeaseState to;
  int64_t at_ms = 0;
  friend bool operator==(const LeaseTransition&, const LeaseTransition&) = default;
};

/// The NIXL leases kvgov witnesses, each a monotonic state machine
/// (core/nixl_lease.h): active -> completed | expired | failed; terminal
/// states never revive; a heartbeat moves expiry to now + ttl; expiry holds
/// at now >= expires_at whether or not an expiry event arrives (ExpireDue,
/// run by a timer, records it).
///
/// Expiry and forgetting walk time-ordered indexes from their oldest end,
/// not the table: a timer runs both every 100 ms over however many leases
/// an hour of retention holds.
///
/// Thread-safe: one mutex.
class LeaseTable {
 public:
  /// Applies a reported event at `now_ms`: `create` grants a new lease from
  /// the report; any other event moves an existing one. Returns the
  /// transition it caused (none for a heartbeat that keeps a lease active,
  /// or a late expiry report). Errors: AlreadyExists (create of a known
  /// lease), NotFound (event for an unknown lease), FailedPrecondition (an
  /// event on a terminal lease: it never revives), InvalidArgument (a bad
  /// report, an event timed before the grant).
  Result<std::optional<LeaseTransition>> Apply(const NIXLLease& report, int64_t now_ms);

  /// What Apply would do, without doing it: the lease's next record and
  /// the transition. A replica records this in the replicated log first;
  /// the log's apply then Restores the record on every replica.
  struct Change {
    NIXLLease next;
    std::optional<LeaseTransition> transition;
  };
  Result<Change> Preview(const NIXLLease& report, int64_t now_ms) const;

  /// Records the expiry of every active lease whose time has come.
  std::vector<LeaseTransition> ExpireDue(int64_t now_ms);

  /// Puts back a lease read from the store (recovery) or another replica's
  /// log entry; no transition. One ended by its event is forgotten as if
  /// it had ended at its grant.
  void Restore(const NIXLLease& lease);

  std::optional<NIXLLease> Get(std::string_view lease_id) const;
  std::vector<NIXLLease> All() const;

  /// Leases by state at `now_ms`.
  std::map<NIXLLeaseState, uint64_t> CountByState(int64_t now_ms) const;

  /// Drops from memory the terminal leases that ended before `cutoff_ms`,
  /// and those the gateway witnessed from a handoff (one a request) that
  /// ended before `handoff_cutoff_ms`. Returns the handoff leases dropped,
  /// whose stored records the caller deletes too: their journal rows are
  /// their history.
  std::vector<std::string> ForgetEndedBefore(int64_t cutoff_ms, int64_t handoff_cutoff_ms);

 private:
  Result<Change> PreviewLocked(const NIXLLease& report, int64_t now_ms) const KVGOV_REQUIRES(mu_);
  // Puts `lease` in the table, replacing its earlier record, and keeps the
  // indexes in step; an ended lease is noted as ended at `ended_at_ms`
  // unless it already was.
  void PutLocked(const NIXLLease& lease, std::optional<int64_t> ended_at_ms) KVGOV_REQUIRES(mu_);
  void MarkEndedLocked(const std::string& lease_id, int64_t at_ms, NIXLLeaseWitness witness)
      KVGOV_REQUIRES(mu_);

  using ByTime = std::set<std::pair<int64_t, std::string>>;  // (ms, lease id)

  mutable Mutex mu_;
  std::map<std::string, NIXLLease, std::less<>> leases_ KVGOV_GUARDED_BY(mu_);
  std::map<std::string, int64_t, std::less<>> ended_at_ms_ KVGOV_GUARDED_BY(mu_);
  ByTime expiring_ KVGOV_GUARDED_BY(mu_);        // active leases by expires_at_ms
  ByTime ended_reported_ KVGOV_GUARDED_BY(mu_);  // ended transport-reported leases by end
  ByTime ended_handoff_ KVGOV_GUARDED_BY(mu_);   // ended handoff-witnessed leases by end
};

}  // namespace kvgov::governance
