#pragma once

// GET /v1/handoffs on the control API: the gateway's newest prefill/decode
// handoffs (docs/formats/gateway.md, "Prefill/decode disaggregation").

#include "server/access.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace kvgov::services {
class HandoffLog;
}  // namespace kvgov::services

namespace kvgov::server {

/// GET /v1/handoffs on the control API: the newest handoffs, newest first
/// (read role; a tenant-bound caller sees its tenant's only).
void RegisterHandoffApi(httplib::Server& http, const RouteAccess& access,
                        const services::HandoffLog& log);

}  // namespace kvgov::server
