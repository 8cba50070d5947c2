#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kvgov/ingest/engine_stream.h"

namespace kvgov::ingest {

/// What an operator should hear about one engine stream, worked out when it
/// is read (GET /v1/workers, /metrics) from the stream's counters, the
/// engine's scraped load and the clock. The ways a KV-aware router degrades
/// silently each get a line: a publisher that stopped or was never enabled,
/// chains whose parents kvgov never saw, hashes that changed, a stale
/// worker. Plain values; no locks.
struct EngineDiagnostics {
  // Since the stream's last batch, or since kvgov began following it when
  // there has been none.
  int64_t silent_for_ms = 0;
  // Silent for at least the threshold while the engine's own metrics show
  // requests running: its events are off or its publisher died.
  bool silent_while_busy = false;
  uint64_t orphan_blocks = 0;      // stored under parents kvgov never saw
  uint64_t hash_drift_blocks = 0;  // the same tokens under new engine hashes
  uint64_t salt_blind_blocks = 0;  // a salted request's, back without the salt
  StaleReason stale_reason = StaleReason::kNone;
  std::string stale_detail;
  int64_t stale_for_ms = 0;  // 0 while live
};

/// `running_requests` is what the engine's last scraped metrics showed
/// running (none without a control URL: then silence alone is reported,
/// never "while busy").
EngineDiagnostics DiagnoseEngine(const StreamStats& stats, std::optional<double> running_requests,
                                 int64_t now_ms, int64_t silence_threshold_ms);

}  // namespace kvgov::ingest
