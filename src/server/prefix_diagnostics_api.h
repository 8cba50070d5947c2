#pragma once

// Cache breakers in the routed traffic (docs/formats/prefix-diagnostics.md):
// the gateway and /v1/route feed each prompt to the daemon's detector;
// GET /v1/diagnostics/prefix reports what it found, and POST
// /v1/lint/prompt checks requests given against the rules, no traffic needed.

#include "server/access.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace kvgov::services {
class Engines;
class PrefixWatch;
}  // namespace kvgov::services

namespace kvgov::server {

/// POST /v1/lint/prompt and GET /v1/diagnostics/prefix (read role); the
/// engines tokenize what they check. Each collaborator must outlive `http`.
void RegisterPrefixDiagnosticsApi(httplib::Server& http, const RouteAccess& access,
                                  const services::PrefixWatch& watch,
                                  const services::Engines& engines);

}  // namespace kvgov::server
