#pragma once

// kvgov's side of the gateway's prefill/decode handoff
// (docs/formats/gateway.md, "Prefill/decode disaggregation";
// docs/adr/0021), which runs on the front door's loops
// (src/gateway/handoff.h): the pin's lease, and the record.

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/mutex.h"
#include "kvgov/core/nixl_lease.h"
#include "kvgov/core/status.h"
#include "kvgov/gateway/handoff_plane.h"
#include "kvgov/governance/governance_gate.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/metrics/registry.h"
#include "kvgov/services/lease_service.h"

namespace kvgov::services {

/// The newest handoffs, for operators. Thread-safe: one mutex.
class HandoffLog {
 public:
  static constexpr size_t kKept = 256;
  void Add(gateway::HandoffRecord record);
  /// Newest first; only `tenant`'s when not empty.
  std::vector<gateway::HandoffRecord> NewestFirst(std::string_view tenant) const;

 private:
  mutable Mutex mu_;
  std::deque<gateway::HandoffRecord> records_ KVGOV_GUARDED_BY(mu_);  // oldest first
};

class Engines;

/// The handoffs the gateway's request path makes: their pins' leases, and
/// their records.
///
/// Thread-safe: the log, and each collaborator, are.
class Handoffs {
 public:
  struct Metrics {
    metrics::CounterFamily* outcomes = nullptr;   // {outcome}: gateway::HandoffOutcome
    metrics::HistogramFamily* seconds = nullptr;  // prefill answer -> decode first token
  };

  /// Every collaborator must outlive the handoffs.
  Handoffs(LeaseService* leases, const governance::GovernanceGate* gate,
           const index::ResidencyIndex* index, const Engines* engines, Metrics metrics)
      : leases_(leases), gate_(gate), index_(index), engines_(engines), metrics_(metrics) {}

  /// Plane::Pin: the lease "handoff-<request_id>" over the prompt's span on
  /// the prefill worker, its TTL the engine's pin time, reported as kvgov's
  /// own witness; the pin then reads the lease table and the span gate.
  Result<std::unique_ptr<gateway::HandoffPin>> Pin(const gateway::HandoffRequest& request,
                                                   std::string_view request_id,
                                                   std::string_view prefill_worker,
                                                   NIXLTransferRole role);

  /// Plane::RecordHandoff: into the log and the metrics.
  void Record(gateway::HandoffRecord record, std::optional<double> handoff_seconds);

  const HandoffLog& log() const { return log_; }

 private:
  LeaseService* const leases_;
  const governance::GovernanceGate* const gate_;
  const index::ResidencyIndex* const index_;
  const Engines* const engines_;
  const Metrics metrics_;
  HandoffLog log_;
};

}  // namespace kvgov::services
