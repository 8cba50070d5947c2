#include "kvgov/ingest/engine_diagnostics.h"

#include <algorithm>

namespace kvgov::ingest {

EngineDiagnostics DiagnoseEngine(const StreamStats& stats, std::optional<double> running_requests,
                                 int64_t now_ms, int64_t silence_threshold_ms) {
  EngineDiagnostics out;
  const int64_t last_batch = stats.last_batch_ms.load(std::memory_order_relaxed);
  const int64_t heard_from = last_batch >= 0 ? last_batch : stats.started_ms.load();
  out.silent_for_ms = std::max<int64_t>(0, now_ms - heard_from);
  // An engine running requests fills blocks and so publishes: prefill and
  // decode both store a block every block_size tokens.
  out.silent_while_busy =
      out.silent_for_ms >= silence_threshold_ms && running_requests.value_or(0) > 0;
  out.orphan_blocks = stats.orphan_blocks.load(std::memory_order_relaxed);
  out.hash_drift_blocks = stats.hash_drift_blocks.load(std::memory_order_relaxed);
  out.salt_blind_blocks = stats.salt_blind_blocks.load(std::memory_order_relaxed);
  out.stale_reason = stats.stale();
  if (out.stale_reason != StaleReason::kNone) {
    out.stale_detail = stats.stale_detail();
    const int64_t since = stats.stale_since_ms.load(std::memory_order_relaxed);
    out.stale_for_ms = since >= 0 ? std::max<int64_t>(0, now_ms - since) : 0;
  }
  return out;
}

}  // namespace kvgov::ingest
