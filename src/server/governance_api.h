#pragma once

#include <string_view>

#include "kvgov/codec/ingest_batch.h"
#include "kvgov/core/status.h"

namespace httplib {
class Server;
}

namespace kvgov::server {

struct Daemon;

/// GET /v1/leases, POST /v1/quarantine, GET /v1/quarantines.
void RegisterGovernanceApi(httplib::Server& http, Daemon& daemon);

}  // namespace kvgov::server
