#include "server/salting.h"

#include "server/daemon.h"

namespace kvgov::server {

Result<RequestSalt> SaltRoute(Daemon& daemon, router::RouteRequest& request) {
  KVGOV_ASSIGN_OR_RETURN(
      RequestSalt salt,
      daemon.salts->ForPrompt(request.tenant, request.model, request.lora_name, request.token_ids));
  if (salt.diverted()) {
    request.salt_must_be_honoured = true;
    daemon.gate.CountDiverted(salt.diverted_by);
    daemon.route_metrics.diversions
        ->WithLabels({request.model, request.tenant.empty() ? "none" : request.tenant})
        ->Inc();
  }
  return salt;
}

void MarkDiverted(const RequestSalt& salt, router::RouteDecision& decision) {
  MarkDiverted(salt.diverted(), decision);
}

void MarkDiverted(bool diverted, router::RouteDecision& decision) {
  if (!diverted || decision.worker.empty()) return;
  decision.verdict.kind = LookupKind::kQuarantine;
  decision.verdict.reason = LookupReason::kDiverted;
}

}  // namespace kvgov::server
