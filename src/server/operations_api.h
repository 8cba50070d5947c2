#pragma once

// Internal to kvgov_server: the routes an operator and a probe use
// (docs/formats/events-api.md, journal.md): liveness and readiness, the
// configuration, the issuer's public key, the journal and its check,
// /metrics.

#include <functional>
#include <string>

#include "kvgov/cert/issuer_key.h"
#include "kvgov/journal/journal.h"
#include "kvgov/metrics/registry.h"
#include "kvgov/store/store.h"
#include "server/access.h"

namespace httplib {
class Server;
}

namespace kvgov::replication {
class Replica;
}  // namespace kvgov::replication

namespace kvgov::server {

class ChainCheck;

/// What the operations routes use; each must outlive the listener.
struct OperationsRoutes {
  RouteAccess access;
  std::function<std::string()> config_json;  // GET /v1/config's body
  const cert::IssuerKey* issuer = nullptr;
  const journal::Journal* journal = nullptr;
  const store::Store* store = nullptr;  // the rows the chain check reads
  ChainCheck* chain_check = nullptr;
  const metrics::Registry* registry = nullptr;
  const replication::Replica* replica = nullptr;  // readiness; null for a single node
};

/// GET /healthz and /v1/issuer (open), /readyz (open), /v1/config (admin,
/// fleet-wide), /v1/journal and /v1/journal/verify and /metrics (read,
/// fleet-wide).
void RegisterOperationsApi(httplib::Server& http, const OperationsRoutes& routes);

}  // namespace kvgov::server
