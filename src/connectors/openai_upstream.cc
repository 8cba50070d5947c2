#include "kvgov/connectors/openai_upstream.h"

#include <httplib.h>

#include "connectors/control_url.h"
#include "kvgov/codec/gateway_api.h"

namespace kvgov::connectors {
namespace {

// A tokenize answer is the prompt's ids, 8-12 bytes each: 64 MiB is far past
// any context window.
constexpr size_t kMaxTokenizeAnswerBytes = size_t{64} << 20;

Result<std::unique_ptr<httplib::Client>> ClientFor(const std::string& base_url,
                                                   const UpstreamTimeouts& timeouts) {
  KVGOV_ASSIGN_OR_RETURN(ControlEndpoint endpoint, ParseControlUrl(base_url));
  auto client = std::make_unique<httplib::Client>(endpoint.host, endpoint.port);
  client->set_connection_timeout(std::chrono::milliseconds(timeouts.connect_ms));
  client->set_read_timeout(std::chrono::milliseconds(timeouts.first_byte_ms));
  client->set_write_timeout(std::chrono::milliseconds(timeouts.connect_ms));
  client->set_keep_alive(false);
  return client;
}

// The start of an answer's body, printable ASCII only, for an error text.
std::string Excerpt(std::string_view body) {
  std::string out;
  for (char c : body.substr(0, 160)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

}  // namespace

std::string_view TokenizePath(ingest::EngineKind kind) {
  return kind == ingest::EngineKind::kSglang ? "/v1/tokenize" : "/tokenize";
}

Result<std::vector<int64_t>> Tokenize(const std::string& base_url, ingest::EngineKind kind,
                                      std::string_view body, const UpstreamTimeouts& timeouts) {
  KVGOV_ASSIGN_OR_RETURN(std::unique_ptr<httplib::Client> client, ClientFor(base_url, timeouts));
  std::string answer;
  bool too_long = false;
  httplib::Request request;
  request.method = "POST";
  request.path = std::string(TokenizePath(kind));
  request.body = std::string(body);
  request.set_header("Content-Type", "application/json");
  request.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
    if (answer.size() + length > kMaxTokenizeAnswerBytes) {
      too_long = true;
      return false;
    }
    answer.append(data, length);
    return true;
  };
  httplib::Result result = client->send(request);
  if (too_long) {
    return Status::ResourceExhausted("tokenize: the engine's answer is longer than " +
                                     std::to_string(kMaxTokenizeAnswerBytes) + " bytes");
  }
  if (!result) {
    return Status::Unavailable("tokenize at " + base_url + request.path + ": " +
                               RequestErrorText(result.error()));
  }
  if (result->status != 200) {
    return Status::Unavailable("tokenize at " + base_url + request.path + ": HTTP " +
                               std::to_string(result->status) + ": " + Excerpt(answer));
  }
  JsonLimits limits;
  limits.max_bytes = kMaxTokenizeAnswerBytes;
  limits.max_array_items = kMaxTokenizeAnswerBytes;
  return DecodeTokenizeAnswerJson(answer, limits);
}

Status Forward(const std::string& base_url, const std::string& path, std::string body,
               const UpstreamTimeouts& timeouts,
               const std::function<bool(int status, std::string_view content_type)>& on_head,
               const std::function<bool(std::string_view chunk)>& on_chunk,
               UpstreamAnswer* answer) {
  *answer = {};
  KVGOV_ASSIGN_OR_RETURN(std::unique_ptr<httplib::Client> client, ClientFor(base_url, timeouts));
  bool stopped = false;
  httplib::Request request;
  request.method = "POST";
  request.path = path;
  request.body = std::move(body);
  request.set_header("Content-Type", "application/json");
  request.response_handler = [&](const httplib::Response& response) {
    answer->head_seen = true;
    answer->status = response.status;
    answer->content_type = response.get_header_value("Content-Type");
    stopped = !on_head(response.status, answer->content_type);
    return !stopped;
  };
  request.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
    stopped = !on_chunk(std::string_view(data, length));
    return !stopped;
  };
  httplib::Result result = client->send(request);
  if (stopped) return Status::Cancelled("the gateway stopped reading");
  if (result) return Status::Ok();
  const httplib::Error error = result.error();
  const std::string what = path + " at " + base_url + ": " + RequestErrorText(error);
  if (error == httplib::Error::Read && !answer->head_seen) {
    return Status::DeadlineExceeded(what + " (no answer within " +
                                    std::to_string(timeouts.first_byte_ms) + " ms)");
  }
  return Status::Unavailable(what);
}

}  // namespace kvgov::connectors
