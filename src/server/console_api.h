#pragma once

// Internal to kvgov_server: the operator's console (GET /ui) and the JSON
// only it needs: GET /v1/traffic and POST /v1/route/explain
// (docs/formats/console.md).

#include <cstdint>

#include "kvgov/auth/tokens.h"
#include "kvgov/codec/ingest_batch.h"
#include "kvgov/metrics/traffic_history.h"
#include "kvgov/router/router.h"
#include "server/access.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace kvgov::services {
class Engines;
class RouteSalting;
}  // namespace kvgov::services

namespace kvgov::server {

/// What the console's routes use; each must outlive the listener.
struct ConsoleRoutes {
  RouteAccess access;
  const metrics::TrafficHistory* traffic = nullptr;
  int64_t traffic_interval_ms = 0;  // as sampled
  const services::RouteSalting* salting = nullptr;
  router::Router* router = nullptr;
  const services::Engines* engines = nullptr;  // tokenize an explained prompt
};

/// GET /ui and its files (no token: they hold no data), GET /v1/traffic
/// (fleet-wide, read), POST /v1/route/explain (route, as /v1/route).
void RegisterConsoleApi(httplib::Server& http, const ConsoleRoutes& routes);

}  // namespace kvgov::server
