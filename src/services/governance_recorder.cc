#include "kvgov/services/governance_recorder.h"

#include <algorithm>
#include <string>

#include "kvgov/clock/clock.h"
#include "kvgov/log/log.h"
#include "kvgov/replication/replica.h"

namespace kvgov::services {

Result<journal::Row> GovernanceRecorder::Record(std::string_view actor, std::string_view kind,
                                                std::string_view subject, std::string_view payload,
                                                std::span<const store::WriteOp> state) {
  Result<journal::Row> row = Status::Unavailable("the governance log is not followed yet");
  if (!replicated_) {
    // Never before the head: journal times stay ordered across a restart
    // after the wall clock stepped back.
    row = journal_->Append(kind, subject, {std::string(actor), ""}, payload,
                           std::max(clock::NowMillis(), journal_->head_time_ms()), state);
  } else if (replication::Replica* replica = this->replica()) {
    row = replica->Record(kind, subject, actor, payload, state);
  }
  if (row.ok() && !kind.empty()) {
    log::Line(log::Level::kInfo, "governance.write")
        .Field("kind", kind)
        .Field("subject", subject)
        .Field("actor", actor)
        .Field("seq", row->seq);
  }
  return row;
}

}  // namespace kvgov::services
