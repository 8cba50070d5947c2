#include "kvgov/services/quarantine_service.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "kvgov/auth/entropy.h"

namespace kvgov::services {
namespace {

using Json = nlohmann::json;

std::string RecordKey(std::string_view id) {
  return std::string(QuarantineService::kRecordPrefix) + std::string(id);
}

std::string EncodeRecord(const Quarantine& quarantine) {
  return Json{{"id", quarantine.id},         {"model", quarantine.model},
              {"tenant", quarantine.tenant}, {"reason", quarantine.reason},
              {"keys", quarantine.keys},     {"created_ms", quarantine.created_ms}}
      .dump();
}

// Corruption when the record has no readable keys array: without its
// blocks a quarantine cannot be enforced.
Result<Quarantine> DecodeRecord(std::string_view record) {
  const Json json = Json::parse(record, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("keys") || !json["keys"].is_array()) {
    return Status::Corruption("quarantine record without a readable keys array");
  }
  try {
    return Quarantine{json.value("id", ""),
                      json.value("model", ""),
                      json.value("tenant", ""),
                      json.value("reason", ""),
                      json["keys"].get<std::vector<index::BlockKey>>(),
                      json.value("created_ms", int64_t{0})};
  } catch (const Json::exception& error) {
    return Status::Corruption(std::string("quarantine record of the wrong shape: ") + error.what());
  }
}

}  // namespace

Result<Quarantine> QuarantineService::Impose(std::string_view actor, Quarantine quarantine,
                                             int64_t now_ms) {
  KVGOV_ASSIGN_OR_RETURN(quarantine.id, auth::RandomHexId());
  quarantine.created_ms = now_ms;
  const std::string record = EncodeRecord(quarantine);
  const store::WriteOp state{store::Column::kGovernance, RecordKey(quarantine.id), record};
  KVGOV_RETURN_IF_ERROR(
      recorder_->Record(actor, "quarantine", quarantine.id, record, {&state, 1}).status());
  gate_->Quarantine(quarantine.id, quarantine.keys);
  return quarantine;
}

Result<Quarantine> QuarantineService::Find(std::string_view id) const {
  Result<std::optional<std::string>> stored =
      store_->Get(store::Column::kGovernance, RecordKey(id));
  if (!stored.ok()) return stored.status();
  Result<Quarantine> quarantine =
      stored->has_value() ? DecodeRecord(**stored) : Result<Quarantine>(Status::NotFound(""));
  if (!quarantine.ok()) {
    return Status::NotFound("no quarantine '" + std::string(id) + "' in force");
  }
  return quarantine;
}

Status QuarantineService::Lift(std::string_view actor, const Quarantine& quarantine,
                               std::string_view reason) {
  const Json payload = {{"id", quarantine.id},
                        {"model", quarantine.model},
                        {"tenant", quarantine.tenant},
                        {"blocks", quarantine.keys.size()},
                        {"reason", reason},
                        {"quarantined_for", quarantine.reason}};
  const store::WriteOp state{store::Column::kGovernance, RecordKey(quarantine.id), std::nullopt};
  KVGOV_RETURN_IF_ERROR(
      recorder_->Record(actor, "quarantine.lift", quarantine.id, payload.dump(), {&state, 1})
          .status());
  (void)gate_->Lift(quarantine.id);  // a replica has lifted it already, from the log
  return Status::Ok();
}

Status QuarantineService::ScanRecords(
    const std::function<bool(std::string_view key, Result<Quarantine> quarantine)>& each) const {
  // Every key with the prefix sorts before "quarantine0" ('0' follows '/').
  return store_->Scan(
      store::Column::kGovernance, kRecordPrefix, "quarantine0",
      [&](std::string_view key, std::string_view value) { return each(key, DecodeRecord(value)); });
}

Result<std::vector<Quarantine>> QuarantineService::InForce() const {
  std::vector<Quarantine> found;
  KVGOV_RETURN_IF_ERROR(ScanRecords([&](std::string_view, Result<Quarantine> quarantine) {
    if (quarantine.ok()) found.push_back(*std::move(quarantine));
    return true;
  }));
  return found;
}

Status QuarantineService::Recover() {
  Status unreadable;
  KVGOV_RETURN_IF_ERROR(ScanRecords([&](std::string_view key, Result<Quarantine> quarantine) {
    if (!quarantine.ok()) {
      unreadable = quarantine.status().WithContext(std::string(key));
      return false;
    }
    gate_->Quarantine(key.substr(kRecordPrefix.size()), quarantine->keys);
    return true;
  }));
  return unreadable;
}

void QuarantineService::ApplyReplicatedWrite(std::string_view id,
                                             const std::optional<std::string>& value) {
  if (!value.has_value()) {
    (void)gate_->Lift(id);
  } else if (Result<Quarantine> quarantine = DecodeRecord(*value); quarantine.ok()) {
    gate_->Quarantine(id, quarantine->keys);
  }
}

}  // namespace kvgov::services
