#pragma once

// Internal to kvgov_server: the gateway's doors into kvgov's state
// (gateway::Plane; docs/formats/gateway.md, docs/adr/0035).

#include <cstdint>

#include "gateway/front_door.h"
#include "gateway/plane.h"
#include "kvgov/auth/tokens.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/router/router.h"
#include "kvgov/router/worker_status.h"
#include "kvgov/services/usage_accounting.h"
#include "server/route_state.h"

namespace kvgov::services {
class Engines;
class Handoffs;
class PrefixWatch;
class RouteSalting;
}  // namespace kvgov::services

namespace kvgov::server {

/// What the gateway's request path reaches; each must outlive the front
/// door.
struct GatewayServices {
  gateway::GatewayLimits limits;
  auth::Authenticator* auth = nullptr;
  const index::ResidencyIndex* index = nullptr;
  const router::WorkerStatusTable* status = nullptr;
  const services::Engines* engines = nullptr;
  router::Router* router = nullptr;
  services::RouteSalting* salting = nullptr;
  services::PrefixWatch* prefixes = nullptr;
  services::UsageAccounting* usage = nullptr;
  services::Handoffs* handoffs = nullptr;
  TenantsSeen* tenants_seen = nullptr;
  RouteTotals* route_totals = nullptr;
  GatewayMetrics metrics;
};

/// The front door's handler (gateway::FrontDoor, a listener of its own
/// beside the control API): src/gateway's request path
/// (gateway::GatewayHandler) over a Plane on `services`, which it owns.
gateway::Handler GatewayHandler(const GatewayServices& services);

}  // namespace kvgov::server
