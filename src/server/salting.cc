#include "server/salting.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

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
  if (!daemon.gate.HoldsQuarantines()) return out;  // most requests: no chain to key
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
    daemon.gate.CountDiverted(salt.diverted_by);
    daemon.route_metrics.diversions
        ->WithLabels({request.model, request.tenant.empty() ? "none" : request.tenant})
        ->Inc();
  }
  return salt;
}

std::vector<index::LineageResidue> RevocationResidue(const Daemon& daemon,
                                                     std::string_view tenant,
                                                     std::string_view model,
                                                     const router::SaltEpochs::TenantEpochs& epochs,
                                                     bool by_tier) {
  std::set<std::string, std::less<>> models;
  for (const index::WorkerResidency& worker : daemon.index.Workers()) {
    if (model.empty() || worker.model == model) models.insert(worker.model);
  }
  const std::string tag = router::TenantSaltTag(daemon.tenant_secret, tenant);
  std::vector<index::LineageResidue> out;
  // The current salt differs by model, so each model is asked apart and
  // only its own workers' answers kept.
  for (const std::string& serving : models) {
    const auto model_epoch = epochs.models.find(serving);
    const std::string current = router::TenantCacheSalt(
        daemon.tenant_secret, tenant, serving,
        {epochs.all_models, model_epoch == epochs.models.end() ? 0 : model_epoch->second});
    for (index::LineageResidue& residue : daemon.index.Residue(
             [&](std::string_view root_extra_key) {
               return router::KeyedByRevokedSalt(root_extra_key, tag, current);
             },
             by_tier)) {
      if (residue.model == serving) out.push_back(std::move(residue));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.worker < b.worker; });
  return out;
}

std::string EncodeSaltEpochRecord(std::string_view tenant,
                                  const router::SaltEpochs::TenantEpochs& epochs) {
  nlohmann::json models = nlohmann::json::object();
  for (const auto& [model, epoch] : epochs.models) models[model] = epoch;
  return nlohmann::json{{"tenant", tenant}, {"all_models", epochs.all_models}, {"models", models}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<std::pair<std::string, router::SaltEpochs::TenantEpochs>> DecodeSaltEpochRecord(
    std::string_view record) {
  const nlohmann::json json = nlohmann::json::parse(record, nullptr, /*allow_exceptions=*/false);
  auto field = [&](const char* name) -> const nlohmann::json* {
    auto it = json.find(name);
    return it == json.end() ? nullptr : &*it;
  };
  if (!json.is_object()) return Status::Corruption("salt epoch record: not a JSON object");
  const nlohmann::json* tenant = field("tenant");
  const nlohmann::json* all = field("all_models");
  const nlohmann::json* models = field("models");
  if (tenant == nullptr || !tenant->is_string() || tenant->get<std::string>().empty()) {
    return Status::Corruption("salt epoch record: tenant: want a non-empty string");
  }
  if (all == nullptr || !all->is_number_unsigned()) {
    return Status::Corruption("salt epoch record: all_models: want an unsigned integer");
  }
  if (models == nullptr || !models->is_object()) {
    return Status::Corruption("salt epoch record: models: want an object");
  }
  router::SaltEpochs::TenantEpochs epochs;
  epochs.all_models = all->get<uint64_t>();
  for (auto it = models->begin(); it != models->end(); ++it) {
    if (!it->is_number_unsigned()) {
      return Status::Corruption("salt epoch record: models." + it.key() +
                                ": want an unsigned integer");
    }
    epochs.models[it.key()] = it->get<uint64_t>();
  }
  return std::make_pair(tenant->get<std::string>(), std::move(epochs));
}

Status RecoverSaltEpochs(Daemon& daemon) {
  Status unreadable;
  KVGOV_RETURN_IF_ERROR(daemon.store->Scan(
      store::Column::kGovernance, kSaltEpochPrefix, "salt_epoch0",
      [&](std::string_view key, std::string_view value) {
        auto decoded = DecodeSaltEpochRecord(value);
        if (!decoded.ok()) {
          unreadable = Status::Corruption(std::string(key) + ": " + decoded.status().message());
          return false;
        }
        daemon.salt_epochs.Set(decoded->first, decoded->second);
        return true;
      }));
  return unreadable;
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
