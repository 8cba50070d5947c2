#include "server/gateway.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "kvgov/auth/entropy.h"
#include "kvgov/auth/tokens.h"
#include "kvgov/codec/gateway_api.h"
#include "kvgov/connectors/openai_upstream.h"
#include "server/access.h"
#include "server/daemon.h"
#include "server/http_api.h"
#include "server/relay_threads.h"

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

// An answer's usage is read with the API's limits: its choices may be as
// long as the answer.
JsonLimits UsageLimits() {
  JsonLimits limits;
  limits.max_bytes = size_t{64} << 20;
  return limits;
}

// The header a fleet-wide caller (no token, or a token bound to no tenant)
// names the tenant it sends for, as /v1/route's "tenant" field does: a
// front end that authenticates end users itself.
constexpr const char* kTenantHeader = "X-Kvgov-Tenant";

// The tenant the request is served for: the caller's, or the one the
// header names when the caller may name one. Otherwise the 400 or 403 is
// answered.
std::optional<std::string> TenantOf(const auth::Principal& caller,
                                    const httplib::Request& request,
                                    httplib::Response& response) {
  std::string tenant = request.get_header_value(kTenantHeader);
  if (Status valid = auth::CheckTenant(tenant); !valid.ok()) {
    SendOpenAIError(response, 400, std::string(kTenantHeader) + ": " + valid.message(),
                    "invalid_request_error", "", "invalid_value");
    return std::nullopt;
  }
  if (Status fits = FitToCaller(caller, /*names_span_by_tokens=*/true, tenant); !fits.ok()) {
    SendOpenAIError(response, 403, fits.message(), "permission_error", "", "forbidden");
    return std::nullopt;
  }
  return tenant;
}

// "$.prompt[1]: ..." names the field "prompt".
std::string ParamOf(std::string_view message) {
  if (!message.starts_with("$.")) return "";
  const size_t end = message.find_first_of(".[: ", 2);
  return std::string(message.substr(2, end == std::string_view::npos ? end : end - 2));
}

// The engine a worker ("id" or "id@dp_rank") belongs to; null for a worker
// no --engine names (one that only reports over HTTP).
const ingest::EngineSpec* EngineOf(const Daemon& daemon, std::string_view worker) {
  const std::string_view engine_id = worker.substr(0, worker.find('@'));
  for (const ingest::EngineSpec& engine : daemon.options.engines) {
    if (engine.id == engine_id) return &engine;
  }
  return nullptr;
}

// The engine URL the gateway forwards to.
std::string OpenAIUrl(const ingest::EngineSpec& engine) {
  return engine.openai.empty() ? engine.control : engine.openai;
}
std::string OpenAIUrl(const Daemon& daemon, std::string_view worker) {
  const ingest::EngineSpec* engine = EngineOf(daemon, worker);
  return engine == nullptr ? "" : OpenAIUrl(*engine);
}

// A worker the gateway may send to: live, healthy, not draining, with an
// engine URL. The router still decides among them.
bool MayServe(const Daemon& daemon, const index::WorkerResidency& worker) {
  if (worker.state != index::WorkerState::kLive) return false;
  if (std::optional<router::WorkerStatus> status = daemon.status.Get(worker.id)) {
    if ((status->probed && !status->healthy) || status->draining) return false;
  }
  return !OpenAIUrl(daemon, worker.id).empty();
}

std::vector<std::string> ServingWorkers(const Daemon& daemon, std::string_view model) {
  std::vector<std::string> out;
  for (const index::WorkerResidency& worker : daemon.index.Workers()) {
    if (worker.model == model && MayServe(daemon, worker)) out.push_back(worker.id);
  }
  return out;
}

// One forwarded request's answer on its way from the engine's connection
// (the upstream thread) to the client's (the handler thread). At most
// kMaxQueuedBytes wait in it: a client slower than its engine slows the
// engine's connection down instead of growing the gateway's memory.
//
// Thread-safe: one mutex guards everything.
class Relay {
  static constexpr size_t kMaxQueuedBytes = size_t{4} << 20;

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
    std::unique_lock lock(mu_);
    drained_.wait(lock, [this] { return queued_bytes_ < kMaxQueuedBytes || cancelled_; });
    chunks_.emplace_back(chunk);
    queued_bytes_ += chunk.size();
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
  void WaitFinished() {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [this] { return finished_; });
  }
  void Cancel() {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    drained_.notify_all();
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
    queued_bytes_ = 0;
    drained_.notify_all();
    *finished = finished_;
    *outcome = outcome_;
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;  // head, chunk or end arrived
  std::condition_variable drained_;  // the client side took the chunks, or cancelled
  size_t queued_bytes_ = 0;
  bool head_ = false;
  int status_ = 0;
  std::string content_type_;
  std::deque<std::string> chunks_;
  bool finished_ = false;
  bool cancelled_ = false;
  Status outcome_;
};

// What the gateway predicted for a request, to hold against what the
// engine reports.
struct Prediction {
  std::string model;
  std::string tenant;
  int64_t routed_tokens = 0;
  int64_t predicted_tokens = 0;  // the decision's credited overlap, in tokens
  int64_t block_size = 1;
};

// The engine's usage against the prediction: the engine's cached tokens are
// the ride_engine source's saving (never the prediction), the prediction
// scored by blocks, the prompt's length checked against the routed tokens.
void Account(Daemon& daemon, const std::string& worker, const std::string& decision_id,
             const Prediction& prediction, const std::optional<EngineUsage>& usage) {
  GatewayMetrics& m = daemon.gateway_metrics;
  if (!usage) {
    m.unaccounted->WithLabels({})->Inc();
    return;
  }
  if (usage->prompt_tokens != prediction.routed_tokens) {
    m.tokenize_mismatches->WithLabels({prediction.model})->Inc();
  }
  Entry entry = RouteSavingEntry(decision_id, worker, usage->cached_tokens);
  entry.labels["model"] = prediction.model;
  if (!prediction.tenant.empty()) entry.labels["tenant"] = prediction.tenant;
  daemon.accounting->Record(entry);
  m.predicted_tokens->WithLabels({worker})->Add(static_cast<double>(prediction.predicted_tokens));
  m.cached_tokens->WithLabels({worker})->Add(static_cast<double>(usage->cached_tokens));
  const router::PredictionOutcome outcome = daemon.predictions.Record(
      worker, prediction.predicted_tokens, usage->cached_tokens, prediction.block_size);
  m.predictions->WithLabels({worker, std::string(router::ToString(outcome))})->Inc();
}

// A request forwarded to one worker, its answer relayed from a thread of
// the daemon's RelayThreads. Destroying it cancels and waits for that
// thread to let go of it.
struct Upstream {
  std::string worker;
  std::string decision_id;
  Prediction prediction;
  Relay relay;

  ~Upstream() {
    relay.Cancel();
    relay.WaitFinished();
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
  connectors::UpstreamConnections* upstreams = daemon.upstreams.get();
  daemon.relay_threads->Run([raw, url, path, body = std::move(body), upstreams] {
    connectors::UpstreamAnswer answer;
    Status status = upstreams->Forward(
        url, path, body,
        [raw](int code, std::string_view type) { return raw->relay.Head(code, type); },
        [raw](std::string_view chunk) { return raw->relay.Chunk(chunk); }, &answer);
    // The last use of `raw`: once finished, the client side may destroy it.
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
    const std::optional<std::string> tenant = TenantOf(*caller, request, response);
    if (!tenant) return;
    Result<GatewayRequest> decoded =
        DecodeGatewayRequestJson(endpoint_, request.body, BodyLimits(daemon_));
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
    if (const uint64_t limit = daemon_.options.gateway_max_in_flight; limit > 0) {
      std::erase_if(serving, [&](const std::string& worker) {
        return daemon_.router->LoadOf(worker).in_flight_requests >= limit;
      });
      if (serving.empty()) {
        response.set_header("Retry-After", "1");
        return SendOpenAIError(response, 429,
                               "every worker of '" + decoded->model + "' has " +
                                   std::to_string(limit) + " requests in flight; retry shortly",
                               "rate_limit_error", "", "all_workers_busy");
      }
    }
    std::vector<int64_t> tokens = std::move(decoded->token_ids);
    if (tokens.empty()) {
      // The engine's own tokenizer and chat template, on a worker that may
      // serve the request; a second one when the first cannot answer.
      Result<std::vector<int64_t>> tokenized = Status::Unavailable("no worker tried");
      for (size_t i = 0; i < serving.size() && i < 2; ++i) {
        // A serving worker's engine has a URL (MayServe).
        const ingest::EngineSpec& engine = *EngineOf(daemon_, serving[i]);
        tokenized = daemon_.upstreams->Tokenize(OpenAIUrl(engine), engine.kind,
                                                decoded->tokenize_body);
        if (tokenized.ok() || tokenized.status().code() != StatusCode::kUnavailable) break;
      }
      if (!tokenized.ok()) {
        daemon_.gateway_metrics.tokenize_failures->WithLabels({decoded->model})->Inc();
        return SendOpenAIError(response, 502,
                               "the engine could not tokenize the request: " +
                                   tokenized.status().message(),
                               "upstream_error", "", "tokenizer_unavailable");
      }
      tokens = *std::move(tokenized);
    }
    const std::string salt =
        tenant->empty() ? "" : router::TenantCacheSalt(daemon_.tenant_secret, *tenant);
    const std::string body = ForwardedBody(request.body, salt, decoded->ask_usage);
    const int64_t routed_tokens = static_cast<int64_t>(tokens.size());
    router::RouteRequest route{decoded->model, *tenant, std::move(tokens), "", serving};

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
      daemon_.tenants_seen.Note(*tenant);
      ExpectSaltedBlocks(daemon_, route, salt, *decision);
      daemon_.route_totals.Count(*decision);
      upstream = StartUpstream(daemon_, decision->worker, decision->decision_id, path_, body);
      const std::optional<index::WorkerResidency> residency =
          daemon_.index.Worker(decision->worker);
      const int64_t block_size = residency ? std::max<int64_t>(1, residency->block_size) : 1;
      upstream->prediction = {decoded->model, *tenant, routed_tokens,
                              static_cast<int64_t>(decision->overlap_blocks) * block_size,
                              block_size};
      Status failure;
      const bool head = upstream->relay.WaitForHead(&status, &content_type, &failure);
      if (head && status < 500) break;
      std::erase(route.workers, upstream->worker);
      const bool last = attempt == 1 || route.workers.empty();
      if (last && head) break;  // the engine's own 5xx answer goes to the client
      // Nothing reached the client: release this try and try the next
      // candidate, without this one.
      (void)daemon_.router->Done(upstream->decision_id);
      if (last) {
        upstream.reset();
        const bool timed_out = failure.code() == StatusCode::kDeadlineExceeded;
        return SendOpenAIError(response, timed_out ? 504 : 502, failure.message(),
                               "upstream_error", "",
                               timed_out ? "upstream_timeout" : "upstream_unreachable");
      }
      daemon_.gateway_metrics.retries->WithLabels({})->Inc();
      upstream.reset();
    }
    PassOn(response, std::move(upstream), status, content_type, decoded->stream,
           decoded->ask_usage);
  }

 private:
  // Passes the engine's answer on: chunk by chunk for a stream, whole
  // otherwise. The decision's load is released when the answer ends.
  void PassOn(httplib::Response& response, std::unique_ptr<Upstream> upstream, int status,
             const std::string& content_type, bool stream, bool strip_usage) const {
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
      Account(*daemon, upstream->worker, upstream->decision_id, upstream->prediction,
              outcome.ok() && status == 200 ? DecodeEngineUsage(body, UsageLimits())
                                            : std::nullopt);
      if (!outcome.ok()) {
        return SendOpenAIError(response, 502,
                               "the engine's answer broke off: " + outcome.message(),
                               "upstream_error", "", "upstream_unreachable");
      }
      response.set_content(std::move(body),
                           content_type.empty() ? "application/json" : content_type);
      return;
    }
    struct StreamState {
      std::unique_ptr<Upstream> upstream;
      SseSplitter splitter;
      std::optional<EngineUsage> usage;
    };
    auto state = std::make_shared<StreamState>();
    state->upstream = std::move(upstream);
    response.set_chunked_content_provider(
        content_type.empty() ? "text/event-stream" : content_type,
        [state, strip_usage](size_t, httplib::DataSink& sink) {
          bool finished = false;
          Status outcome;
          for (const std::string& chunk : state->upstream->relay.Next(&finished, &outcome)) {
            for (const std::string& event : state->splitter.Push(chunk)) {
              const std::string_view data = SseSplitter::Data(event);
              if (std::optional<EngineUsage> usage =
                      data.starts_with('{') ? DecodeEngineUsage(data, UsageLimits())
                                            : std::nullopt) {
                state->usage = usage;
                // The usage chunk the gateway asked for is not the client's.
                if (strip_usage && usage->usage_only) continue;
              }
              // The client went away: stop reading, which closes the
              // engine's connection so it aborts the request.
              if (!sink.write(event.data(), event.size())) return false;
            }
          }
          if (!finished) return true;
          const std::string rest = state->splitter.Rest();
          if (!rest.empty()) sink.write(rest.data(), rest.size());
          if (!outcome.ok()) {
            const std::string event = EncodeOpenAIErrorEvent(
                "the engine's answer broke off: " + outcome.message());
            sink.write(event.data(), event.size());
          }
          sink.done();
          return true;
        },
        [state, daemon](bool) {
          Upstream& forwarded = *state->upstream;
          forwarded.relay.Cancel();
          (void)daemon->router->Done(forwarded.decision_id);
          Account(*daemon, forwarded.worker, forwarded.decision_id, forwarded.prediction,
                  state->usage);
        });
  }

  Daemon& daemon_;
  const GatewayEndpoint endpoint_;
  const std::string path_;
};

}  // namespace

Result<std::vector<int64_t>> TokenizePrompt(Daemon& daemon, std::string_view model,
                                            std::string_view prompt) {
  const std::string body = nlohmann::json{{"model", model}, {"prompt", prompt}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  Result<std::vector<int64_t>> tokens =
      Status::NotFound("model: no worker with an engine URL serves '" + std::string(model) + "'");
  for (const index::WorkerResidency& worker : daemon.index.Workers()) {
    const ingest::EngineSpec* engine = worker.model == model ? EngineOf(daemon, worker.id) : nullptr;
    if (engine == nullptr || OpenAIUrl(*engine).empty()) continue;
    tokens = daemon.upstreams->Tokenize(OpenAIUrl(*engine), engine->kind, body);
    // A second engine only when the first could not be reached.
    if (tokens.ok() || tokens.status().code() != StatusCode::kUnavailable) break;
  }
  return tokens;
}

void RegisterGateway(httplib::Server& http, Daemon& daemon) {
  http.Get("/health", [](const httplib::Request&, httplib::Response& response) {
    response.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/v1/models", [&daemon](const httplib::Request& request, httplib::Response& response) {
    if (!AdmitInfer(daemon, request, response)) return;
    // One pass: a model is listed once one of its workers may serve.
    std::set<std::string> models;
    for (const index::WorkerResidency& worker : daemon.index.Workers()) {
      if (!models.contains(worker.model) && MayServe(daemon, worker)) {
        models.insert(worker.model);
      }
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
