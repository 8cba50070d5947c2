#include "server/console_api.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "kvgov/clock/clock.h"
#include "kvgov/codec/route_api.h"
#include "kvgov/console/assets.h"
#include "server/access.h"
#include "kvgov/services/engines.h"
#include "server/route_http.h"
#include "kvgov/services/route_salting.h"

namespace kvgov::server {
namespace {

using Json = nlohmann::json;

void ServeAsset(const httplib::Request& request, httplib::Response& response) {
  const std::string path = request.matches.size() > 1 ? request.matches[1].str() : "";
  std::optional<console::Asset> asset = console::FindAsset(path);
  if (!asset) {
    return SendError(response, 404, Status::NotFound("no console file '" + path + "'"));
  }
  response.set_header("Content-Security-Policy", std::string(console::kContentSecurityPolicy));
  response.set_header("X-Content-Type-Options", "nosniff");
  response.set_header("Referrer-Policy", "no-referrer");
  response.set_header("Cache-Control", "no-cache");
  response.set_content(std::string(asset->body), std::string(asset->content_type));
}

Json TrafficJson(const ConsoleRoutes& routes) {
  Json points = Json::array();
  for (const metrics::TrafficPoint& point : routes.traffic->Points()) {
    Json saved = Json::object();
    for (const auto& [source, spelling] : EnumSpelling<Source>::kValues) {
      saved[std::string(spelling)] = point.change.saved_tokens[static_cast<size_t>(source)];
    }
    points.push_back({{"end_ms", point.end_ms},
                      {"routes", point.change.routes},
                      {"prompt_blocks", point.change.prompt_blocks},
                      {"credited_blocks", point.change.credited_blocks},
                      {"saved_tokens", std::move(saved)}});
  }
  return {{"interval_ms", routes.traffic_interval_ms}, {"points", std::move(points)}};
}

// POST /v1/route/explain: /v1/route's body, or "prompt" text in place of
// "token_ids" for the model's engine to tokenize; the decision as
// /v1/route answers it, kept nowhere.
void HandleExplain(const ConsoleRoutes& routes, const httplib::Request& request,
                   httplib::Response& response, const auth::Principal& caller) {
  if (!RequireJsonContentType(request, response)) return;
  Result<ExplainRequest> body = DecodeExplainRequestJson(request.body, routes.access.body_limits);
  if (!body.ok()) return SendBodyError(response, body.status());
  router::RouteRequest& route = body->route;
  if (Status fitted = FitToCaller(caller, /*names_span_by_tokens=*/true, route.tenant);
      !fitted.ok()) {
    return SendError(response, 403, fitted);
  }
  if (!body->prompt.empty()) {
    Result<std::vector<int64_t>> tokens = routes.engines->TokenizePrompt(route.model, body->prompt);
    if (!tokens.ok()) {
      return SendError(response, tokens.status().code() == StatusCode::kNotFound ? 404 : 502,
                       tokens.status());
    }
    route.token_ids = *std::move(tokens);
  }
  // Salted as the route itself would be, diversion included, but not
  // counted: a dry run sends nothing.
  Result<services::RequestSalt> salt = routes.salting->DryRun(route);
  if (!salt.ok()) return SendError(response, 503, salt.status());
  Result<router::RouteDecision> decision =
      routes.router->Explain(route, salt->salt, clock::NowMillis());
  if (!decision.ok()) {
    return SendError(response, decision.status().code() == StatusCode::kNotFound ? 404 : 400,
                     decision.status());
  }
  services::MarkDiverted(*salt, *decision);
  std::string answer = decision->worker.empty() ? EncodeUnroutableDecisionJson(*decision)
                                                : EncodeRouteDecisionJson(*decision);
  if (!body->prompt.empty()) {
    // What the engine made of the prompt, so the caller can route it.
    Json with_tokens = Json::parse(answer);
    with_tokens["token_ids"] = route.token_ids;
    answer = with_tokens.dump();
  }
  SendJsonText(response, decision->worker.empty() ? 503 : 200, answer);
}

}  // namespace

void RegisterConsoleApi(httplib::Server& http, const ConsoleRoutes& routes) {
  using auth::Role;
  http.Get("/ui", [](const httplib::Request&, httplib::Response& response) {
    response.set_redirect("/ui/", 308);
  });
  http.Get("/ui/", ServeAsset);
  http.Get(R"(/ui/([a-z]+\.[a-z]+))", ServeAsset);
  http.Get("/v1/traffic",
           GuardFleet(routes.access, Role::kRead,
                      [routes](const httplib::Request&, httplib::Response& response) {
                        SendJson(response, 200, TrafficJson(routes));
                      }));
  http.Post("/v1/route/explain",
            Guard(routes.access, Role::kRoute,
                  [routes](const httplib::Request& request, httplib::Response& response,
                           const auth::Principal& caller) {
                    HandleExplain(routes, request, response, caller);
                  }));
}

}  // namespace kvgov::server
