#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kvgov/codec/gateway_api.h"
#include "kvgov/core/envelope.h"
#include "kvgov/core/status.h"
#include "kvgov/metrics/cache_accounting.h"
#include "kvgov/metrics/registry.h"
#include "kvgov/router/prediction_score.h"

namespace kvgov::services {

/// A routed request as an envelope event: direction route, source
/// ride_engine (the engine's own cache saved it), `saved_tokens` as the
/// prefill saved (the engine's reported cached tokens).
Entry RouteSavingEntry(std::string_view decision_id, std::string_view worker, int64_t saved_tokens);

/// What engines reported of the requests kvgov routed, held against what
/// kvgov predicted (docs/formats/gateway.md, "Accounting"; docs/adr/0028):
/// the engine's cached tokens are the ride_engine source's saving, never
/// the prediction; the prediction is scored by blocks per worker; the
/// prompt's length is checked against the tokens kvgov routed on. The
/// gateway accounts each answer it relays; /v1/route, the usage its caller
/// reports on done.
///
/// Thread-safe: the accounting, the scores and the metric families each
/// are.
class UsageAccounting {
 public:
  /// Registers kvgov_gateway_{predictions,predicted_tokens,
  /// engine_cached_tokens,tokenize_mismatch,unaccounted}_total. Every
  /// collaborator must outlive the service; errors are the registry's.
  static Result<std::unique_ptr<UsageAccounting>> Create(metrics::CacheAccounting* accounting,
                                                         router::PredictionScores* scores,
                                                         metrics::Registry* registry);

  /// The engine's `usage` of the request `decision_id` routed to `worker`,
  /// against `prediction`; an answer without usage is counted unaccounted.
  void Account(const std::string& worker, const std::string& decision_id,
               const router::Prediction& prediction, const std::optional<EngineUsage>& usage);

 private:
  UsageAccounting(metrics::CacheAccounting* accounting, router::PredictionScores* scores)
      : accounting_(accounting), scores_(scores) {}

  metrics::CacheAccounting* const accounting_;
  router::PredictionScores* const scores_;
  metrics::CounterFamily* unaccounted_ = nullptr;
  metrics::CounterFamily* tokenize_mismatches_ = nullptr;  // {model}
  metrics::CounterFamily* predictions_ = nullptr;          // {worker,outcome}
  metrics::CounterFamily* predicted_tokens_ = nullptr;     // {worker}
  metrics::CounterFamily* cached_tokens_ = nullptr;        // {worker}, as the engine reported
};

}  // namespace kvgov::services
