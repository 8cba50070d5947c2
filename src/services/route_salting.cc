#include "kvgov/services/route_salting.h"

#include <span>

#include "kvgov/index/block_key.h"

namespace kvgov::services {

Result<RequestSalt> RouteSalting::DryRun(router::RouteRequest& request) const {
  KVGOV_ASSIGN_OR_RETURN(RequestSalt salt, salts_->ForPrompt(request.tenant, request.model,
                                                             request.lora_name, request.token_ids));
  request.salt_must_be_honoured = salt.diverted();
  return salt;
}

Result<RequestSalt> RouteSalting::Salt(router::RouteRequest& request) {
  KVGOV_ASSIGN_OR_RETURN(RequestSalt salt, DryRun(request));
  if (salt.diverted()) {
    gate_->CountDiverted(salt.diverted_by);
    diversions_->WithLabels({request.model, request.tenant.empty() ? "none" : request.tenant})
        ->Inc();
  }
  return salt;
}

void RouteSalting::ExpectSaltedBlocks(const router::RouteRequest& request,
                                      std::string_view cache_salt,
                                      const router::RouteDecision& decision) {
  // A first block already resident will not be stored again: nothing to
  // expect, and an expectation left waiting could be met by another
  // request's unsalted root.
  if (cache_salt.empty() || decision.worker.empty() || decision.overlap_blocks > 0) return;
  const std::optional<index::WorkerResidency> worker = index_->Worker(decision.worker);
  if (!worker || worker->salts == index::SaltReporting::kReported || worker->block_size <= 0 ||
      request.token_ids.size() < static_cast<size_t>(worker->block_size)) {
    return;
  }
  (void)index_->ExpectSaltedRoot(
      decision.worker,
      index::SaltlessRoot(
          index_->hasher(), {request.model, request.lora_name, 0},
          std::span(request.token_ids).first(static_cast<size_t>(worker->block_size))));
}

void MarkDiverted(const RequestSalt& salt, router::RouteDecision& decision) {
  MarkDiverted(salt.diverted(), decision);
}

void MarkDiverted(bool diverted, router::RouteDecision& decision) {
  if (!diverted || decision.worker.empty()) return;
  decision.verdict.kind = LookupKind::kQuarantine;
  decision.verdict.reason = LookupReason::kDiverted;
}

}  // namespace kvgov::services
