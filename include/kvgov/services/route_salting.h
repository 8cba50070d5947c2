#pragma once

// The salt of each request kvgov routes
// (docs/formats/salting.md; docs/adr/0019).

#include <string_view>

#include "kvgov/core/status.h"
#include "kvgov/governance/governance_gate.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/metrics/registry.h"
#include "kvgov/router/router.h"
#include "kvgov/services/tenant_salts.h"

namespace kvgov::services {

/// Salts the requests /v1/route, its explain and the gateway route.
///
/// Thread-safe: the salts, the gate, the index and the metric family each
/// are.
class RouteSalting {
 public:
  /// Every collaborator must outlive the salting; `diversions` is the
  /// {model,tenant} counter of requests sent under a diverted salt.
  RouteSalting(TenantSalts* salts, governance::GovernanceGate* gate, index::ResidencyIndex* index,
               metrics::CounterFamily* diversions)
      : salts_(salts), gate_(gate), index_(index), diversions_(diversions) {}

  /// TenantSalts::ForPrompt for a route request; a diverted one may then go
  /// only to engines proven to key by the salt
  /// (RouteRequest::salt_must_be_honoured), and each diversion is counted.
  Result<RequestSalt> Salt(router::RouteRequest& request);

  /// Salt for a dry run (POST /v1/route/explain): the same salt and
  /// restriction, nothing counted.
  Result<RequestSalt> DryRun(router::RouteRequest& request) const;

  /// Tells the index that the gateway is sending a salted request to the
  /// decision's worker, so that an engine dropping the salt from its
  /// events is found out by that request's blocks
  /// (ResidencyIndex::ExpectSaltedRoot). Nothing for an unsalted route, a
  /// first block already resident there, or an engine known to report
  /// salts. Only for requests kvgov itself sends: a /v1/route decision may
  /// never be sent.
  void ExpectSaltedBlocks(const router::RouteRequest& request, std::string_view cache_salt,
                          const router::RouteDecision& decision);

 private:
  TenantSalts* const salts_;
  governance::GovernanceGate* const gate_;
  index::ResidencyIndex* const index_;
  metrics::CounterFamily* const diversions_;
};

/// The verdict of a diverted decision: a quarantine the request was kept
/// from, whatever the diverted chain earned.
void MarkDiverted(const RequestSalt& salt, router::RouteDecision& decision);
void MarkDiverted(bool diverted, router::RouteDecision& decision);

}  // namespace kvgov::services
