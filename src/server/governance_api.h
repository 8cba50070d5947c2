#pragma once

#include <string_view>

#include "kvgov/codec/ingest_batch.h"
#include "kvgov/core/status.h"
#include "kvgov/replication/governance_log.h"

namespace httplib {
class Server;
}

namespace kvgov::server {

struct Daemon;

/// Restores leases and quarantines from the store at start, then records
/// the expiry of leases whose time ran out while kvgov was down.
Status RecoverGovernance(Daemon& daemon);

/// Brings the in-memory governance state (leases, quarantines, drains,
/// directives) up to an entry of the replicated log whose writes are
/// already durable here. Every write is a whole record, so applying one
/// twice changes nothing.
void ApplyReplicatedGovernance(Daemon& daemon, const replication::LogEntry& entry);

/// GET /v1/leases, POST /v1/quarantine, GET /v1/quarantines.
void RegisterGovernanceApi(httplib::Server& http, Daemon& daemon);

}  // namespace kvgov::server
