#include "server/gateway.h"

#include <utility>  // before Asio: see gateway/front_door.h

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <optional>
#include <set>

#include "gateway/request_path.h"
#include "kvgov/clock/clock.h"
#include "kvgov/codec/gateway_api.h"
#include "kvgov/connectors/openai_upstream.h"
#include "server/daemon.h"
#include "server/gateway_upstream.h"
#include "server/handoff.h"
#include "server/http_api.h"
#include "server/prefix_diagnostics.h"
#include "server/salting.h"

namespace kvgov::server {
namespace {

// The gateway's request path's doors into the daemon.
class DaemonPlane final : public gateway::Plane {
 public:
  explicit DaemonPlane(Daemon& daemon) : daemon_(daemon) {
    limits_.body = BodyLimits(daemon);
    limits_.max_in_flight = daemon.options.gateway_max_in_flight;
    limits_.max_requests = daemon.options.gateway_max_requests;
  }

  const gateway::GatewayLimits& limits() const override { return limits_; }

  Result<auth::Principal> Authorize(std::string_view authorization,
                                    auth::Role role) const override {
    return daemon_.auth->Authorize(authorization, role);
  }

  std::set<std::string> KnownModels() const override {
    std::set<std::string> models;
    for (const index::WorkerResidency& worker : daemon_.index.Workers()) {
      models.insert(worker.model);
    }
    return models;
  }

  std::vector<std::string> ServingWorkers(std::string_view model) const override {
    std::vector<std::string> out;
    for (const index::WorkerResidency& worker : daemon_.index.Workers()) {
      if (worker.model == model && MayServe(worker)) out.push_back(worker.id);
    }
    return out;
  }

  std::optional<gateway::EngineAddress> EngineOf(std::string_view worker) const override {
    const ingest::EngineSpec* engine = server::EngineOf(daemon_, worker);
    if (engine == nullptr || OpenAIUrl(*engine).empty()) return std::nullopt;
    return gateway::EngineAddress{
        engine->id, OpenAIUrl(*engine), std::string(connectors::TokenizePath(engine->kind)),
        engine->kind == ingest::EngineKind::kSglang, engine->bootstrap_port};
  }

  int64_t BlockSize(std::string_view worker) const override {
    const std::optional<index::WorkerResidency> residency = daemon_.index.Worker(worker);
    return residency ? residency->block_size : 1;
  }

  uint64_t InFlight(std::string_view worker) const override {
    return daemon_.router->LoadOf(worker).in_flight_requests;
  }

  std::optional<Pools> Disaggregated(const std::vector<std::string>& serving) const override {
    if (!ServedDisaggregated(daemon_, serving)) return std::nullopt;
    Pools pools;
    for (const std::string& worker : serving) {
      const ingest::EngineRole role = RoleOf(daemon_, worker);
      if (role != ingest::EngineRole::kDecode) pools.prefill.push_back(worker);
      if (role != ingest::EngineRole::kPrefill) pools.decode.push_back(worker);
    }
    return pools;
  }

  void ObservePrompt(std::string_view model, std::string_view tenant,
                     const std::vector<int64_t>& tokens) override {
    server::ObservePrompt(daemon_, model, tenant, tokens);
  }

  Result<gateway::Salted> Salt(router::RouteRequest& route) override {
    KVGOV_ASSIGN_OR_RETURN(RequestSalt salt, SaltRoute(daemon_, route));
    return gateway::Salted{std::move(salt.salt), salt.diverted()};
  }

  Result<router::RouteDecision> Route(const router::RouteRequest& route,
                                      const gateway::Salted& salted, std::string decision_id,
                                      gateway::RouteCount count) override {
    Result<router::RouteDecision> decision =
        daemon_.router->Route(route, salted.salt, decision_id, clock::NowMillis());
    if (!decision.ok() || decision->worker.empty()) return decision;
    MarkDiverted(salted.diverted, *decision);
    daemon_.tenants_seen.Note(route.tenant);
    ExpectSaltedBlocks(daemon_, route, salted.salt, *decision);
    if (count == gateway::RouteCount::kRequest) daemon_.route_totals.Count(*decision);
    return decision;
  }

  void Prefilled(const std::string& decision_id) override {
    (void)daemon_.router->Prefilled(decision_id);
  }
  void Done(const std::string& decision_id) override { (void)daemon_.router->Done(decision_id); }

  void Account(const std::string& worker, const std::string& decision_id,
               const gateway::Prediction& prediction,
               const std::optional<EngineUsage>& usage) override {
    server::Account(daemon_, worker, decision_id, prediction, usage);
  }

  Result<std::unique_ptr<gateway::HandoffPin>> Pin(const gateway::HandoffRequest& request,
                                                   std::string_view request_id,
                                                   std::string_view prefill_worker,
                                                   NIXLTransferRole role) override {
    return PinHandoff(daemon_, request, request_id, prefill_worker, role);
  }
  void RecordHandoff(gateway::HandoffRecord record,
                     std::optional<double> handoff_seconds) override {
    server::RecordHandoff(daemon_, std::move(record), handoff_seconds);
  }

  void CountRequest(std::string_view endpoint) override {
    daemon_.gateway_metrics.requests->WithLabels({std::string(endpoint)})->Inc();
  }
  void CountTokenizeFailure(std::string_view model) override {
    daemon_.gateway_metrics.tokenize_failures->WithLabels({std::string(model)})->Inc();
  }
  void CountRetry() override { daemon_.gateway_metrics.retries->WithLabels({})->Inc(); }
  void CountRelayed(size_t bytes) override {
    daemon_.gateway_metrics.bytes_relayed->WithLabels({})->Add(static_cast<double>(bytes));
  }

 private:
  // A worker the gateway may send to: live, healthy, not draining, with an
  // engine URL.
  bool MayServe(const index::WorkerResidency& worker) const {
    if (worker.state != index::WorkerState::kLive) return false;
    if (std::optional<router::WorkerStatus> status = daemon_.status.Get(worker.id)) {
      if ((status->probed && !status->healthy) || status->draining) return false;
    }
    return !OpenAIUrl(daemon_, worker.id).empty();
  }

  Daemon& daemon_;
  gateway::GatewayLimits limits_;
};

Status NoEngineFor(std::string_view model) {
  return Status::NotFound("model: no worker with an engine URL serves '" + std::string(model) +
                          "'");
}

// `call(engine)` on the engine of a worker serving `model`; on a second
// engine only when the first could not be reached. NotFound when no worker
// with an engine URL serves the model.
template <typename T, typename Call>
Result<T> OnAnEngineOf(Daemon& daemon, std::string_view model, Call call) {
  Result<T> answer = NoEngineFor(model);
  for (const index::WorkerResidency& worker : daemon.index.Workers()) {
    const ingest::EngineSpec* engine =
        worker.model == model ? EngineOf(daemon, worker.id) : nullptr;
    if (engine == nullptr || OpenAIUrl(*engine).empty()) continue;
    answer = call(*engine);
    if (answer.ok() || answer.status().code() != StatusCode::kUnavailable) break;
  }
  return answer;
}

// `body` POSTed to the tokenizer of the engine of a worker serving `model`.
Result<std::vector<int64_t>> TokenizeOnAnEngineOf(Daemon& daemon, std::string_view model,
                                                  std::string_view body) {
  return OnAnEngineOf<std::vector<int64_t>>(daemon, model, [&](const ingest::EngineSpec& engine) {
    return daemon.upstreams->Tokenize(OpenAIUrl(engine), engine.kind, body);
  });
}

}  // namespace

Result<std::string> DetokenizeOnAnEngineOf(Daemon& daemon, std::string_view model,
                                           std::span<const int64_t> tokens) {
  const std::string body = nlohmann::json{{"model", model}, {"tokens", tokens}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  return OnAnEngineOf<std::string>(daemon, model, [&](const ingest::EngineSpec& engine) {
    return daemon.upstreams->Detokenize(OpenAIUrl(engine), engine.kind, body);
  });
}

Result<std::vector<int64_t>> TokenizePrompt(Daemon& daemon, std::string_view model,
                                            std::string_view prompt) {
  const std::string body = nlohmann::json{{"model", model}, {"prompt", prompt}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  return TokenizeOnAnEngineOf(daemon, model, body);
}

Result<std::vector<int64_t>> TokenizeMessages(Daemon& daemon, std::string_view model,
                                              std::string_view messages) {
  // No worker serves "": NotFound, as for a prompt, not the gateway
  // decoder's refusal of an empty model.
  if (model.empty()) return NoEngineFor(model);
  // The chat completion these messages would be, decoded as the gateway
  // decodes one, so the engine gets the very /tokenize body (chat template
  // and generation prompt included) a gateway request would.
  const std::string chat =
      "{\"model\":" +
      nlohmann::json(model).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
      ",\"messages\":" + std::string(messages) + "}";
  return TokenizeChat(daemon, model, chat);
}

Result<std::vector<int64_t>> TokenizeChat(Daemon& daemon, std::string_view model,
                                          std::string_view chat) {
  if (model.empty()) return NoEngineFor(model);
  KVGOV_ASSIGN_OR_RETURN(
      const GatewayRequest request,
      DecodeGatewayRequestJson(GatewayEndpoint::kChatCompletions, chat, BodyLimits(daemon)));
  return TokenizeOnAnEngineOf(daemon, model, request.tokenize_body);
}

gateway::Handler GatewayHandler(Daemon& daemon) {
  auto plane = std::make_shared<DaemonPlane>(daemon);
  gateway::Handler handler = gateway::GatewayHandler(*plane);
  // The handler holds the plane it was made over.
  return [plane, handler = std::move(handler)](gateway::Exchange& exchange) {
    return handler(exchange);
  };
}

}  // namespace kvgov::server
