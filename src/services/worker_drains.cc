#include "kvgov/services/worker_drains.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvgov::services {

Status WorkerDrains::Set(std::string_view actor, std::string_view worker, bool draining) {
  if (!workers_->Get(worker).has_value()) {
    return Status::NotFound("worker '" + std::string(worker) + "' is not registered");
  }
  const store::WriteOp state{store::Column::kGovernance,
                             std::string(kRecordPrefix) + std::string(worker),
                             draining ? std::optional<std::string>("1") : std::nullopt};
  const nlohmann::json payload = {{"worker", worker}, {"draining", draining}};
  KVGOV_RETURN_IF_ERROR(recorder_
                            ->Record(actor, draining ? "worker.drain" : "worker.undrain", worker,
                                     payload.dump(), {&state, 1})
                            .status());
  (void)workers_->SetDraining(worker, draining);
  return Status::Ok();
}

Status WorkerDrains::Recover() {
  std::vector<std::string> drained;
  KVGOV_RETURN_IF_ERROR(store_->Scan(store::Column::kGovernance, kRecordPrefix, "drain0",
                                     [&](std::string_view key, std::string_view) {
                                       drained.emplace_back(key.substr(kRecordPrefix.size()));
                                       return true;
                                     }));
  for (const std::string& worker : drained) (void)workers_->SetDraining(worker, true);
  return Status::Ok();
}

}  // namespace kvgov::services
