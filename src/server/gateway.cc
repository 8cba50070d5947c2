#include "server/gateway.h"

#include <utility>  // before Asio: see gateway/front_door.h

#include <algorithm>
#include <memory>
#include <optional>
#include <set>

#include "gateway/request_path.h"
#include "kvgov/clock/clock.h"
#include "kvgov/services/engines.h"
#include "kvgov/services/handoffs.h"
#include "kvgov/services/prefix_watch.h"
#include "kvgov/services/route_salting.h"

namespace kvgov::server {
namespace {

// The gateway's request path's doors into kvgov's state.
class ServicesPlane final : public gateway::Plane {
 public:
  explicit ServicesPlane(const GatewayServices& services) : services_(services) {}

  const gateway::GatewayLimits& limits() const override { return services_.limits; }

  Result<auth::Principal> Authorize(std::string_view authorization,
                                    auth::Role role) const override {
    return services_.auth->Authorize(authorization, role);
  }

  std::set<std::string> KnownModels() const override {
    std::set<std::string> models;
    for (const index::WorkerResidency& worker : services_.index->Workers()) {
      models.insert(worker.model);
    }
    return models;
  }

  std::vector<std::string> ServingWorkers(std::string_view model) const override {
    std::vector<std::string> out;
    for (const index::WorkerResidency& worker : services_.index->Workers()) {
      if (worker.model == model && MayServe(worker)) out.push_back(worker.id);
    }
    return out;
  }

  std::optional<gateway::EngineAddress> EngineOf(std::string_view worker) const override {
    const ingest::EngineSpec* engine = services_.engines->Of(worker);
    if (engine == nullptr || services::OpenAIUrl(*engine).empty()) return std::nullopt;
    return gateway::EngineAddress{engine->id, services::OpenAIUrl(*engine),
                                  std::string(connectors::TokenizePath(engine->kind)),
                                  engine->kind == ingest::EngineKind::kSglang,
                                  engine->bootstrap_port};
  }

  int64_t BlockSize(std::string_view worker) const override {
    const std::optional<index::WorkerResidency> residency = services_.index->Worker(worker);
    return residency ? residency->block_size : 1;
  }

  uint64_t InFlight(std::string_view worker) const override {
    return services_.router->LoadOf(worker).in_flight_requests;
  }

  std::optional<Pools> Disaggregated(const std::vector<std::string>& serving) const override {
    if (!services_.engines->ServedDisaggregated(serving)) return std::nullopt;
    Pools pools;
    for (const std::string& worker : serving) {
      const ingest::EngineRole role = services_.engines->RoleOf(worker);
      if (role != ingest::EngineRole::kDecode) pools.prefill.push_back(worker);
      if (role != ingest::EngineRole::kPrefill) pools.decode.push_back(worker);
    }
    return pools;
  }

  void ObservePrompt(std::string_view model, std::string_view tenant,
                     const std::vector<int64_t>& tokens) override {
    services_.prefixes->Observe(model, tenant, tokens);
  }

  Result<gateway::Salted> Salt(router::RouteRequest& route) override {
    KVGOV_ASSIGN_OR_RETURN(services::RequestSalt salt, services_.salting->Salt(route));
    return gateway::Salted{std::move(salt.salt), salt.diverted()};
  }

  Result<router::RouteDecision> Route(const router::RouteRequest& route,
                                      const gateway::Salted& salted, std::string decision_id,
                                      gateway::RouteCount count) override {
    Result<router::RouteDecision> decision =
        services_.router->Route(route, salted.salt, decision_id, clock::NowMillis());
    if (!decision.ok() || decision->worker.empty()) return decision;
    services::MarkDiverted(salted.diverted, *decision);
    services_.tenants_seen->Note(route.tenant);
    services_.salting->ExpectSaltedBlocks(route, salted.salt, *decision);
    if (count == gateway::RouteCount::kRequest) services_.route_totals->Count(*decision);
    return decision;
  }

  void Prefilled(const std::string& decision_id) override {
    (void)services_.router->Prefilled(decision_id);
  }
  void Done(const std::string& decision_id) override { (void)services_.router->Done(decision_id); }

  void Account(const std::string& worker, const std::string& decision_id,
               const gateway::Prediction& prediction,
               const std::optional<EngineUsage>& usage) override {
    services_.usage->Account(worker, decision_id, prediction, usage);
  }

  Result<std::unique_ptr<gateway::HandoffPin>> Pin(const gateway::HandoffRequest& request,
                                                   std::string_view request_id,
                                                   std::string_view prefill_worker,
                                                   NIXLTransferRole role) override {
    return services_.handoffs->Pin(request, request_id, prefill_worker, role);
  }
  void RecordHandoff(gateway::HandoffRecord record,
                     std::optional<double> handoff_seconds) override {
    services_.handoffs->Record(std::move(record), handoff_seconds);
  }

  void CountRequest(std::string_view endpoint) override {
    services_.metrics.requests->WithLabels({std::string(endpoint)})->Inc();
  }
  void CountTokenizeFailure(std::string_view model) override {
    services_.metrics.tokenize_failures->WithLabels({std::string(model)})->Inc();
  }
  void CountRetry() override { services_.metrics.retries->WithLabels({})->Inc(); }
  void CountRelayed(size_t bytes) override {
    services_.metrics.bytes_relayed->WithLabels({})->Add(static_cast<double>(bytes));
  }

 private:
  // A worker the gateway may send to: live, healthy, not draining, with an
  // engine URL.
  bool MayServe(const index::WorkerResidency& worker) const {
    if (worker.state != index::WorkerState::kLive) return false;
    if (std::optional<router::WorkerStatus> status = services_.status->Get(worker.id)) {
      if ((status->probed && !status->healthy) || status->draining) return false;
    }
    return !services_.engines->OpenAIUrlOf(worker.id).empty();
  }

  const GatewayServices services_;
};

}  // namespace

gateway::Handler GatewayHandler(const GatewayServices& services) {
  auto plane = std::make_shared<ServicesPlane>(services);
  gateway::Handler handler = gateway::GatewayHandler(*plane);
  // The handler holds the plane it was made over.
  return [plane, handler = std::move(handler)](gateway::Exchange& exchange) {
    return handler(exchange);
  };
}

}  // namespace kvgov::server
