#include "server/access.h"

#include <httplib.h>

#include "server/http_api.h"

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

Handler Guard(auth::Authenticator& auth, auth::Role role, PrincipalHandler handler) {
  return [&auth, role, handler = std::move(handler)](const httplib::Request& request,
                                                     httplib::Response& response) {
    if (std::optional<auth::Principal> caller = Admit(auth, role, request, response)) {
      handler(request, response, *caller);
    }
  };
}

Handler GuardFleetWrite(auth::Authenticator& auth, auth::Role role, PrincipalHandler handler) {
  return Guard(
      auth, role,
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

Handler GuardFleet(auth::Authenticator& auth, auth::Role role, Handler handler) {
  return GuardFleetWrite(
      auth, role,
      [handler = std::move(handler)](const httplib::Request& request, httplib::Response& response,
                                     const auth::Principal&) { handler(request, response); });
}

std::string ActorOf(const auth::Principal& caller) {
  return caller.token.empty() ? "local" : "token:" + caller.token;
}

}  // namespace kvgov::server
