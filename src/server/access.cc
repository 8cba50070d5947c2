#include "server/access.h"

#include <httplib.h>

#include "server/route_http.h"

namespace kvgov::server {
namespace {

// Authenticates and authorizes, or writes the 401/403 answer and returns
// nothing.
std::optional<auth::Principal> Admit(auth::Authenticator& auth, auth::Role role,
                                     const httplib::Request& request, httplib::Response& response) {
  Result<auth::Principal> caller = auth.Authorize(request.get_header_value("Authorization"), role);
  if (caller.ok()) return *caller;
  if (caller.status().code() == StatusCode::kUnauthenticated) {
    response.set_header("WWW-Authenticate", "Bearer realm=\"kvgov\"");
    SendError(response, 401, caller.status());
  } else {
    SendError(response, 403, caller.status());
  }
  return std::nullopt;
}

}  // namespace

Handler Guard(const RouteAccess& access, auth::Role role, PrincipalHandler handler) {
  return [auth = access.auth, role, handler = std::move(handler)](const httplib::Request& request,
                                                                  httplib::Response& response) {
    if (std::optional<auth::Principal> caller = Admit(*auth, role, request, response)) {
      handler(request, response, *caller);
    }
  };
}

Handler GuardFleetWrite(const RouteAccess& access, auth::Role role, PrincipalHandler handler) {
  return Guard(
      access, role,
      [handler = std::move(handler)](const httplib::Request& request, httplib::Response& response,
                                     const auth::Principal& caller) {
        if (!caller.tenant.empty()) {
          return SendError(
              response, 403,
              Status::PermissionDenied("token '" + caller.token + "' is bound to tenant '" +
                                       caller.tenant + "'; this route is fleet-wide"));
        }
        handler(request, response, caller);
      });
}

Handler GuardFleet(const RouteAccess& access, auth::Role role, Handler handler) {
  return GuardFleetWrite(
      access, role,
      [handler = std::move(handler)](const httplib::Request& request, httplib::Response& response,
                                     const auth::Principal&) { handler(request, response); });
}

std::string ActorOf(const auth::Principal& caller) {
  return caller.token.empty() ? "local" : "token:" + caller.token;
}

}  // namespace kvgov::server
