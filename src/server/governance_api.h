#pragma once

// Internal to kvgov_server: the governance routes (docs/formats/
// governance-api.md): invalidations and revocations, their certificates,
// leases, quarantines.

#include "kvgov/auth/tokens.h"
#include "kvgov/cert/issuer_key.h"
#include "kvgov/codec/ingest_batch.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/journal/journal.h"
#include "kvgov/services/directive_driver.h"
#include "kvgov/services/lease_service.h"
#include "kvgov/services/quarantine_service.h"
#include "kvgov/services/tenant_salts.h"
#include "kvgov/store/store.h"
#include "server/access.h"

namespace httplib {
class Server;
}

namespace kvgov::services {
class Engines;
}  // namespace kvgov::services

namespace kvgov::server {

class ChainCheck;
class TenantsSeen;

/// What the governance routes use; each must outlive the listener.
struct GovernanceRoutes {
  RouteAccess access;
  services::DirectiveDriver* invalidations = nullptr;
  services::QuarantineService* quarantines = nullptr;
  const services::LeaseService* leases = nullptr;
  const services::TenantSalts* salts = nullptr;  // a quarantined span's keys
  const index::ResidencyIndex* index = nullptr;
  const services::Engines* engines = nullptr;  // spans named by prompt or messages
  const TenantsSeen* tenants_seen = nullptr;
  // Certificates: where they are stored, whose key signs them, the chain
  // their anchors are in.
  const store::Store* store = nullptr;
  const cert::IssuerKey* issuer = nullptr;
  const journal::Journal* journal = nullptr;
  ChainCheck* chain_check = nullptr;
};

/// POST and GET /v1/invalidations, GET /v1/certificates/{id}[/verify],
/// GET /v1/leases, POST /v1/quarantine, POST /v1/quarantines/{id}/lift,
/// GET /v1/quarantines.
void RegisterGovernanceApi(httplib::Server& http, const GovernanceRoutes& routes);

}  // namespace kvgov::server
