#pragma once

// The body of GET /v1/workers (docs/formats/events-api.md).

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "kvgov/index/residency_index.h"
#include "kvgov/ingest/engine_diagnostics.h"
#include "kvgov/router/prediction_score.h"
#include "kvgov/router/router.h"
#include "kvgov/router/worker_status.h"

namespace kvgov {

/// The stream a worker's residency comes from: its counters as read, and
/// what they mean for an operator.
struct WorkerStreamView {
  std::string kind;             // vllm, sglang, mooncake
  std::string role;             // both, prefill, decode (the engine spec's)
  std::string events_endpoint;  // the PUB endpoint followed
  int64_t last_seq = -1;  // -1 before the first applied batch
  uint64_t seq_gaps = 0;
  uint64_t replays = 0;
  uint64_t replays_failed = 0;
  uint64_t restarts = 0;
  uint64_t duplicates = 0;
  uint64_t decode_errors = 0;
  uint64_t catch_ups = 0;
  uint64_t catch_ups_failed = 0;
  int64_t last_batch_ms = -1;
  ingest::EngineDiagnostics diagnostics;
};

/// One worker as GET /v1/workers shows it. A tenant-bound caller gets ids,
/// models, state and health only (`fleet_view` false): block counts, load
/// and stream statistics are aggregates over every tenant.
struct WorkerView {
  index::WorkerResidency residency;
  std::optional<router::WorkerStatus> health;
  // >= 0: a live worker whose engine stream kvgov follows but which has
  // published nothing yet, for this long; its state reads
  // "waiting_for_events" (both views: it is no aggregate).
  int64_t waiting_for_events_ms = -1;
  bool fleet_view = false;
  router::WorkerLoad load;                 // fleet view only
  std::optional<WorkerStreamView> stream;  // fleet view, workers that follow a stream
  // Fleet view, workers the gateway has scored a prediction on.
  std::optional<router::PredictionScore> predictions;
};

/// {"workers": [...]}.
std::string EncodeWorkersJson(std::span<const WorkerView> workers);

}  // namespace kvgov
