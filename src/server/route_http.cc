#include "server/route_http.h"

#include <httplib.h>

namespace kvgov::server {
namespace {

using Json = nlohmann::json;

bool IsJsonContentType(const httplib::Request& request) {
  const std::string type = request.get_header_value("Content-Type");
  return type.rfind("application/json", 0) == 0;
}

// Reads a body that may be absent; when `keep`, hands it on as the
// request's.
BodyReadingHandler ReadBody(size_t max_body_bytes, Handler handler, bool keep) {
  return [max_body_bytes, keep, handler = std::move(handler)](
             const httplib::Request& request, httplib::Response& response,
             const httplib::ContentReader& read_body) {
    if (!request.has_header("Content-Length") && !request.has_header("Transfer-Encoding")) {
      return handler(request, response);
    }
    std::string body;
    size_t length = 0;
    const bool read = read_body([&](const char* data, size_t n) {
      length += n;
      if (length > max_body_bytes) return false;
      if (keep) body.append(data, n);
      return true;
    });
    if (!read) {
      return SendError(response, 413,
                       Status::ResourceExhausted(keep ? BodyOverLimitMessage(max_body_bytes)
                                                      : "body: this route takes none"));
    }
    if (!keep) return handler(request, response);
    httplib::Request with_body = request;
    with_body.body = std::move(body);
    handler(with_body, response);
  };
}

}  // namespace

void SendJsonText(httplib::Response& response, int status, const std::string& body) {
  response.status = status;
  response.set_content(body, "application/json");
}

void SendJson(httplib::Response& response, int status, const Json& body) {
  SendJsonText(response, status, body.dump(-1, ' ', false, Json::error_handler_t::replace));
}

void SendError(httplib::Response& response, int status, const Status& error) {
  SendErrorJson(response, status, StatusCodeName(error.code()), error.message());
}

JsonLimits BodyLimits(size_t max_body_bytes) {
  JsonLimits limits;
  limits.max_bytes = max_body_bytes;
  return limits;
}

int GovernanceWriteHttpStatus(const Status& status) {
  switch (status.code()) {
    case StatusCode::kResourceExhausted:
      return 413;  // the record would not fit a journal row
    case StatusCode::kUnavailable:
    case StatusCode::kIOError:
      return 503;
    default:
      return 500;
  }
}

void SendBodyError(httplib::Response& response, const Status& error) {
  SendError(response, error.code() == StatusCode::kResourceExhausted ? 413 : 400, error);
}

bool RequireJsonContentType(const httplib::Request& request, httplib::Response& response) {
  if (IsJsonContentType(request)) return true;
  SendError(response, 415,
            Status::InvalidArgument("Content-Type: want application/json, got '" +
                                    request.get_header_value("Content-Type").substr(0, 64) + "'"));
  return false;
}

std::string BodyOverLimitMessage(size_t max_body_bytes) {
  return "body: longer than the " + std::to_string(max_body_bytes) +
         "-byte limit; `kvgov serve --max-body-bytes` (max-body-bytes in the config) raises it";
}

void SendErrorJson(httplib::Response& response, int status, std::string_view code,
                   std::string_view message) {
  SendJson(response, status,
           {{"error", {{"code", std::string(code)}, {"message", std::string(message)}}}});
}

BodyReadingHandler WithOptionalBody(size_t max_body_bytes, Handler handler) {
  return ReadBody(max_body_bytes, std::move(handler), /*keep=*/true);
}

BodyReadingHandler WithoutBody(size_t max_body_bytes, Handler handler) {
  return ReadBody(max_body_bytes, std::move(handler), /*keep=*/false);
}

}  // namespace kvgov::server
