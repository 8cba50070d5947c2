#include "server/http_api.h"

#include <httplib.h>

#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>

#include "kvgov/clock/clock.h"
#include "kvgov/codec/ingest_batch.h"
#include "kvgov/codec/route_api.h"
#include "kvgov/codec/workers_api.h"
#include "kvgov/ingest/engine_diagnostics.h"
#include "kvgov/auth/entropy.h"
#include "kvgov/replication/replica.h"
#include "server/access.h"
#include "server/engines.h"
#include "server/prefix_diagnostics.h"
#include "server/salting.h"

namespace kvgov::server {
namespace {

using Json = nlohmann::json;

bool IsJsonContentType(const httplib::Request& request) {
  const std::string type = request.get_header_value("Content-Type");
  return type.rfind("application/json", 0) == 0;
}

void HandleEvents(const ControlRoutes& routes, const httplib::Request& request,
                  httplib::Response& response, const auth::Principal& caller) {
  if (!RequireJsonContentType(request, response)) return;
  Result<IngestBatch> batch = DecodeIngestBatchJson(request.body, routes.body_limits);
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
      if (message.rfind("$.", 0) != 0) message = "$.events[" + std::to_string(i) + "]." + message;
      rejected.push_back(
          {{"index", i}, {"code", StatusCodeName(status.code())}, {"error", message}});
    }
  }
  SendJson(response, 200, {{"accepted", accepted}, {"rejected", std::move(rejected)}});
}

// A POST whose body is optional, so that `curl -X POST URL` works:
// cpp-httplib otherwise reads a POST's body before routing and, with
// neither Content-Length nor chunked encoding, refuses it as malformed. A
// body that is sent is read (up to the body limit), so a kept-alive
// connection stays in step, and, when `keep`, handed to the handler as the
// request's.
httplib::Server::HandlerWithContentReader WithOptionalBody(size_t max_body_bytes, Handler handler,
                                                           bool keep) {
  return [max_body_bytes, keep, handler = std::move(handler)](
             const httplib::Request& request, httplib::Response& response,
             const httplib::ContentReader& read_body) {
    if (!request.has_header("Content-Length") && !request.has_header("Transfer-Encoding")) {
      return handler(request, response);
    }
    std::string body;
    size_t length = 0;
    const bool read = read_body([&](const char* data, size_t n) {
      length += n;
      if (length > max_body_bytes) return false;
      if (keep) body.append(data, n);
      return true;
    });
    if (!read) {
      return SendError(response, 413,
                       Status::ResourceExhausted(keep ? BodyOverLimitMessage(max_body_bytes)
                                                      : "body: this route takes none"));
    }
    if (!keep) return handler(request, response);
    httplib::Request with_body = request;
    with_body.body = std::move(body);
    handler(with_body, response);
  };
}

// A POST that takes no body: one sent anyway is read and ignored.
httplib::Server::HandlerWithContentReader WithoutBody(size_t max_body_bytes, Handler handler) {
  return WithOptionalBody(max_body_bytes, std::move(handler), /*keep=*/false);
}

// A tenant-bound caller (fleet_view false) sees ids, models and health:
// block counts and stream statistics are aggregates over every tenant.
void HandleWorkers(const ControlRoutes& routes, httplib::Response& response, bool fleet_view) {
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
      view.load = std::move(load);
      view.predictions = std::move(predictions);
    }
    view.residency = std::move(worker);
  }
  SendJsonText(response, 200, EncodeWorkersJson(views));
}

void HandleRoute(const ControlRoutes& routes, const httplib::Request& request,
                 httplib::Response& response, const auth::Principal& caller) {
  const auto started = std::chrono::steady_clock::now();
  auto count = [&routes](std::string_view outcome) {
    routes.metrics.decisions->WithLabels({outcome})->Inc();
  };
  if (!RequireJsonContentType(request, response)) {
    count("bad_request");
    return;
  }
  Result<router::RouteRequest> route = DecodeRouteRequestJson(request.body, routes.body_limits);
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
  Result<RequestSalt> salt = routes.salting->Salt(*route);
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
  MarkDiverted(*salt, *decision);
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

void HandleRouteDone(const ControlRoutes& routes, const httplib::Request& request,
                     httplib::Response& response, const auth::Principal& caller) {
  const bool has_body = request.body.find_first_not_of(" \t\r\n") != std::string::npos;
  if (has_body && !RequireJsonContentType(request, response)) return;
  Result<RouteDoneReport> report = DecodeRouteDoneJson(request.body, routes.body_limits);
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

// A query parameter as an unsigned integer within [min, max].
Result<uint64_t> QueryNumber(const httplib::Request& request, const char* name, uint64_t fallback,
                             uint64_t min, uint64_t max) {
  if (!request.has_param(name)) return fallback;
  const std::string text = request.get_param_value(name);
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    return Status::InvalidArgument(std::string(name) + ": want an integer in " +
                                   std::to_string(min) + "-" + std::to_string(max) + ", got '" +
                                   text.substr(0, 32) + "'");
  }
  return value;
}

void HandleJournal(const ControlRoutes& routes, const httplib::Request& request,
                   httplib::Response& response) {
  Result<uint64_t> since = QueryNumber(request, "since", 1, 1, UINT64_MAX);
  Result<uint64_t> limit = QueryNumber(request, "limit", 100, 1, 1000);
  if (!since.ok()) return SendError(response, 400, since.status());
  if (!limit.ok()) return SendError(response, 400, limit.status());
  Result<std::vector<journal::Row>> rows = routes.journal->Read(*since, *limit);
  if (!rows.ok()) return SendError(response, 500, rows.status());
  Json out = Json::array();
  for (const journal::Row& row : *rows) {
    out.push_back({{"seq", row.seq},
                   {"time_ms", row.time_ms},
                   {"kind", row.kind},
                   {"subject", row.subject},
                   {"actor", row.actor},
                   {"origin", row.origin},
                   {"format_version", row.format_version},
                   {"payload", row.payload},
                   {"payload_digest", row.payload_digest},
                   {"prev_hash", row.prev_hash},
                   {"hash", row.hash}});
  }
  // head_hash names the whole chain: replicas that applied the same log
  // report the same one.
  Json body = {{"rows", std::move(out)},
               {"head_seq", routes.journal->head_seq()},
               {"head_hash", routes.journal->head_hash()}};
  if (!rows->empty() && rows->back().seq < routes.journal->head_seq()) {
    body["next_since"] = rows->back().seq + 1;
  }
  SendJson(response, 200, body);
}

}  // namespace

void SendJsonText(httplib::Response& response, int status, std::string body) {
  response.status = status;
  response.set_content(std::move(body), "application/json");
}

void SendJson(httplib::Response& response, int status, const Json& body) {
  SendJsonText(response, status, body.dump(-1, ' ', false, Json::error_handler_t::replace));
}

void SendError(httplib::Response& response, int status, const Status& error) {
  SendErrorJson(response, status, StatusCodeName(error.code()), error.message());
}

JsonLimits BodyLimits(size_t max_body_bytes) {
  JsonLimits limits;
  limits.max_bytes = max_body_bytes;
  return limits;
}

int GovernanceWriteHttpStatus(const Status& status) {
  switch (status.code()) {
    case StatusCode::kResourceExhausted:
      return 413;  // the record would not fit a journal row
    case StatusCode::kUnavailable:
    case StatusCode::kIOError:
      return 503;
    default:
      return 500;
  }
}

void SendBodyError(httplib::Response& response, const Status& error) {
  SendError(response, error.code() == StatusCode::kResourceExhausted ? 413 : 400, error);
}

bool RequireJsonContentType(const httplib::Request& request, httplib::Response& response) {
  if (IsJsonContentType(request)) return true;
  SendError(response, 415,
            Status::InvalidArgument("Content-Type: want application/json, got '" +
                                    request.get_header_value("Content-Type").substr(0, 64) + "'"));
  return false;
}

std::string BodyOverLimitMessage(size_t max_body_bytes) {
  return "body: longer than the " + std::to_string(max_body_bytes) +
         "-byte limit; `kvgov serve --max-body-bytes` (max-body-bytes in the config) raises it";
}

void SendErrorJson(httplib::Response& response, int status, std::string_view code,
                   std::string_view message) {
  SendJson(response, status,
           {{"error", {{"code", std::string(code)}, {"message", std::string(message)}}}});
}

void RegisterHttpApi(httplib::Server& http, const ControlRoutes& routes) {
  using auth::Role;
  // Liveness stays open: probes carry no token. (So does /v1/issuer, below.)
  http.Get("/healthz", [](const httplib::Request&, httplib::Response& response) {
    SendJson(response, 200, {{"status", "ok"}});
  });
  // Readiness: a replica that has not yet applied the governance log may
  // route around no quarantine the fleet holds, so it takes no traffic
  // until it has. A single node is ready once it serves (recovery runs
  // before the listener opens).
  http.Get("/readyz", [routes](const httplib::Request&, httplib::Response& response) {
    if (routes.replica != nullptr && routes.replica->log_reset()) {
      SendJson(response, 503,
               {{"status", "log_reset"},
                {"detail",
                 "the governance log on Redis is not the one this replica followed "
                 "(Redis lost its data): restore Redis from its backup"}});
      return;
    }
    if (routes.replica != nullptr && !routes.replica->caught_up()) {
      SendJson(response, 503,
               {{"status", "catching_up"},
                {"detail", routes.replica->connected()
                               ? "applying the governance log up to its end"
                               : "the governance log on Redis is not reachable yet"}});
      return;
    }
    SendJson(response, 200, {{"status", "ready"}});
  });
  http.Post("/v1/events",
            GuardFleetWrite(*routes.auth, Role::kIngest,
                            [routes](const httplib::Request& request, httplib::Response& response,
                                     const auth::Principal& caller) {
                              HandleEvents(routes, request, response, caller);
                            }));
  http.Get("/v1/workers", Guard(*routes.auth, Role::kRead,
                                [routes](const httplib::Request&, httplib::Response& response,
                                         const auth::Principal& caller) {
                                  HandleWorkers(routes, response,
                                                /*fleet_view=*/caller.tenant.empty());
                                }));
  http.Post("/v1/route",
            Guard(*routes.auth, Role::kRoute,
                  [routes](const httplib::Request& request, httplib::Response& response,
                           const auth::Principal& caller) {
                    HandleRoute(routes, request, response, caller);
                  }));
  // POST /v1/route/{id}/<step>: the step on the caller's own decision (a
  // tenant-bound token's own tenant's), answered {<answer>: true}.
  using DecisionStep = Status (router::Router::*)(std::string_view, std::string_view);
  auto decision_step = [routes](DecisionStep step, const char* answer) {
    return WithoutBody(
        routes.body_limits.max_bytes,
        Guard(*routes.auth, Role::kRoute,
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
      WithOptionalBody(routes.body_limits.max_bytes,
                       Guard(*routes.auth, Role::kRoute,
                             [routes](const httplib::Request& request, httplib::Response& response,
                                      const auth::Principal& caller) {
                               HandleRouteDone(routes, request, response, caller);
                             }),
                       /*keep=*/true));
  http.Post(R"(/v1/route/([0-9a-f]{32})/prefilled)",
            decision_step(&router::Router::Prefilled, "decoding"));
  auto set_drain = [routes](bool draining) {
    return GuardFleetWrite(
        *routes.auth, Role::kAdmin,
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
            WithoutBody(routes.body_limits.max_bytes, set_drain(true)));
  http.Delete(R"(/v1/workers/([A-Za-z0-9_.@-]+)/drain)", set_drain(false));
  http.Get("/v1/config", GuardFleet(*routes.auth, Role::kAdmin,
                                    [routes](const httplib::Request&, httplib::Response& response) {
                                      SendJsonText(response, 200, routes.config_json());
                                    }));
  // Public, as /healthz is: anyone verifying a deletion certificate
  // offline needs this key, and it is the public half only
  // (docs/formats/tokens.md).
  http.Get("/v1/issuer", [routes](const httplib::Request&, httplib::Response& response) {
    SendJson(response, 200,
             {{"algorithm", "ed25519"},
              {"key_id", routes.issuer->key_id()},
              {"public_key", routes.issuer->public_key_hex()}});
  });
  http.Get("/v1/journal",
           GuardFleet(*routes.auth, Role::kRead,
                      [routes](const httplib::Request& request, httplib::Response& response) {
                        HandleJournal(routes, request, response);
                      }));
  // The whole chain, as `kvgov journal verify` checks it, while kvgov runs.
  http.Get("/v1/journal/verify",
           GuardFleet(*routes.auth, Role::kRead,
                      [routes](const httplib::Request&, httplib::Response& response) {
                        Result<journal::VerifyReport> report =
                            routes.chain_check->Verify(*routes.store, routes.journal->head_seq());
                        if (!report.ok()) return SendError(response, 500, report.status());
                        Json body = {{"ok", !report->first_broken_seq.has_value()},
                                     {"rows", report->rows},
                                     {"head_seq", routes.journal->head_seq()},
                                     {"head_hash", routes.journal->head_hash()}};
                        // Rows a replica that rejoined from a snapshot never
                        // had; every other replica holds them.
                        body["adopted"] = Json::array();
                        for (const journal::AdoptedSpan& span : report->adopted) {
                          body["adopted"].push_back({{"first_seq", span.first_seq},
                                                     {"last_seq", span.last_seq},
                                                     {"hash", span.hash},
                                                     {"source", span.source}});
                        }
                        if (report->first_broken_seq.has_value()) {
                          body["first_broken_seq"] = *report->first_broken_seq;
                          body["problem"] = report->problem;
                        }
                        SendJson(response, 200, body);
                      }));
  http.Get("/metrics", GuardFleet(*routes.auth, Role::kRead,
                                  [routes](const httplib::Request&, httplib::Response& response) {
                                    response.set_content(
                                        routes.registry->Render(),
                                        "text/plain; version=0.0.4; charset=utf-8");
                                  }));
}

}  // namespace kvgov::server
