#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kvgov/codec/ingest_batch.h"
#include "kvgov/core/envelope.h"
#include "kvgov/core/status.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace kvgov::server {

struct Daemon;

/// Registers every HTTP route on `http`. Handlers turn a request into calls
/// on the daemon's components and a JSON answer; they hold no state of
/// their own. Routes and bodies: docs/formats/events-api.md.
void RegisterHttpApi(httplib::Server& http, Daemon& daemon);

/// The settings in effect (GET /v1/config's body), as JSON text; the
/// journal records it at every start.
std::string DescribeConfig(const Daemon& daemon);

/// Writes kvgov's one error body, {"error":{"code":...,"message":...}}.
void SendErrorJson(httplib::Response& response, int status, std::string_view code,
                   std::string_view message);

/// The same from a Status: its code's name and its message.
void SendError(httplib::Response& response, int status, const Status& error);

/// The limits a request body is decoded under: the API's (--max-body-bytes).
JsonLimits BodyLimits(const Daemon& daemon);

/// A body that did not decode: 413 when it is over a limit, else 400.
void SendBodyError(httplib::Response& response, const Status& error);

/// True for a JSON body; otherwise answers 415 naming the type sent.
bool RequireJsonContentType(const httplib::Request& request, httplib::Response& response);

/// What a 413 says: the limit, and the flag that raises it.
std::string BodyOverLimitMessage(size_t max_body_bytes);

/// A JSON answer (invalid UTF-8 in strings written as U+FFFD).
void SendJson(httplib::Response& response, int status, const nlohmann::json& body);

/// A routed request as an envelope event: direction route, source
/// ride_engine (the engine's own cache saved it), `saved_tokens` as the
/// prefill saved: the credited overlap for /v1/route, the engine's reported
/// cached tokens for the gateway.
Entry RouteSavingEntry(std::string_view decision_id, std::string_view worker, int64_t saved_tokens);

/// A JSON answer a src/codec encoder wrote.
void SendJsonText(httplib::Response& response, int status, std::string body);

}  // namespace kvgov::server
