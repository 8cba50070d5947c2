#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kvgov/auth/tokens.h"
#include "kvgov/cert/issuer_key.h"
#include "kvgov/codec/ingest_batch.h"
#include "kvgov/core/status.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/journal/journal.h"
#include "kvgov/metrics/registry.h"
#include "kvgov/router/prediction_score.h"
#include "kvgov/router/router.h"
#include "kvgov/router/worker_status.h"
#include "kvgov/services/report_intake.h"
#include "kvgov/services/usage_accounting.h"
#include "kvgov/services/worker_drains.h"
#include "kvgov/store/store.h"
#include "kvgov/transport/zmq_ingest.h"
#include "server/route_state.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace kvgov::replication {
class Replica;
}  // namespace kvgov::replication

namespace kvgov::server {

class Engines;
class PrefixWatch;
class RouteSalting;

/// What the control API's own routes use; each must outlive the listener.
struct ControlRoutes {
  auth::Authenticator* auth = nullptr;
  JsonLimits body_limits;
  // POST /v1/events.
  services::ReportIntake* reports = nullptr;
  // GET /v1/workers.
  const index::ResidencyIndex* index = nullptr;
  const router::WorkerStatusTable* status = nullptr;
  const transport::ZmqIngest* ingest = nullptr;  // its streams' statistics; null: none
  const router::PredictionScores* predictions = nullptr;
  const Engines* engines = nullptr;
  int64_t engine_silence_ms = 0;
  // POST /v1/route and its steps.
  router::Router* router = nullptr;
  RouteSalting* salting = nullptr;
  PrefixWatch* prefixes = nullptr;
  services::UsageAccounting* usage = nullptr;  // the usage a done reports
  RouteMetrics metrics;
  TenantsSeen* tenants_seen = nullptr;
  RouteTotals* route_totals = nullptr;
  OpenPredictions* route_predictions = nullptr;
  // Drains, config, the issuer's key, the journal, metrics, readiness.
  services::WorkerDrains* drains = nullptr;
  std::function<std::string()> config_json;  // GET /v1/config's body
  const cert::IssuerKey* issuer = nullptr;
  const journal::Journal* journal = nullptr;
  const store::Store* store = nullptr;
  ChainCheck* chain_check = nullptr;
  const metrics::Registry* registry = nullptr;
  const replication::Replica* replica = nullptr;  // null for a single node
};

/// Registers the control API's own routes on `http` (the governance,
/// console, handoff and diagnostics routes register themselves). Handlers
/// turn a request into calls on their collaborators and a JSON answer;
/// they hold no state of their own. Routes and bodies:
/// docs/formats/events-api.md.
void RegisterHttpApi(httplib::Server& http, const ControlRoutes& routes);

/// Writes kvgov's one error body, {"error":{"code":...,"message":...}}.
void SendErrorJson(httplib::Response& response, int status, std::string_view code,
                   std::string_view message);

/// The same from a Status: its code's name and its message.
void SendError(httplib::Response& response, int status, const Status& error);

/// The limits a request body is decoded under: the API's (--max-body-bytes).
JsonLimits BodyLimits(size_t max_body_bytes);

/// The HTTP status for a failed governance write: 413 when its record is
/// over the journal's row limit, 503 when the store or the log cannot take
/// it now, 500 otherwise.
int GovernanceWriteHttpStatus(const Status& status);

/// A body that did not decode: 413 when it is over a limit, else 400.
void SendBodyError(httplib::Response& response, const Status& error);

/// True for a JSON body; otherwise answers 415 naming the type sent.
bool RequireJsonContentType(const httplib::Request& request, httplib::Response& response);

/// What a 413 says: the limit, and the flag that raises it.
std::string BodyOverLimitMessage(size_t max_body_bytes);

/// A JSON answer (invalid UTF-8 in strings written as U+FFFD).
void SendJson(httplib::Response& response, int status, const nlohmann::json& body);

/// A JSON answer a src/codec encoder wrote.
void SendJsonText(httplib::Response& response, int status, std::string body);

}  // namespace kvgov::server
