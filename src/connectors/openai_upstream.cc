#include "kvgov/connectors/openai_upstream.h"

#include <httplib.h>

#include "connectors/control_url.h"
#include "kvgov/codec/gateway_api.h"

namespace kvgov::connectors {
namespace {

using Clock = std::chrono::steady_clock;

// A tokenize answer is the prompt's ids, 8-12 bytes each: 32 MiB holds
// 2.7 M of them, past any context window served today.
constexpr size_t kMaxTokenizeAnswerBytes = size_t{32} << 20;

// The start of an answer's body, printable ASCII only, for an error text.
std::string Excerpt(std::string_view body) {
  std::string out;
  for (char c : body.substr(0, 160)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

// "<what> at <base_url><path>", the head of a failed request's error text:
// built on the way out of the retry loop, never per attempt.
std::string FailedAt(std::string_view what, std::string_view base_url, std::string_view path = {}) {
  std::string out(what);
  out.append(" at ").append(base_url).append(path);
  return out;
}

}  // namespace

struct UpstreamConnections::Connection {
  std::unique_ptr<httplib::Client> client;
  Clock::time_point idle_since;
};

std::string_view TokenizePath(ingest::EngineKind kind) {
  return kind == ingest::EngineKind::kSglang ? "/v1/tokenize" : "/tokenize";
}

std::string_view DetokenizePath(ingest::EngineKind kind) {
  return kind == ingest::EngineKind::kSglang ? "/v1/detokenize" : "/detokenize";
}

UpstreamConnections::UpstreamConnections(UpstreamTimeouts timeouts) : timeouts_(timeouts) {}

UpstreamConnections::~UpstreamConnections() = default;

Result<std::unique_ptr<UpstreamConnections::Connection>> UpstreamConnections::Take(
    const std::string& base_url, bool* kept) {
  {
    MutexLock lock(mu_);
    if (auto it = idle_.find(base_url); it != idle_.end()) {
      std::deque<std::unique_ptr<Connection>>& idle = it->second;
      const Clock::time_point oldest = Clock::now() - kMaxIdle;
      while (!idle.empty() && idle.front()->idle_since < oldest) idle.pop_front();
      if (!idle.empty()) {
        std::unique_ptr<Connection> connection = std::move(idle.back());
        idle.pop_back();
        *kept = true;
        return connection;
      }
    }
  }
  *kept = false;
  KVGOV_ASSIGN_OR_RETURN(ControlEndpoint endpoint, ParseControlUrl(base_url));
  auto connection = std::make_unique<Connection>();
  connection->client = std::make_unique<httplib::Client>(endpoint.host, endpoint.port);
  httplib::Client& client = *connection->client;
  client.set_connection_timeout(std::chrono::milliseconds(timeouts_.connect_ms));
  client.set_read_timeout(std::chrono::milliseconds(timeouts_.first_byte_ms));
  client.set_write_timeout(std::chrono::milliseconds(timeouts_.connect_ms));
  client.set_keep_alive(true);
  // The request goes out as headers then body: without this the body waits
  // for the engine's ACK of the headers.
  client.set_tcp_nodelay(true);
  return connection;
}

void UpstreamConnections::Keep(const std::string& base_url,
                               std::unique_ptr<Connection> connection) {
  connection->idle_since = Clock::now();
  const Clock::time_point oldest = connection->idle_since - kMaxIdle;
  MutexLock lock(mu_);
  std::deque<std::unique_ptr<Connection>>& idle = idle_[base_url];
  while (!idle.empty() && (idle.size() >= kMaxIdlePerEngine || idle.front()->idle_since < oldest)) {
    idle.pop_front();
  }
  idle.push_back(std::move(connection));
}

bool UpstreamConnections::TimedOut(Clock::time_point sent) const {
  return Clock::now() - sent >= std::chrono::milliseconds(timeouts_.first_byte_ms);
}

bool UpstreamConnections::ClosedWhileKept(bool kept, int attempt, Clock::time_point sent) const {
  return kept && attempt == 0 && !TimedOut(sent);
}

void UpstreamConnections::CloseIdle() {
  MutexLock lock(mu_);
  idle_.clear();
}

Result<std::string> UpstreamConnections::PostForAnswer(const std::string& base_url,
                                                       const std::string& path,
                                                       std::string_view body,
                                                       std::string_view what) {
  for (int attempt = 0;; ++attempt) {
    bool kept = false;
    KVGOV_ASSIGN_OR_RETURN(std::unique_ptr<Connection> connection, Take(base_url, &kept));
    std::string answer;
    bool too_long = false;
    httplib::Request request;
    request.method = "POST";
    request.path = path;
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
    const Clock::time_point sent = Clock::now();
    httplib::Result result = connection->client->send(request);
    if (too_long) {
      return Status::ResourceExhausted(std::string(what) + ": the engine's answer is longer than " +
                                       std::to_string(kMaxTokenizeAnswerBytes) + " bytes");
    }
    if (!result) {
      if (ClosedWhileKept(kept, attempt, sent)) continue;
      return Status::Unavailable(FailedAt(what, base_url, path) + ": " +
                                 RequestErrorText(result.error()));
    }
    Keep(base_url, std::move(connection));
    if (result->status != 200) {
      return Status::Unavailable(FailedAt(what, base_url, path) + ": HTTP " +
                                 std::to_string(result->status) + ": " + Excerpt(answer));
    }
    return answer;
  }
}

Result<std::vector<int64_t>> UpstreamConnections::Tokenize(const std::string& base_url,
                                                           ingest::EngineKind kind,
                                                           std::string_view body) {
  KVGOV_ASSIGN_OR_RETURN(
      const std::string answer,
      PostForAnswer(base_url, std::string(TokenizePath(kind)), body, "tokenize"));
  JsonLimits limits;
  limits.max_bytes = kMaxTokenizeAnswerBytes;
  limits.max_array_items = kMaxTokenizeAnswerBytes;
  return DecodeTokenizeAnswerJson(answer, limits);
}

Result<std::string> UpstreamConnections::Detokenize(const std::string& base_url,
                                                    ingest::EngineKind kind,
                                                    std::string_view body) {
  KVGOV_ASSIGN_OR_RETURN(
      const std::string answer,
      PostForAnswer(base_url, std::string(DetokenizePath(kind)), body, "detokenize"));
  JsonLimits limits;
  limits.max_bytes = kMaxTokenizeAnswerBytes;
  return DecodeDetokenizeAnswerJson(answer, limits);
}

Status UpstreamConnections::Forward(
    const std::string& base_url, const std::string& path, const std::string& body,
    const std::function<bool(int status, std::string_view content_type)>& on_head,
    const std::function<bool(std::string_view chunk)>& on_chunk, UpstreamAnswer* answer,
    std::string_view request_id) {
  for (int attempt = 0;; ++attempt) {
    *answer = {};
    bool kept = false;
    KVGOV_ASSIGN_OR_RETURN(std::unique_ptr<Connection> connection, Take(base_url, &kept));
    bool stopped = false;
    httplib::Request request;
    request.method = "POST";
    request.path = path;
    request.body = body;
    request.set_header("Content-Type", "application/json");
    if (!request_id.empty()) request.set_header("X-Request-Id", std::string(request_id));
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
    const Clock::time_point sent = Clock::now();
    httplib::Result result = connection->client->send(request);
    // A connection left mid-answer is dropped with this one; only one read
    // to its end is kept.
    if (stopped) return Status::Cancelled("the gateway stopped reading");
    if (result) {
      Keep(base_url, std::move(connection));
      return Status::Ok();
    }
    const httplib::Error error = result.error();
    if (!answer->head_seen && ClosedWhileKept(kept, attempt, sent)) continue;
    const std::string what = FailedAt(path, base_url) + ": " + RequestErrorText(error);
    if (error == httplib::Error::Read && !answer->head_seen && TimedOut(sent)) {
      return Status::DeadlineExceeded(what + " (no answer within " +
                                      std::to_string(timeouts_.first_byte_ms) + " ms)");
    }
    return Status::Unavailable(what);
  }
}

}  // namespace kvgov::connectors
