#include "server/routing_api.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kvgov/auth/entropy.h"
#include "kvgov/clock/clock.h"
#include "kvgov/codec/route_api.h"
#include "kvgov/services/prefix_watch.h"
#include "server/route_http.h"
#include "kvgov/services/route_salting.h"

namespace kvgov::server {
namespace {

using Json = nlohmann::json;

void HandleRoute(const RoutingRoutes& routes, const httplib::Request& request,
                 httplib::Response& response, const auth::Principal& caller) {
  const auto started = std::chrono::steady_clock::now();
  auto count = [&routes](std::string_view outcome) {
    routes.metrics.decisions->WithLabels({outcome})->Inc();
  };
  if (!RequireJsonContentType(request, response)) {
    count("bad_request");
    return;
  }
  Result<router::RouteRequest> route =
      DecodeRouteRequestJson(request.body, routes.access.body_limits);
  if (!route.ok()) {
    count("bad_request");
    return SendBodyError(response, route.status());
  }
  if (Status fitted = FitToCaller(caller, /*names_span_by_tokens=*/true, route->tenant);
      !fitted.ok()) {
    count("forbidden");
    SendError(response, 403, fitted);
    return;
  }
  Result<services::RequestSalt> salt = routes.salting->Salt(*route);
  if (!salt.ok()) {
    count("no_eligible_worker");
    SendError(response, 503, salt.status());
    return;
  }
  Result<std::string> id = auth::RandomHexId();
  if (!id.ok()) {
    SendError(response, 500, id.status());
    return;
  }
  Result<router::RouteDecision> decision =
      routes.router->Route(*route, salt->salt, std::move(id).value(), clock::NowMillis());
  if (!decision.ok()) {
    count(decision.status().code() == StatusCode::kNotFound ? "unknown_model" : "bad_request");
    SendError(response, decision.status().code() == StatusCode::kNotFound ? 404 : 400,
              decision.status());
    return;
  }
  if (decision->worker.empty()) {
    count("no_eligible_worker");
    SendJsonText(response, 503, EncodeUnroutableDecisionJson(*decision));
    return;
  }
  count("routed");
  services::MarkDiverted(*salt, *decision);
  routes.prefixes->Observe(route->model, route->tenant, route->token_ids);
  routes.tenants_seen->Note(route->tenant);
  routes.route_totals->Count(*decision);
  // A prediction, kept apart from savings: only the engine's usage, if the
  // caller reports it on done, counts as saved (docs/adr/0028).
  const std::optional<index::WorkerResidency> chosen = routes.index->Worker(decision->worker);
  const int64_t block_size = chosen ? std::max<int64_t>(1, chosen->block_size) : 1;
  const int64_t predicted = static_cast<int64_t>(decision->overlap_blocks) * block_size;
  routes.metrics.predicted_tokens
      ->WithLabels({route->model, route->tenant.empty() ? "none" : route->tenant})
      ->Add(static_cast<double>(predicted));
  routes.route_predictions->Add(
      decision->decision_id,
      {decision->worker,
       router::Prediction{route->model, route->tenant,
                          static_cast<int64_t>(route->token_ids.size()), predicted, block_size}});
  routes.metrics.overlap->WithLabels({})->Observe(static_cast<double>(decision->overlap_blocks));
  routes.metrics.latency->WithLabels({})->Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  SendJsonText(response, 200, EncodeRouteDecisionJson(*decision));
}

void HandleRouteDone(const RoutingRoutes& routes, const httplib::Request& request,
                     httplib::Response& response, const auth::Principal& caller) {
  const bool has_body = request.body.find_first_not_of(" \t\r\n") != std::string::npos;
  if (has_body && !RequireJsonContentType(request, response)) return;
  Result<RouteDoneReport> report = DecodeRouteDoneJson(request.body, routes.access.body_limits);
  if (!report.ok()) return SendBodyError(response, report.status());
  const std::string decision_id = request.matches[1].str();
  if (Status done = routes.router->Done(decision_id, caller.tenant); !done.ok()) {
    return SendError(response, 404, done);
  }
  std::optional<OpenPredictions::Open> open = routes.route_predictions->Take(decision_id);
  if (report->usage.has_value() && open.has_value()) {
    routes.usage->Account(open->worker, decision_id, open->prediction, report->usage);
  }
  Json answer = {{"released", true}};
  if (report->usage.has_value()) answer["accounted"] = open.has_value();
  SendJson(response, 200, answer);
}

}  // namespace

void RegisterRoutingApi(httplib::Server& http, const RoutingRoutes& routes) {
  using auth::Role;
  http.Post("/v1/route",
            Guard(routes.access, Role::kRoute,
                  [routes](const httplib::Request& request, httplib::Response& response,
                           const auth::Principal& caller) {
                    HandleRoute(routes, request, response, caller);
                  }));
  // POST /v1/route/{id}/<step>: the step on the caller's own decision (a
  // tenant-bound token's own tenant's), answered {<answer>: true}.
  using DecisionStep = Status (router::Router::*)(std::string_view, std::string_view);
  auto decision_step = [routes](DecisionStep step, const char* answer) {
    return WithoutBody(
        routes.access.body_limits.max_bytes,
        Guard(routes.access, Role::kRoute,
              [routes, step, answer](const httplib::Request& request, httplib::Response& response,
                                     const auth::Principal& caller) {
                Status done = ((*routes.router).*step)(request.matches[1].str(), caller.tenant);
                if (!done.ok()) return SendError(response, 404, done);
                SendJson(response, 200, {{answer, true}});
              }));
  };
  // Done may carry the engine's usage: the only /v1/route saving counted.
  http.Post(
      R"(/v1/route/([0-9a-f]{32})/done)",
      WithOptionalBody(routes.access.body_limits.max_bytes,
                       Guard(routes.access, Role::kRoute,
                             [routes](const httplib::Request& request, httplib::Response& response,
                                      const auth::Principal& caller) {
                               HandleRouteDone(routes, request, response, caller);
                             })));
  http.Post(R"(/v1/route/([0-9a-f]{32})/prefilled)",
            decision_step(&router::Router::Prefilled, "decoding"));
}

}  // namespace kvgov::server
