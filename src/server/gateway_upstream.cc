#include "server/gateway_upstream.h"

#include <utility>

#include <httplib.h>

#include "kvgov/connectors/openai_upstream.h"
#include "server/daemon.h"
#include "server/http_api.h"
#include "server/relay_threads.h"

namespace kvgov::server {

void SendOpenAIError(httplib::Response& response, int status, std::string_view message,
                     std::string_view type, std::string_view param, std::string_view code) {
  response.status = status;
  response.set_content(EncodeOpenAIErrorJson(message, type, param, code), "application/json");
}

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

Status ReadWholeBody(Relay& relay, std::string* body) {
  bool finished = false;
  Status outcome;
  while (!finished) {
    for (std::string& chunk : relay.Next(&finished, &outcome)) {
      if (body->size() + chunk.size() > kMaxWholeAnswerBytes) {
        relay.Cancel();
        return Status::ResourceExhausted(
            "the answer is longer than " + std::to_string(kMaxWholeAnswerBytes) +
            " bytes, kvgov's limit on an answer it holds whole (ask for a stream instead)");
      }
      *body += chunk;
    }
  }
  return outcome;
}

bool StreamPump::Pump(httplib::DataSink& sink) {
  bool finished = false;
  Status outcome;
  for (const std::string& chunk : upstream->relay->Next(&finished, &outcome)) {
    for (const std::string& event : splitter.Push(chunk)) {
      const std::string_view data = SseSplitter::Data(event);
      if (std::optional<EngineUsage> reported =
              data.starts_with('{') ? DecodeEngineUsage(data, UsageLimits()) : std::nullopt) {
        usage = reported;
        if (strip_usage && reported->usage_only) continue;
      }
      if (on_first_event) std::exchange(on_first_event, nullptr)();
      if (!sink.write(event.data(), event.size())) return false;
    }
  }
  if (!finished) return true;
  const std::string rest = splitter.Rest();
  if (!rest.empty()) sink.write(rest.data(), rest.size());
  if (!outcome.ok()) {
    const std::string event =
        EncodeOpenAIErrorEvent("the engine's answer broke off: " + outcome.message());
    sink.write(event.data(), event.size());
  }
  sink.done();
  return true;
}

std::unique_ptr<Upstream> StartUpstream(const Daemon& daemon, const std::string& worker,
                                        const std::string& decision_id, const std::string& path,
                                        std::string body, std::string request_id) {
  auto upstream = std::make_unique<Upstream>();
  upstream->worker = worker;
  upstream->decision_id = decision_id;
  const std::string url = OpenAIUrl(daemon, worker);
  connectors::UpstreamConnections* upstreams = daemon.upstreams.get();
  daemon.relay_threads->Run([relay = upstream->relay, url, path, body = std::move(body),
                             request_id = std::move(request_id), upstreams] {
    connectors::UpstreamAnswer answer;
    Status status = upstreams->Forward(
        url, path, body,
        [&relay](int code, std::string_view type) { return relay->Head(code, type); },
        [&relay](std::string_view chunk) { return relay->Chunk(chunk); }, &answer, request_id);
    relay->Finish(std::move(status));
  });
  return upstream;
}


}  // namespace kvgov::server
