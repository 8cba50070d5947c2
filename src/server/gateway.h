#pragma once

// Internal to kvgov_server: the data plane's listener, an OpenAI-compatible
// gateway (docs/formats/gateway.md).

namespace httplib {
class Server;
}  // namespace httplib

namespace kvgov::server {

struct Daemon;

/// Registers GET /health, GET /v1/models, POST /v1/completions and POST
/// /v1/chat/completions on `http`, a listener of its own beside the control
/// API. Each request is tokenized (by the engine), routed in process with
/// the caller's tenant salt, and forwarded to the chosen engine, its answer
/// streamed back as it arrives. Handlers run on `http`'s pool; each
/// forwarded request has one upstream thread of its own.
void RegisterGateway(httplib::Server& http, Daemon& daemon);

}  // namespace kvgov::server
