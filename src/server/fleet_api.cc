#include "server/fleet_api.h"

#include <httplib.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kvgov/clock/clock.h"
#include "kvgov/codec/ingest_batch.h"
#include "kvgov/codec/workers_api.h"
#include "kvgov/ingest/engine_diagnostics.h"
#include "kvgov/services/engines.h"
#include "server/route_http.h"

namespace kvgov::server {
namespace {

using Json = nlohmann::json;

void HandleEvents(const FleetRoutes& routes, const httplib::Request& request,
                  httplib::Response& response, const auth::Principal& caller) {
  if (!RequireJsonContentType(request, response)) return;
  Result<IngestBatch> batch = DecodeIngestBatchJson(request.body, routes.access.body_limits);
  if (!batch.ok()) return SendBodyError(response, batch.status());
  size_t accepted = 0;
  Json rejected = Json::array();
  for (size_t i = 0; i < batch->events.size(); ++i) {
    const Result<IngestEvent>& event = batch->events[i];
    Status status = event.ok() ? routes.reports->Apply(*event, ActorOf(caller), clock::NowMillis())
                               : event.status();
    if (status.ok()) {
      ++accepted;
    } else {
      std::string message = status.message();
      // Decoder errors carry their absolute path; lowering errors are
      // relative to the element.
      if (message.rfind("$.", 0) != 0) message.insert(0, "$.events[" + std::to_string(i) + "].");
      rejected.push_back(
          {{"index", i}, {"code", StatusCodeName(status.code())}, {"error", message}});
    }
  }
  SendJson(response, 200, {{"accepted", accepted}, {"rejected", std::move(rejected)}});
}

// A tenant-bound caller (fleet_view false) sees ids, models and health:
// block counts and stream statistics are aggregates over every tenant.
void HandleWorkers(const FleetRoutes& routes, httplib::Response& response, bool fleet_view) {
  std::map<std::string, transport::StreamView> streams;
  if (routes.ingest) {
    for (const transport::StreamView& view : routes.ingest->Streams()) {
      streams.emplace(view.worker, view);
    }
  }
  std::vector<WorkerView> views;
  const int64_t now_ms = clock::NowMillis();
  for (index::WorkerResidency& worker : routes.index->Workers()) {
    WorkerView& view = views.emplace_back();
    view.health = routes.status->Get(worker.id);
    view.fleet_view = fleet_view;
    // Read for every caller, shown only in the fleet view: they are
    // aggregates over every tenant.
    router::WorkerLoad load = routes.router->LoadOf(worker.id);
    std::optional<router::PredictionScore> predictions = routes.predictions->Of(worker.id);
    const std::optional<double> running = router::RunningRequests(load.scraped);
    if (auto it = streams.find(worker.id); it != streams.end()) {
      const ingest::StreamStats& stats = *it->second.stats;
      const ingest::EngineDiagnostics diagnostics =
          ingest::DiagnoseEngine(stats, running, now_ms, routes.engine_silence_ms);
      if (worker.state == index::WorkerState::kLive && stats.last_seq.load() < 0) {
        view.waiting_for_events_ms = diagnostics.silent_for_ms;
        view.stream_error = stats.stream_error();
        // Served work (answered through the gateway, or running by the
        // engine's own metrics) computes blocks, and blocks are published.
        const bool served = (predictions && predictions->scored() > 0) || running.value_or(0) > 0;
        view.no_events_yet = !view.stream_error.empty() ? NoEventsYet::kStreamFailed
                             : served                   ? NoEventsYet::kSilent
                                                        : NoEventsYet::kIdle;
      }
      if (fleet_view) {
        WorkerStreamView& stream = view.stream.emplace();
        stream.kind = std::string(ToString(it->second.kind));
        stream.role = std::string(ToString(routes.engines->RoleOf(worker.id)));
        stream.events_endpoint = it->second.events;
        stream.replay_endpoint = it->second.replay;
        if (const ingest::EngineSpec* engine = routes.engines->Of(worker.id); engine != nullptr) {
          stream.control_url = engine->control;
        }
        stream.last_seq = stats.last_seq.load();
        stream.seq_gaps = stats.seq_gaps.load();
        stream.replays = stats.replays_ok.load() + stats.replays_failed.load();
        stream.replays_failed = stats.replays_failed.load();
        stream.restarts = stats.restarts.load();
        stream.duplicates = stats.duplicates.load();
        for (const auto& count : stats.decode_errors) stream.decode_errors += count.load();
        stream.catch_ups = stats.catch_ups_ok.load() + stats.catch_ups_failed.load();
        stream.catch_ups_failed = stats.catch_ups_failed.load();
        stream.last_batch_ms = stats.last_batch_ms.load();
        stream.diagnostics = diagnostics;
      }
    }
    if (fleet_view) {
      view.load = load;
      view.predictions = predictions;
    }
    view.residency = std::move(worker);
  }
  SendJsonText(response, 200, EncodeWorkersJson(views));
}

}  // namespace

void RegisterFleetApi(httplib::Server& http, const FleetRoutes& routes) {
  using auth::Role;
  http.Post("/v1/events",
            GuardFleetWrite(routes.access, Role::kIngest,
                            [routes](const httplib::Request& request, httplib::Response& response,
                                     const auth::Principal& caller) {
                              HandleEvents(routes, request, response, caller);
                            }));
  http.Get("/v1/workers", Guard(routes.access, Role::kRead,
                                [routes](const httplib::Request&, httplib::Response& response,
                                         const auth::Principal& caller) {
                                  HandleWorkers(routes, response,
                                                /*fleet_view=*/caller.tenant.empty());
                                }));
  auto set_drain = [routes](bool draining) {
    return GuardFleetWrite(
        routes.access, Role::kAdmin,
        [routes, draining](const httplib::Request& request, httplib::Response& response,
                           const auth::Principal& caller) {
          const std::string worker = request.matches[1].str();
          if (Status set = routes.drains->Set(ActorOf(caller), worker, draining); !set.ok()) {
            return SendError(
                response,
                set.code() == StatusCode::kNotFound ? 404 : GovernanceWriteHttpStatus(set), set);
          }
          SendJson(response, 200, {{"worker", worker}, {"draining", draining}});
        });
  };
  http.Post(R"(/v1/workers/([A-Za-z0-9_.@-]+)/drain)",
            WithoutBody(routes.access.body_limits.max_bytes, set_drain(true)));
  http.Delete(R"(/v1/workers/([A-Za-z0-9_.@-]+)/drain)", set_drain(false));
}

}  // namespace kvgov::server
