#pragma once

#include "kvgov/core/status.h"
#include "kvgov/router/router.h"
#include "kvgov/services/tenant_salts.h"

namespace kvgov::server {

struct Daemon;

using services::RequestSalt;

/// TenantSalts::ForPrompt for a route request; a diverted one may then go
/// only to engines proven to key by the salt
/// (RouteRequest::salt_must_be_honoured), and each diversion is counted.
Result<RequestSalt> SaltRoute(Daemon& daemon, router::RouteRequest& request);

/// The verdict of a diverted decision: a quarantine the request was kept
/// from, whatever the diverted chain earned.
void MarkDiverted(const RequestSalt& salt, router::RouteDecision& decision);
void MarkDiverted(bool diverted, router::RouteDecision& decision);

}  // namespace kvgov::server
