#include "kvgov/services/tenant_salts.h"

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "kvgov/index/block_key.h"

namespace kvgov::services {
namespace {

using Json = nlohmann::json;

// A diversion is keyed apart from every block a quarantine names; one that
// crosses a quarantine anyway names a block by its engine hash on a
// diverted chain. Each round adds what it crossed; this many is plenty.
constexpr int kDivertRounds = 4;

std::string EncodeRecord(std::string_view tenant, const router::SaltEpochs::TenantEpochs& epochs) {
  Json models = Json::object();
  for (const auto& [model, epoch] : epochs.models) models[model] = epoch;
  return Json{{"tenant", tenant}, {"all_models", epochs.all_models}, {"models", models}}.dump(
      -1, ' ', false, Json::error_handler_t::replace);
}

// Corruption naming what is wrong.
Result<std::pair<std::string, router::SaltEpochs::TenantEpochs>> DecodeRecord(
    std::string_view record) {
  const Json json = Json::parse(record, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return Status::Corruption("salt epoch record: not a JSON object");
  auto field = [&](const char* name) -> const Json* {
    auto it = json.find(name);
    return it == json.end() ? nullptr : &*it;
  };
  const Json* tenant = field("tenant");
  const Json* all = field("all_models");
  const Json* models = field("models");
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

}  // namespace

std::string TenantSalts::Current(std::string_view tenant, std::string_view model) const {
  if (tenant.empty()) return "";
  return router::TenantCacheSalt(secret_, tenant, model, epochs_.Of(tenant, model));
}

Result<RequestSalt> TenantSalts::ForPrompt(std::string_view tenant, std::string_view model,
                                           std::string_view lora_name,
                                           std::span<const int64_t> tokens) const {
  RequestSalt out{Current(tenant, model), {}};
  if (!gate_->HoldsQuarantines()) return out;  // most requests: no chain to key
  // The model's workers share one block size; the router answers for a
  // model none serves.
  int64_t block_size = 0;
  for (const index::WorkerResidency& worker : index_->Workers()) {
    if (worker.model == model) {
      block_size = worker.block_size;
      break;
    }
  }
  if (block_size <= 0) return out;
  const std::string ordinary = out.salt;
  for (int round = 0; round < kDivertRounds; ++round) {
    const std::vector<index::BlockKey> chain =
        index::RequestChain(index_->hasher(), {std::string(model), std::string(lora_name), 0},
                            out.salt, tokens, block_size);
    std::vector<std::string> crossed = gate_->QuarantinesCrossed(chain);
    std::vector<std::string> all;
    std::set_union(out.diverted_by.begin(), out.diverted_by.end(), crossed.begin(), crossed.end(),
                   std::back_inserter(all));
    if (all == out.diverted_by) return out;
    out.diverted_by = std::move(all);
    out.salt = router::DivertedCacheSalt(secret_, ordinary, out.diverted_by);
  }
  return Status::Unavailable("the prompt crosses quarantined spans under every salt tried (" +
                             std::to_string(out.diverted_by.size()) + " quarantines)");
}

std::vector<index::LineageResidue> TenantSalts::Residue(
    std::string_view tenant, std::string_view model, const router::SaltEpochs::TenantEpochs& epochs,
    bool by_tier) const {
  std::set<std::string, std::less<>> models;
  for (const index::WorkerResidency& worker : index_->Workers()) {
    if (model.empty() || worker.model == model) models.insert(worker.model);
  }
  const std::string tag = router::TenantSaltTag(secret_, tenant);
  std::vector<index::LineageResidue> out;
  // The current salt differs by model, so each model is asked apart and
  // only its own workers' answers kept.
  for (const std::string& serving : models) {
    const auto model_epoch = epochs.models.find(serving);
    const std::string current = router::TenantCacheSalt(
        secret_, tenant, serving,
        {epochs.all_models, model_epoch == epochs.models.end() ? 0 : model_epoch->second});
    for (index::LineageResidue& residue : index_->Residue(
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

store::WriteOp TenantSalts::RecordOf(std::string_view tenant,
                                     const router::SaltEpochs::TenantEpochs& epochs) {
  return {store::Column::kGovernance, std::string(kRecordPrefix) + std::string(tenant),
          EncodeRecord(tenant, epochs)};
}

Status TenantSalts::Recover(const store::Store& store) {
  Status unreadable;
  KVGOV_RETURN_IF_ERROR(store.Scan(store::Column::kGovernance, kRecordPrefix, "salt_epoch0",
                                   [&](std::string_view key, std::string_view value) {
                                     auto decoded = DecodeRecord(value);
                                     if (!decoded.ok()) {
                                       unreadable = Status::Corruption(std::string(key) + ": " +
                                                                       decoded.status().message());
                                       return false;
                                     }
                                     epochs_.Set(decoded->first, decoded->second);
                                     return true;
                                   }));
  return unreadable;
}

bool TenantSalts::ApplyReplicatedRecord(std::string_view record) {
  auto decoded = DecodeRecord(record);
  if (!decoded.ok()) return false;
  epochs_.Set(decoded->first, decoded->second);
  return true;
}

}  // namespace kvgov::services
