#pragma once

// Internal to kvgov_server: what every route file shares. kvgov's JSON
// answers and its one error body (docs/formats/events-api.md §errors), the
// statuses a failed write maps to, and how a POST's body is read under the
// API's limit.

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kvgov/codec/json_codec.h"
#include "kvgov/core/status.h"

namespace httplib {
class ContentReader;
struct Request;
struct Response;
}  // namespace httplib

namespace kvgov::server {

/// Writes kvgov's one error body, {"error":{"code":...,"message":...}}.
void SendErrorJson(httplib::Response& response, int status, std::string_view code,
                   std::string_view message);

/// The same from a Status: its code's name and its message.
void SendError(httplib::Response& response, int status, const Status& error);

/// The limits a request body is decoded under: the API's (--max-body-bytes).
JsonLimits BodyLimits(size_t max_body_bytes);

/// The HTTP status for a failed governance write: 413 when its record is
/// over the journal's row limit, 503 when the store or the log cannot take
/// it now, 500 otherwise.
int GovernanceWriteHttpStatus(const Status& status);

/// A body that did not decode: 413 when it is over a limit, else 400.
void SendBodyError(httplib::Response& response, const Status& error);

/// True for a JSON body; otherwise answers 415 naming the type sent.
bool RequireJsonContentType(const httplib::Request& request, httplib::Response& response);

/// What a 413 says: the limit, and the flag that raises it.
std::string BodyOverLimitMessage(size_t max_body_bytes);

/// A JSON answer (invalid UTF-8 in strings written as U+FFFD).
void SendJson(httplib::Response& response, int status, const nlohmann::json& body);

/// A JSON answer a src/codec encoder wrote.
void SendJsonText(httplib::Response& response, int status, const std::string& body);

/// A route's handler, as cpp-httplib calls it.
using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

using BodyReadingHandler =
    std::function<void(const httplib::Request&, httplib::Response&, const httplib::ContentReader&)>;

/// A POST whose body is optional, so that `curl -X POST URL` works:
/// cpp-httplib otherwise reads a POST's body before routing and, with
/// neither Content-Length nor chunked encoding, refuses it as malformed. A
/// body that is sent is read (413 past `max_body_bytes`), so a kept-alive
/// connection stays in step, and handed to `handler` as the request's.
BodyReadingHandler WithOptionalBody(size_t max_body_bytes, Handler handler);

/// A POST that takes no body: one sent anyway is read and ignored.
BodyReadingHandler WithoutBody(size_t max_body_bytes, Handler handler);

}  // namespace kvgov::server
