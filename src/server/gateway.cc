#include "server/gateway.h"

#include <httplib.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "kvgov/auth/entropy.h"
#include "kvgov/codec/gateway_api.h"
#include "kvgov/connectors/openai_upstream.h"
#include "server/daemon.h"

namespace kvgov::server {
namespace {

void SendOpenAIError(httplib::Response& response, int status, std::string_view message,
                     std::string_view type, std::string_view param, std::string_view code) {
  response.status = status;
  response.set_content(EncodeOpenAIErrorJson(message, type, param, code), "application/json");
}

// The caller, with the infer role; otherwise the 401 or 403 is answered.
std::optional<auth::Principal> AdmitInfer(Daemon& daemon, const httplib::Request& request,
                                          httplib::Response& response) {
  Result<auth::Principal> caller =
      daemon.auth->Authorize(request.get_header_value("Authorization"), auth::Role::kInfer);
  if (caller.ok()) return *caller;
  if (caller.status().code() == StatusCode::kUnauthenticated) {
    response.set_header("WWW-Authenticate", "Bearer realm=\"kvgov\"");
    SendOpenAIError(response, 401, caller.status().message(), "authentication_error", "",
                    "invalid_api_key");
  } else {
    SendOpenAIError(response, 403, caller.status().message(), "permission_error", "",
                    "forbidden");
  }
  return std::nullopt;
}

// "$.prompt[1]: ..." names the field "prompt".
std::string ParamOf(std::string_view message) {
  if (!message.starts_with("$.")) return "";
  const size_t end = message.find_first_of(".[: ", 2);
  return std::string(message.substr(2, end == std::string_view::npos ? end : end - 2));
}

// The engine URL the gateway forwards to.
std::string OpenAIUrl(const Daemon& daemon, std::string_view worker) {
  const std::string_view engine_id = worker.substr(0, worker.find('@'));
  for (const ingest::EngineSpec& engine : daemon.options.engines) {
    if (engine.id == engine_id) return engine.openai.empty() ? engine.control : engine.openai;
  }
  return "";
}

// Workers of `model` the gateway may send to: live, healthy, not draining,
// with an engine URL. The router still decides among them.
std::vector<std::string> ServingWorkers(const Daemon& daemon, std::string_view model) {
  std::vector<std::string> out;
  for (const index::WorkerResidency& worker : daemon.index.Workers()) {
    if (worker.model != model || worker.state != index::WorkerState::kLive) continue;
    if (std::optional<router::WorkerStatus> status = daemon.status.Get(worker.id)) {
      if ((status->probed && !status->healthy) || status->draining) continue;
    }
    if (OpenAIUrl(daemon, worker.id).empty()) continue;
    out.push_back(worker.id);
  }
  return out;
}

// One forwarded request's answer on its way from the engine's connection
// (the upstream thread) to the client's (the handler thread).
//
// Thread-safe: one mutex guards everything.
class Relay {
 public:
  // Upstream side.
  bool Head(int status, std::string_view content_type) {
    std::lock_guard lock(mu_);
    head_ = true;
    status_ = status;
    content_type_ = std::string(content_type);
    changed_.notify_all();
    return !cancelled_;
  }
  bool Chunk(std::string_view chunk) {
    std::lock_guard lock(mu_);
    chunks_.emplace_back(chunk);
    changed_.notify_all();
    return !cancelled_;
  }
  void Finish(Status status) {
    std::lock_guard lock(mu_);
    finished_ = true;
    outcome_ = std::move(status);
    changed_.notify_all();
  }

  // Client side.
  void Cancel() {
    std::lock_guard lock(mu_);
    cancelled_ = true;
  }
  // Waits for the head or the end. True when the head came.
  bool WaitForHead(int* status, std::string* content_type, Status* failure) {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [this] { return head_ || finished_; });
    *status = status_;
    *content_type = content_type_;
    *failure = outcome_;
    return head_;
  }
  // Waits for chunks or the end; returns the chunks, and sets `finished`
  // and `outcome` once the body has ended.
  std::deque<std::string> Next(bool* finished, Status* outcome) {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [this] { return !chunks_.empty() || finished_; });
    std::deque<std::string> out;
    out.swap(chunks_);
    *finished = finished_;
    *outcome = outcome_;
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  bool head_ = false;
  int status_ = 0;
  std::string content_type_;
  std::deque<std::string> chunks_;
  bool finished_ = false;
  bool cancelled_ = false;
  Status outcome_;
};

// A request forwarded to one worker: the upstream thread and its relay.
// Destroying it cancels and joins.
struct Upstream {
  std::string worker;
  std::string decision_id;
  Relay relay;
  std::thread thread;

  ~Upstream() {
    relay.Cancel();
    if (thread.joinable()) thread.join();
  }
};

std::unique_ptr<Upstream> StartUpstream(const Daemon& daemon, const std::string& worker,
                                        const std::string& decision_id, const std::string& path,
                                        std::string body) {
  auto upstream = std::make_unique<Upstream>();
  upstream->worker = worker;
  upstream->decision_id = decision_id;
  Upstream* raw = upstream.get();
  const std::string url = OpenAIUrl(daemon, worker);
  const connectors::UpstreamTimeouts timeouts = daemon.options.gateway_timeouts;
  upstream->thread = std::thread([raw, url, path, body = std::move(body), timeouts]() mutable {
    connectors::UpstreamAnswer answer;
    Status status = connectors::Forward(
        url, path, std::move(body), timeouts,
        [raw](int code, std::string_view type) { return raw->relay.Head(code, type); },
        [raw](std::string_view chunk) { return raw->relay.Chunk(chunk); }, &answer);
    raw->relay.Finish(std::move(status));
  });
  return upstream;
}

class GatewayHandler {
 public:
  GatewayHandler(Daemon& daemon, GatewayEndpoint endpoint, std::string path)
      : daemon_(daemon), endpoint_(endpoint), path_(std::move(path)) {}

  void operator()(const httplib::Request& request, httplib::Response& response) const {
    std::optional<auth::Principal> caller = AdmitInfer(daemon_, request, response);
    if (!caller) return;
    JsonLimits limits;
    limits.max_bytes = daemon_.options.max_body_bytes;
    Result<GatewayRequest> decoded = DecodeGatewayRequestJson(endpoint_, request.body, limits);
    if (!decoded.ok()) {
      const bool too_large = decoded.status().code() == StatusCode::kResourceExhausted;
      return SendOpenAIError(response, too_large ? 413 : 400, decoded.status().message(),
                             "invalid_request_error", ParamOf(decoded.status().message()),
                             too_large ? "request_too_large" : "invalid_value");
    }
    std::vector<std::string> serving = ServingWorkers(daemon_, decoded->model);
    if (serving.empty()) {
      const std::vector<index::WorkerResidency> workers = daemon_.index.Workers();
      const bool known = std::any_of(workers.begin(), workers.end(), [&](const auto& w) {
        return w.model == decoded->model;
      });
      if (!known) {
        return SendOpenAIError(response, 404,
                               "the model '" + decoded->model + "' does not exist",
                               "invalid_request_error", "model", "model_not_found");
      }
      return SendOpenAIError(response, 503,
                             "no worker of '" + decoded->model +
                                 "' is live, healthy and not draining",
                             "service_unavailable", "", "no_eligible_worker");
    }
    std::vector<int64_t> tokens = std::move(decoded->token_ids);
    if (tokens.empty()) {
      // The engine's own tokenizer and chat template, on a worker that may
      // serve the request; a second one when the first cannot answer.
      Result<std::vector<int64_t>> tokenized = Status::Unavailable("no worker tried");
      for (size_t i = 0; i < serving.size() && i < 2; ++i) {
        tokenized = connectors::Tokenize(OpenAIUrl(daemon_, serving[i]), decoded->tokenize_body,
                                         daemon_.options.gateway_timeouts);
        if (tokenized.ok() || tokenized.status().code() != StatusCode::kUnavailable) break;
      }
      if (!tokenized.ok()) {
        return SendOpenAIError(response, 502,
                               "the engine could not tokenize the request: " +
                                   tokenized.status().message(),
                               "upstream_error", "", "tokenizer_unavailable");
      }
      tokens = *std::move(tokenized);
    }
    const std::string& tenant = caller->tenant;
    const std::string salt =
        tenant.empty() ? "" : router::TenantCacheSalt(daemon_.tenant_secret, tenant);
    const std::string body = salt.empty() ? request.body : WithCacheSalt(request.body, salt);
    router::RouteRequest route{decoded->model, tenant, std::move(tokens), "", serving};

    // One try, and one more on the next candidate when the first engine
    // gave no byte or a 5xx head.
    std::unique_ptr<Upstream> upstream;
    int status = 0;
    std::string content_type;
    for (int attempt = 0; attempt < 2; ++attempt) {
      Result<std::string> id = auth::RandomHexId();
      if (!id.ok()) {
        return SendOpenAIError(response, 500, id.status().message(), "server_error", "",
                               "internal");
      }
      Result<router::RouteDecision> decision =
          daemon_.router->Route(route, salt, *id, WallClockMillis());
      if (!decision.ok()) {
        return SendOpenAIError(response, 400, decision.status().message(),
                               "invalid_request_error", "", "invalid_value");
      }
      if (decision->worker.empty()) {
        std::string reasons;
        for (const router::Candidate& c : decision->candidates) {
          reasons += (reasons.empty() ? "" : ", ") + c.worker + ": " + c.reason;
        }
        return SendOpenAIError(response, 503, "no eligible worker (" + reasons + ")",
                               "service_unavailable", "", "no_eligible_worker");
      }
      upstream = StartUpstream(daemon_, decision->worker, decision->decision_id, path_, body);
      Status failure;
      const bool head = upstream->relay.WaitForHead(&status, &content_type, &failure);
      if (head && status < 500) break;
      // Nothing reached the client: try the next candidate, without this one.
      (void)daemon_.router->Done(upstream->decision_id);
      std::erase(route.workers, upstream->worker);
      const bool last = attempt == 1 || route.workers.empty();
      if (last) {
        if (head) break;  // the engine's own 5xx answer goes to the client
        upstream.reset();
        const bool timed_out = failure.code() == StatusCode::kDeadlineExceeded;
        return SendOpenAIError(response, timed_out ? 504 : 502, failure.message(),
                               "upstream_error", "",
                               timed_out ? "upstream_timeout" : "upstream_unreachable");
      }
      if (daemon_.gateway_retries != nullptr) daemon_.gateway_retries->WithLabels({})->Inc();
      upstream.reset();
    }
    PassOn(response, std::move(upstream), status, content_type, decoded->stream);
  }

 private:
  // Passes the engine's answer on: chunk by chunk for a stream, whole
  // otherwise. The decision's load is released when the answer ends.
  void PassOn(httplib::Response& response, std::unique_ptr<Upstream> upstream, int status,
             const std::string& content_type, bool stream) const {
    Daemon* daemon = &daemon_;
    response.status = status;
    if (!stream) {
      std::string body;
      bool finished = false;
      Status outcome;
      while (!finished) {
        for (std::string& chunk : upstream->relay.Next(&finished, &outcome)) body += chunk;
      }
      (void)daemon->router->Done(upstream->decision_id);
      if (!outcome.ok()) {
        return SendOpenAIError(response, 502,
                               "the engine's answer broke off: " + outcome.message(),
                               "upstream_error", "", "upstream_unreachable");
      }
      response.set_content(std::move(body),
                           content_type.empty() ? "application/json" : content_type);
      return;
    }
    std::shared_ptr<Upstream> shared(std::move(upstream));
    response.set_chunked_content_provider(
        content_type.empty() ? "text/event-stream" : content_type,
        [shared](size_t, httplib::DataSink& sink) {
          bool finished = false;
          Status outcome;
          for (const std::string& chunk : shared->relay.Next(&finished, &outcome)) {
            // The client went away: stop reading, which closes the engine's
            // connection so it aborts the request.
            if (!sink.write(chunk.data(), chunk.size())) return false;
          }
          if (!finished) return true;
          if (!outcome.ok()) {
            const std::string event = EncodeOpenAIErrorEvent(
                "the engine's answer broke off: " + outcome.message());
            sink.write(event.data(), event.size());
          }
          sink.done();
          return true;
        },
        [shared, daemon](bool) {
          shared->relay.Cancel();
          (void)daemon->router->Done(shared->decision_id);
        });
  }

  Daemon& daemon_;
  const GatewayEndpoint endpoint_;
  const std::string path_;
};

}  // namespace

void RegisterGateway(httplib::Server& http, Daemon& daemon) {
  http.Get("/health", [](const httplib::Request&, httplib::Response& response) {
    response.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/v1/models", [&daemon](const httplib::Request& request, httplib::Response& response) {
    if (!AdmitInfer(daemon, request, response)) return;
    std::set<std::string> models;
    for (const index::WorkerResidency& worker : daemon.index.Workers()) {
      if (!ServingWorkers(daemon, worker.model).empty()) models.insert(worker.model);
    }
    const std::vector<std::string> list(models.begin(), models.end());
    response.set_content(EncodeModelsJson(list), "application/json");
  });
  http.Post("/v1/completions",
            GatewayHandler(daemon, GatewayEndpoint::kCompletions, "/v1/completions"));
  http.Post("/v1/chat/completions",
            GatewayHandler(daemon, GatewayEndpoint::kChatCompletions, "/v1/chat/completions"));
}

}  // namespace kvgov::server
