#include "kvgov/services/replicated_governance.h"

#include <string_view>

namespace kvgov::services {

void ReplicatedGovernance::Apply(const replication::LogEntry& entry) {
  for (const replication::LogWrite& write : entry.writes) {
    if (write.column != "governance") continue;  // tokens: the replica's own file
    const std::string_view key = write.key;
    if (key.starts_with(LeaseService::kRecordPrefix)) {
      if (write.value.has_value()) (void)leases_->ApplyReplicatedRecord(*write.value);
    } else if (key.starts_with(QuarantineService::kRecordPrefix)) {
      quarantines_->ApplyReplicatedWrite(key.substr(QuarantineService::kRecordPrefix.size()),
                                         write.value);
    } else if (key.starts_with(WorkerDrains::kRecordPrefix)) {
      drains_->ApplyReplicatedWrite(key.substr(WorkerDrains::kRecordPrefix.size()),
                                    write.value.has_value());
    } else if (key.starts_with(TenantSalts::kRecordPrefix)) {
      if (write.value.has_value()) (void)salts_->ApplyReplicatedRecord(*write.value);
    } else if (key.starts_with(DirectiveDriver::kRecordPrefix)) {
      if (write.value.has_value()) directives_->ApplyReplicated(*write.value);
    }
  }
}

}  // namespace kvgov::services
