#include "server/salting.h"

#include <algorithm>

#include "kvgov/index/block_key.h"
#include "server/daemon.h"

namespace kvgov::server {
namespace {

// A diversion is keyed apart from every block a quarantine names; one that
// crosses a quarantine anyway names a block by its engine hash on a
// diverted chain. Each round adds what it crossed; this many is plenty.
constexpr int kDivertRounds = 4;

// The block size of the model's workers (they share one), or 0 when none
// serves it.
int64_t BlockSizeOf(const Daemon& daemon, std::string_view model) {
  for (const index::WorkerResidency& worker : daemon.index.Workers()) {
    if (worker.model == model) return worker.block_size;
  }
  return 0;
}

}  // namespace

std::string CurrentTenantSalt(const Daemon& daemon, std::string_view tenant,
                              std::string_view model) {
  if (tenant.empty()) return "";
  return router::TenantCacheSalt(daemon.tenant_secret, tenant, model,
                                 daemon.salt_epochs.Of(tenant, model));
}

Result<RequestSalt> SaltForPrompt(const Daemon& daemon, std::string_view tenant,
                                  std::string_view model, std::string_view lora_name,
                                  std::span<const int64_t> tokens) {
  RequestSalt out{CurrentTenantSalt(daemon, tenant, model), {}};
  if (daemon.gate.quarantined_blocks() == 0) return out;
  const int64_t block_size = BlockSizeOf(daemon, model);
  if (block_size <= 0) return out;  // the router answers for an unknown model
  const std::string ordinary = out.salt;
  for (int round = 0; round < kDivertRounds; ++round) {
    const std::vector<index::BlockKey> chain = index::RequestChain(
        daemon.index.hasher(), {std::string(model), std::string(lora_name), 0}, out.salt,
        tokens, block_size);
    std::vector<std::string> crossed = daemon.gate.QuarantinesCrossed(chain);
    std::vector<std::string> all;
    std::set_union(out.diverted_by.begin(), out.diverted_by.end(), crossed.begin(),
                   crossed.end(), std::back_inserter(all));
    if (all == out.diverted_by) return out;
    out.diverted_by = std::move(all);
    out.salt = router::DivertedCacheSalt(daemon.tenant_secret, ordinary, out.diverted_by);
  }
  return Status::Unavailable("the prompt crosses quarantined spans under every salt tried (" +
                             std::to_string(out.diverted_by.size()) + " quarantines)");
}

Result<RequestSalt> SaltRoute(Daemon& daemon, router::RouteRequest& request) {
  KVGOV_ASSIGN_OR_RETURN(RequestSalt salt,
                         SaltForPrompt(daemon, request.tenant, request.model, request.lora_name,
                                       request.token_ids));
  if (salt.diverted()) {
    request.salt_must_be_honoured = true;
    daemon.route_metrics.diversions
        ->WithLabels({request.model, request.tenant.empty() ? "none" : request.tenant})
        ->Inc();
  }
  return salt;
}

void MarkDiverted(const RequestSalt& salt, router::RouteDecision& decision) {
  if (!salt.diverted() || decision.worker.empty()) return;
  decision.verdict.kind = LookupKind::kQuarantine;
  decision.verdict.reason = LookupReason::kDiverted;
}

}  // namespace kvgov::server
