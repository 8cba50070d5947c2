#pragma once

// Internal to kvgov_server: the operator's console (GET /ui) and the JSON
// only it needs: GET /v1/traffic and POST /v1/route/explain
// (docs/formats/console.md).

namespace httplib {
class Server;
}  // namespace httplib

namespace kvgov::server {

struct Daemon;

/// GET /ui and its files (no token: they hold no data), GET /v1/traffic
/// (fleet-wide, read), POST /v1/route/explain (route, as /v1/route).
void RegisterConsoleApi(httplib::Server& http, Daemon& daemon);

}  // namespace kvgov::server
