#include "server/gateway_upstream.h"

#include <utility>

#include "kvgov/connectors/openai_upstream.h"
#include "server/daemon.h"
#include "server/http_api.h"

namespace kvgov::server {

const ingest::EngineSpec* EngineOf(const Daemon& daemon, std::string_view worker) {
  const std::string_view engine_id = worker.substr(0, worker.find('@'));
  for (const ingest::EngineSpec& engine : daemon.options.engines) {
    if (engine.id == engine_id) return &engine;
  }
  return nullptr;
}

std::string OpenAIUrl(const ingest::EngineSpec& engine) {
  return engine.openai.empty() ? engine.control : engine.openai;
}
std::string OpenAIUrl(const Daemon& daemon, std::string_view worker) {
  const ingest::EngineSpec* engine = EngineOf(daemon, worker);
  return engine == nullptr ? "" : OpenAIUrl(*engine);
}

// The engine's usage against the prediction: the engine's cached tokens are
// the ride_engine source's saving (never the prediction), the prediction
// scored by blocks, the prompt's length checked against the routed tokens.
void Account(Daemon& daemon, const std::string& worker, const std::string& decision_id,
             const Prediction& prediction, const std::optional<EngineUsage>& usage) {
  GatewayMetrics& m = daemon.gateway_metrics;
  if (!usage) {
    m.unaccounted->WithLabels({})->Inc();
    return;
  }
  if (prediction.whole_prompt && usage->prompt_tokens != prediction.routed_tokens) {
    m.tokenize_mismatches->WithLabels({prediction.model})->Inc();
  }
  Entry entry = RouteSavingEntry(decision_id, worker, usage->cached_tokens);
  entry.labels["model"] = prediction.model;
  if (!prediction.tenant.empty()) entry.labels["tenant"] = prediction.tenant;
  daemon.accounting->Record(entry);
  m.predicted_tokens->WithLabels({worker})->Add(static_cast<double>(prediction.predicted_tokens));
  m.cached_tokens->WithLabels({worker})->Add(static_cast<double>(usage->cached_tokens));
  const router::PredictionOutcome outcome = daemon.predictions.Record(
      worker, prediction.predicted_tokens, usage->cached_tokens, prediction.block_size);
  m.predictions->WithLabels({worker, std::string(router::ToString(outcome))})->Inc();
}

}  // namespace kvgov::server
