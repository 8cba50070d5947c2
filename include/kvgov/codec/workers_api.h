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
  // From the engine spec, so an operator can reach the engine: "" when the
  // spec names none.
  std::string replay_endpoint;
  std::string control_url;
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

/// Why a followed engine has published no batch yet, as its state says.
enum class NoEventsYet : uint8_t {
  kNotApplicable,  // it has published, or kvgov follows no stream of it
  kIdle,           // nothing was sent to it: it has computed nothing to publish
  kSilent,         // it has served requests, yet no batch came: events off or misdirected
  kStreamFailed,   // kvgov could not subscribe to its stream at all
};

/// One worker as GET /v1/workers shows it. A tenant-bound caller gets ids,
/// models, state and health only (`fleet_view` false): block counts, load
/// and stream statistics are aggregates over every tenant.
struct WorkerView {
  index::WorkerResidency residency;
  std::optional<router::WorkerStatus> health;
  // A live worker whose engine stream kvgov follows but which has published
  // nothing yet, and why (its state; both views: it is no aggregate).
  NoEventsYet no_events_yet = NoEventsYet::kNotApplicable;
  int64_t waiting_for_events_ms = -1;  // >= 0 with no_events_yet: since kvgov began following
  std::string stream_error;            // kStreamFailed: why, fleet view only
  bool fleet_view = false;
  router::WorkerLoad load;                 // fleet view only
  std::optional<WorkerStreamView> stream;  // fleet view, workers that follow a stream
  // Fleet view, workers the gateway has scored a prediction on.
  std::optional<router::PredictionScore> predictions;
};

/// {"workers": [...]}.
std::string EncodeWorkersJson(std::span<const WorkerView> workers);

}  // namespace kvgov
