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

struct Daemon;

using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
using PrincipalHandler =
    std::function<void(const httplib::Request&, httplib::Response&, const auth::Principal&)>;

/// Authenticates the call's bearer token and checks `role`, answering 401
/// or 403 itself; otherwise calls `handler` with the caller, whose tenant
/// binding the handler must honour.
Handler Guard(Daemon& daemon, auth::Role role, PrincipalHandler handler);

/// The same for fleet-wide routes (journal, metrics, config, drain,
/// ingest): a tenant-bound token is refused with 403.
Handler GuardFleet(Daemon& daemon, auth::Role role, Handler handler);

/// GuardFleet for a fleet-wide governance write: the handler gets the
/// caller, to name it in the journal.
Handler GuardFleetWrite(Daemon& daemon, auth::Role role, PrincipalHandler handler);

/// The journal's actor for a caller (docs/formats/journal.md §2):
/// "token:<name>", or "local" for a loopback call while authentication is
/// off. Never the token's secret.
std::string ActorOf(const auth::Principal& caller);

/// Fits a governance or route request to the caller: a fleet-wide caller
/// may name any tenant; a tenant-bound one only its own, and an absent
/// tenant becomes its own. `names_span_by_tokens` false (a span named by
/// engine block hash, or a worker/model scope) could reach other tenants'
/// blocks, so a tenant-bound caller is refused. PermissionDenied names the
/// binding.
Status FitToCaller(const auth::Principal& caller, bool names_span_by_tokens,
                   std::string& tenant);

}  // namespace kvgov::server
