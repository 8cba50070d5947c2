#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/codec/ingest_batch.h"
#include "kvgov/core/nixl_lease.h"
#include "kvgov/core/status.h"
#include "kvgov/governance/governance_gate.h"
#include "kvgov/governance/lease_table.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/metrics/registry.h"
#include "kvgov/replication/governance_log.h"
#include "kvgov/services/governance_recorder.h"
#include "kvgov/store/store.h"

namespace kvgov::services {

struct LeaseServiceOptions {
  /// How long an ended, transport-reported lease stays listed (and its
  /// record stored); a handoff's is forgotten a minute after it ended.
  int64_t retain_ended_ms = int64_t{3600} * 1000;
};

/// The NIXL leases kvgov witnesses (docs/formats/governance-api.md, "NIXL leases";
/// docs/adr/0004, 0021): each report moves the lease table (or is refused),
/// the transition is journaled with the lease's record in one synced write
/// (through the replicated log for a replica), the gate learns the blocks
/// the lease covers on its worker, and the transition is counted. Owns the
/// lease table; the gate is shared with the router and the other services.
///
/// Store records: "lease/<id>" in the governance column (docs/formats/store.md).
///
/// Thread-safe: the table, the gate, the index, the store and the recorder
/// each are; a report is not atomic against a concurrent one for the same
/// lease, whose order the table (or, for replicas, the log) decides.
class LeaseService {
 public:
  static constexpr std::string_view kRecordPrefix = "lease/";

  /// Registers kvgov_lease_transitions_total, kvgov_lease_rejections_total
  /// and kvgov_lease_grants_total on `metrics`. Every collaborator must
  /// outlive the service.
  static Result<std::unique_ptr<LeaseService>> Create(
      governance::GovernanceGate* gate, const index::ResidencyIndex* index, store::Store* store,
      GovernanceRecorder* recorder, metrics::Registry* metrics, LeaseServiceOptions options = {});

  /// Applies a reported lease event at `now_ms`; `residency` names the span
  /// a create pins (token ids on a worker), else the span digest names its
  /// block on the remote engine, and a span kvgov cannot resolve pins
  /// nothing it could credit. For a replica, the change is previewed here
  /// and made when the log's entry is applied (ApplyReplicatedRecord).
  /// Errors are the lease table's (or the log's guard's), worded
  /// "<field>: <problem>" or naming the lease.
  Status ApplyReport(const NIXLLease& report, const std::optional<SpanResidency>& residency,
                     std::string_view actor, int64_t now_ms);

  /// Records the expiry of the active leases whose time is up at `now_ms`
  /// (their state holds by the clock already; this journals and counts it).
  /// A write that fails is logged: the expiry stands in memory.
  void ExpireDue(int64_t now_ms);

  /// Forgets ended leases: a reported one `retain_ended_ms` after it ended,
  /// a handoff's a minute after (its stored record deleted too: the journal
  /// keeps its history); the gate forgets the blocks they covered that
  /// their worker no longer holds.
  void ForgetEnded(int64_t now_ms);

  /// Restores the stored leases into the table and the gate at start; a
  /// single node then records the expiry of leases whose time ran out while
  /// kvgov was down (a replica leaves that to whichever keeps house).
  /// Records that are not lease records are skipped with a warning.
  Status Recover(int64_t now_ms);

  /// A lease record the replicated log carries, applied in log order on
  /// every replica. False for a value that is not a lease record.
  bool ApplyReplicatedRecord(std::string_view record);

  /// The replicated log's guard for the entry's lease writes: each applies
  /// only as a legal step of the lease machine from the record the log left,
  /// at the entry's time; so of two conflicting reports two replicas
  /// accepted at once, the first in the log wins, and the second is refused
  /// on every replica alike. Unavailable when the store cannot be read.
  Status GuardReplicated(const replication::LogEntry& entry) const;

  std::optional<NIXLLease> Get(std::string_view lease_id) const { return table_.Get(lease_id); }
  std::vector<NIXLLease> All() const { return table_.All(); }
  std::map<NIXLLeaseState, uint64_t> CountByState(int64_t now_ms) const {
    return table_.CountByState(now_ms);
  }

 private:
  // The worker a lease pins blocks on, and their keys.
  struct Span {
    std::string worker;
    std::vector<index::BlockKey> keys;
  };

  LeaseService(governance::GovernanceGate* gate, const index::ResidencyIndex* index,
               store::Store* store, GovernanceRecorder* recorder, LeaseServiceOptions options)
      : gate_(gate), index_(index), store_(store), recorder_(recorder), options_(options) {}

  Status ApplyThroughLog(const NIXLLease& report, const std::optional<SpanResidency>& residency,
                         std::string_view actor, int64_t now_ms);
  Span SpanOf(const NIXLLease& lease, const std::optional<SpanResidency>& residency) const;
  Span PersistedSpan(std::string_view lease_id) const;
  Status Persist(std::string_view actor, const governance::LeaseTransition& transition,
                 const NIXLLease& lease, const Span& span);
  // A heartbeat: the new expiry must survive a crash, but makes no row.
  Status PersistHeartbeat(std::string_view actor, const NIXLLease& lease, const Span& span);
  void Reject(const Status& refusal);

  governance::GovernanceGate* const gate_;
  const index::ResidencyIndex* const index_;
  store::Store* const store_;
  GovernanceRecorder* const recorder_;
  const LeaseServiceOptions options_;
  governance::LeaseTable table_;
  metrics::CounterFamily* transitions_ = nullptr;  // {from,to}
  metrics::CounterFamily* rejections_ = nullptr;   // {reason}
  metrics::CounterFamily* grants_ = nullptr;       // {witness}: handoff, reported
};

}  // namespace kvgov::services
