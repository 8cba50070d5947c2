#pragma once

// Internal to kvgov_server: the daemon's side of the gateway's
// prefill/decode handoff (docs/formats/gateway.md, "Prefill/decode
// disaggregation"; docs/adr/0021), which runs on the front door's loops
// (src/gateway/handoff.h): the pools, the pin's lease, the record.

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/plane.h"
#include "kvgov/core/nixl_lease.h"
#include "kvgov/core/status.h"
#include "kvgov/ingest/engine_spec.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace kvgov::server {

struct Daemon;

using gateway::HandoffOutcome;
using gateway::HandoffRecord;
using gateway::HandoffRequest;

/// The newest handoffs, for operators. Thread-safe: one mutex.
class HandoffLog {
 public:
  static constexpr size_t kKept = 256;
  void Add(HandoffRecord record);
  /// Newest first; only `tenant`'s when not empty.
  std::vector<HandoffRecord> NewestFirst(std::string_view tenant) const;

 private:
  mutable std::mutex mu_;
  std::deque<HandoffRecord> records_;  // oldest first
};

/// True when one of `serving` has a role other than both: the model is
/// then served in two steps.
bool ServedDisaggregated(const Daemon& daemon, const std::vector<std::string>& serving);

/// The worker's engine role (both for a worker no --engine names).
ingest::EngineRole RoleOf(const Daemon& daemon, std::string_view worker);

/// Plane::Pin: the lease "handoff-<request_id>" over the prompt's span on
/// the prefill worker, its TTL the engine's pin time, reported as kvgov's
/// own witness; the pin then reads the lease table and the span gate.
Result<std::unique_ptr<gateway::HandoffPin>> PinHandoff(Daemon& daemon,
                                                        const HandoffRequest& request,
                                                        std::string_view request_id,
                                                        std::string_view prefill_worker,
                                                        NIXLTransferRole role);

/// Plane::RecordHandoff: into the log and the metrics.
void RecordHandoff(Daemon& daemon, HandoffRecord record, std::optional<double> handoff_seconds);

/// GET /v1/handoffs on the control API: the newest handoffs, newest first
/// (read role; a tenant-bound caller sees its tenant's only).
void RegisterHandoffApi(httplib::Server& http, Daemon& daemon);

}  // namespace kvgov::server
