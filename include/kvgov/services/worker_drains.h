#pragma once

#include <string_view>

#include "kvgov/core/status.h"
#include "kvgov/router/worker_status.h"
#include "kvgov/services/governance_recorder.h"
#include "kvgov/store/store.h"

namespace kvgov::services {

/// Drained workers: routes skip them until they are undrained. A drain is
/// governance state, recorded before it takes effect, so one an answer
/// acknowledged survives a crash.
///
/// Store records: "drain/<worker>" in the governance column, value "1",
/// deleted when undrained.
///
/// Thread-safe: the status table, the store and the recorder each are.
class WorkerDrains {
 public:
  static constexpr std::string_view kRecordPrefix = "drain/";

  /// Every collaborator must outlive the drains.
  WorkerDrains(router::WorkerStatusTable* workers, store::Store* store,
               GovernanceRecorder* recorder)
      : workers_(workers), store_(store), recorder_(recorder) {}

  /// Drains (or undrains) `worker`, journaled as worker.drain (or
  /// worker.undrain) by `actor`. NotFound for a worker not registered;
  /// the recorder's error when the write fails, and then nothing changed.
  Status Set(std::string_view actor, std::string_view worker, bool draining);

  /// Drains the recorded workers at start. A worker no longer configured
  /// keeps its record; it is simply not routable.
  Status Recover();

  /// A drain record the replicated log carries (present: drained).
  void ApplyReplicatedWrite(std::string_view worker, bool draining) {
    (void)workers_->SetDraining(worker, draining);
  }

 private:
  router::WorkerStatusTable* const workers_;
  store::Store* const store_;
  GovernanceRecorder* const recorder_;
};

}  // namespace kvgov::services
