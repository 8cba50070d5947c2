#pragma once

// Internal to kvgov_server: who may call what (docs/formats/tokens.md).
// Every route but the public ones (/healthz, /v1/issuer, the console's
// static files) is registered through one of these guards, so a route
// cannot be added without saying which role it needs.

#include <functional>
#include <string>

#include "kvgov/auth/tokens.h"
#include "kvgov/codec/json_codec.h"
#include "kvgov/core/status.h"
#include "server/route_http.h"

namespace kvgov::server {

/// What every route file takes first: who may call its routes, and the
/// limits their bodies are decoded under. The authenticator must outlive
/// the listener.
struct RouteAccess {
  auth::Authenticator* auth = nullptr;
  JsonLimits body_limits;
};

using PrincipalHandler =
    std::function<void(const httplib::Request&, httplib::Response&, const auth::Principal&)>;

/// Authenticates the call's bearer token and checks `role`, answering 401
/// or 403 itself; otherwise calls `handler` with the caller, whose tenant
/// binding the handler must honour.
Handler Guard(const RouteAccess& access, auth::Role role, PrincipalHandler handler);

/// The same for fleet-wide routes (journal, metrics, config, drain,
/// ingest): a tenant-bound token is refused with 403.
Handler GuardFleet(const RouteAccess& access, auth::Role role, Handler handler);

/// GuardFleet for a fleet-wide governance write: the handler gets the
/// caller, to name it in the journal.
Handler GuardFleetWrite(const RouteAccess& access, auth::Role role, PrincipalHandler handler);

/// The journal's actor for a caller (docs/formats/journal.md §2):
/// "token:<name>", or "local" for a loopback call while authentication is
/// off. Never the token's secret.
std::string ActorOf(const auth::Principal& caller);

using auth::FitToCaller;

}  // namespace kvgov::server
