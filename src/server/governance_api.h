#pragma once

#include <string_view>

#include "kvgov/codec/ingest_batch.h"
#include "kvgov/core/status.h"
#include "kvgov/governance/lease_table.h"
#include "kvgov/replication/governance_log.h"

namespace httplib {
class Server;
}

namespace kvgov::server {

struct Daemon;

/// Applies a reported NIXL lease event: the lease table moves (or refuses),
/// the transition is journaled and the lease persisted in one synced write,
/// the governance gate learns the blocks the lease covers on its prefill
/// worker, and the transition is counted. Errors are the lease table's,
/// worded "<field>: <problem>" or naming the lease.
Status ApplyLeaseReport(Daemon& daemon, const NIXLLease& report,
                        const std::optional<SpanResidency>& residency, std::string_view actor);

/// Journals, persists and counts transitions the expiry timer found.
void RecordLeaseTransitions(Daemon& daemon,
                            const std::vector<governance::LeaseTransition>& transitions);

/// Forgets ended leases (a reported one an hour after it ended, a
/// handoff's a minute after) and deletes the stored records of the
/// handoffs' (one a request): the journal keeps their history.
void ForgetEndedLeases(Daemon& daemon, int64_t now_ms);

/// Restores leases and quarantines from the store at start, then records
/// the expiry of leases whose time ran out while kvgov was down.
Status RecoverGovernance(Daemon& daemon);

/// Brings the in-memory governance state (leases, quarantines, drains,
/// directives) up to an entry of the replicated log whose writes are
/// already durable here. Every write is a whole record, so applying one
/// twice changes nothing.
void ApplyReplicatedGovernance(Daemon& daemon, const replication::LogEntry& entry);

/// The replica's guard (replication::Replica::GuardHook): a lease write
/// applies only as a legal step of the lease machine from the record the
/// log left, at the entry's time; so of two conflicting reports two
/// replicas accepted at once, the first in the log wins and the second is
/// refused on every replica alike, and its writer answers with why.
Status GuardReplicatedGovernance(const Daemon& daemon, const replication::LogEntry& entry);

/// GET /v1/leases, POST /v1/quarantine, GET /v1/quarantines.
void RegisterGovernanceApi(httplib::Server& http, Daemon& daemon);

}  // namespace kvgov::server
