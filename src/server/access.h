#pragma once

// Internal to kvgov_server: who may call what (docs/formats/tokens.md).
// Every route but the public ones (/healthz, /v1/issuer, the console's
// static files) is registered through one of these guards, so a route
// cannot be added without saying which role it needs.

#include <functional>
#include <string>

#include "kvgov/auth/tokens.h"
#include "kvgov/core/status.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace kvgov::server {

using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
using PrincipalHandler =
    std::function<void(const httplib::Request&, httplib::Response&, const auth::Principal&)>;

/// Authenticates the call's bearer token and checks `role`, answering 401
/// or 403 itself; otherwise calls `handler` with the caller, whose tenant
/// binding the handler must honour.
Handler Guard(auth::Authenticator& auth, auth::Role role, PrincipalHandler handler);

/// The same for fleet-wide routes (journal, metrics, config, drain,
/// ingest): a tenant-bound token is refused with 403.
Handler GuardFleet(auth::Authenticator& auth, auth::Role role, Handler handler);

/// GuardFleet for a fleet-wide governance write: the handler gets the
/// caller, to name it in the journal.
Handler GuardFleetWrite(auth::Authenticator& auth, auth::Role role, PrincipalHandler handler);

/// The journal's actor for a caller (docs/formats/journal.md §2):
/// "token:<name>", or "local" for a loopback call while authentication is
/// off. Never the token's secret.
std::string ActorOf(const auth::Principal& caller);

using auth::FitToCaller;

}  // namespace kvgov::server
