#pragma once

// Internal to kvgov_server: routing as a service for callers that run
// their own gateway (docs/formats/route-api.md): POST /v1/route and the
// steps of a decision.

#include "kvgov/index/residency_index.h"
#include "kvgov/router/router.h"
#include "kvgov/services/usage_accounting.h"
#include "server/access.h"
#include "server/route_state.h"

namespace httplib {
class Server;
}

namespace kvgov::services {
class PrefixWatch;
class RouteSalting;
}  // namespace kvgov::services

namespace kvgov::server {

/// What the routing routes use; each must outlive the listener.
struct RoutingRoutes {
  RouteAccess access;
  router::Router* router = nullptr;
  services::RouteSalting* salting = nullptr;
  const index::ResidencyIndex* index = nullptr;  // the chosen worker's block size
  services::PrefixWatch* prefixes = nullptr;
  services::UsageAccounting* usage = nullptr;  // the usage a done reports
  RouteMetrics metrics;
  TenantsSeen* tenants_seen = nullptr;
  RouteTotals* route_totals = nullptr;
  OpenPredictions* route_predictions = nullptr;
};

/// POST /v1/route, POST /v1/route/{id}/prefilled and /done (route role; a
/// tenant-bound caller routes and steps its own tenant's only).
void RegisterRoutingApi(httplib::Server& http, const RoutingRoutes& routes);

}  // namespace kvgov::server
