#pragma once

#include <string_view>

#include "kvgov/codec/ingest_batch.h"
#include "kvgov/core/admission.h"
#include "kvgov/core/status.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/metrics/cache_accounting.h"
#include "kvgov/services/lease_service.h"

namespace kvgov::services {

/// Reports from transports and engines that arrive as events rather than
/// streams (POST /v1/events, the spool directory): each is lowered into the
/// envelope (core's lowerings), judged by the operator's admission policy,
/// applied (a lease through the lease service, a transfer's residency into
/// the index) and counted by the cache accounting under its source.
///
/// Thread-safe: the index, the accounting and the lease service each are;
/// the admission policy is fixed at construction.
class ReportIntake {
 public:
  /// Every collaborator must outlive the intake.
  ReportIntake(AdmissionPolicy admission, index::ResidencyIndex* index,
               metrics::CacheAccounting* accounting, LeaseService* leases)
      : admission_(std::move(admission)), index_(index), accounting_(accounting), leases_(leases) {}

  /// Lowers and applies one report at `now_ms` for `actor`. An unadmitted
  /// reporter's residency report is counted but moves nothing
  /// (PermissionDenied naming the owner), so it can never make the router
  /// credit blocks; a report may neither claim nor move a lease the
  /// gateway witnesses from its own handoff. Errors are worded
  /// "<field>: <problem>".
  Status Apply(const IngestEvent& event, std::string_view actor, int64_t now_ms);

 private:
  // Moves residency as a transport reported it.
  Status ApplyTransferResidency(const KVTransfer& transfer, const SpanResidency& residency);

  const AdmissionPolicy admission_;
  index::ResidencyIndex* const index_;
  metrics::CacheAccounting* const accounting_;
  LeaseService* const leases_;
};

}  // namespace kvgov::services
