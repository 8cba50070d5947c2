#include "server/gateway.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <optional>
#include <set>

#include "kvgov/auth/entropy.h"
#include "kvgov/auth/tokens.h"
#include "kvgov/clock/clock.h"
#include "kvgov/codec/gateway_api.h"
#include "kvgov/connectors/openai_upstream.h"
#include "server/access.h"
#include "server/daemon.h"
#include "server/gateway_upstream.h"
#include "server/handoff.h"
#include "server/http_api.h"
#include "server/prefix_diagnostics.h"
#include "server/salting.h"

namespace kvgov::server {
namespace {

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
      std::set<std::string> served;
      for (const index::WorkerResidency& worker : daemon_.index.Workers()) {
        served.insert(worker.model);
      }
      if (!served.contains(decoded->model)) {
        std::string message = "the model '" + decoded->model + "' does not exist; ";
        if (served.empty()) {
          message += "no engine is configured (serve --engine)";
        } else {
          message += "this gateway serves ";
          for (const std::string& model : served) {
            if (&model != &*served.begin()) message += ", ";
            message += "'" + model + "'";
          }
        }
        return SendOpenAIError(response, 404, message, "invalid_request_error", "model",
                               "model_not_found");
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
      std::string tokenizer;  // the engine whose answer is the one reported
      for (size_t i = 0; i < serving.size() && i < 2; ++i) {
        // A serving worker's engine has a URL (MayServe).
        const ingest::EngineSpec& engine = *EngineOf(daemon_, serving[i]);
        tokenizer = engine.id;
        tokenized = daemon_.upstreams->Tokenize(OpenAIUrl(engine), engine.kind,
                                                decoded->tokenize_body);
        if (tokenized.ok() || tokenized.status().code() != StatusCode::kUnavailable) break;
      }
      if (!tokenized.ok()) {
        daemon_.gateway_metrics.tokenize_failures->WithLabels({decoded->model})->Inc();
        return SendOpenAIError(response, 502,
                               "engine '" + tokenizer + "' could not tokenize the request: " +
                                   tokenized.status().message(),
                               "upstream_error", "", "tokenizer_unavailable");
      }
      tokens = *std::move(tokenized);
    }
    const int64_t routed_tokens = static_cast<int64_t>(tokens.size());
    ObservePrompt(daemon_, decoded->model, *tenant, tokens);
    router::RouteRequest route{decoded->model, *tenant, std::move(tokens), "", serving};
    Result<RequestSalt> salted = SaltRoute(daemon_, route);
    if (!salted.ok()) {
      return SendOpenAIError(response, 503, salted.status().message(), "service_unavailable", "",
                             "quarantine_unresolved");
    }
    const std::string& salt = salted->salt;
    const std::string body = ForwardedBody(request.body, salt, decoded->ask_usage);
    if (ServedDisaggregated(daemon_, serving)) {
      HandoffRequest handoff{.path = path_,
                             .model = decoded->model,
                             .tenant = *tenant,
                             .salt = salt,
                             .diverted = salted->diverted(),
                             .tokens = std::move(route.token_ids),
                             .body = body,
                             .stream = decoded->stream,
                             .strip_usage = decoded->ask_usage,
                             .prefill_pool = {},
                             .decode_pool = {}};
      for (const std::string& worker : serving) {
        const ingest::EngineRole role = RoleOf(daemon_, worker);
        if (role != ingest::EngineRole::kDecode) handoff.prefill_pool.push_back(worker);
        if (role != ingest::EngineRole::kPrefill) handoff.decode_pool.push_back(worker);
      }
      if (handoff.prefill_pool.empty() || handoff.decode_pool.empty()) {
        const char* missing = handoff.prefill_pool.empty() ? "prefill" : "decode";
        return SendOpenAIError(response, 503,
                               "no " + std::string(missing) + " worker of '" + decoded->model +
                                   "' is live, healthy and not draining",
                               "service_unavailable", "", "no_eligible_worker");
      }
      return ServeHandoff(daemon_, std::move(handoff), response);
    }

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
          daemon_.router->Route(route, salt, *id, clock::NowMillis());
      if (!decision.ok()) {
        return SendOpenAIError(response, 400, decision.status().message(),
                               "invalid_request_error", "", "invalid_value");
      }
      if (decision->worker.empty()) {
        return SendOpenAIError(response, 503,
                               "no eligible worker (" + IneligibleReasons(*decision) + ")",
                               "service_unavailable", "", "no_eligible_worker");
      }
      MarkDiverted(*salted, *decision);
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
      const bool head = upstream->relay->WaitForHead(&status, &content_type, &failure);
      if (head && status < 500) break;
      std::erase(route.workers, upstream->worker);
      const bool last = attempt == 1 || route.workers.empty();
      if (last && head) break;  // the engine's own 5xx answer goes to the client
      // Nothing reached the client: release this try and try the next
      // candidate, without this one.
      (void)daemon_.router->Done(upstream->decision_id);
      if (last) {
        const std::string failed_worker = upstream->worker;
        upstream.reset();
        const bool timed_out = failure.code() == StatusCode::kDeadlineExceeded;
        return SendOpenAIError(response, timed_out ? 504 : 502,
                               "engine '" + failed_worker + "': " + failure.message(),
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
      const Status outcome = ReadWholeBody(*upstream->relay, &body);
      (void)daemon->router->Done(upstream->decision_id);
      // A 200 must be an answer the client's SDK can read: a JSON object.
      Result<std::optional<EngineUsage>> answer =
          outcome.ok() && status == 200 ? DecodeWholeAnswer(body, UsageLimits())
                                        : Result<std::optional<EngineUsage>>(std::nullopt);
      Account(*daemon, upstream->worker, upstream->decision_id, upstream->prediction,
              answer.ok() ? *answer : std::nullopt);
      if (!outcome.ok()) {
        return SendOpenAIError(response, 502,
                               "engine '" + upstream->worker +
                                   "': the answer broke off: " + outcome.message(),
                               "upstream_error", "", "upstream_unreachable");
      }
      if (!answer.ok()) {
        return SendOpenAIError(response, 502,
                               "engine '" + upstream->worker + "' answered 200 with " +
                                   (content_type.empty() ? "no content type" : content_type) +
                                   " that is not an OpenAI answer: " + answer.status().message(),
                               "upstream_error", "", "upstream_malformed_answer");
      }
      response.set_content(std::move(body),
                           content_type.empty() ? "application/json" : content_type);
      return;
    }
    auto state = std::make_shared<StreamPump>();
    state->upstream = std::move(upstream);
    state->strip_usage = strip_usage;
    state->on_first_event = [daemon, id = state->upstream->decision_id] {
      (void)daemon->router->Prefilled(id);
    };
    response.set_chunked_content_provider(
        content_type.empty() ? "text/event-stream" : content_type,
        [state](size_t, httplib::DataSink& sink) { return state->Pump(sink); },
        [state, daemon](bool) {
          Upstream& forwarded = *state->upstream;
          forwarded.relay->Cancel();
          (void)daemon->router->Done(forwarded.decision_id);
          Account(*daemon, forwarded.worker, forwarded.decision_id, forwarded.prediction,
                  state->usage);
        });
  }

  Daemon& daemon_;
  const GatewayEndpoint endpoint_;
  const std::string path_;
};

Status NoEngineFor(std::string_view model) {
  return Status::NotFound("model: no worker with an engine URL serves '" + std::string(model) +
                          "'");
}

// `call(engine)` on the engine of a worker serving `model`; on a second
// engine only when the first could not be reached. NotFound when no worker
// with an engine URL serves the model.
template <typename T, typename Call>
Result<T> OnAnEngineOf(Daemon& daemon, std::string_view model, Call call) {
  Result<T> answer = NoEngineFor(model);
  for (const index::WorkerResidency& worker : daemon.index.Workers()) {
    const ingest::EngineSpec* engine = worker.model == model ? EngineOf(daemon, worker.id) : nullptr;
    if (engine == nullptr || OpenAIUrl(*engine).empty()) continue;
    answer = call(*engine);
    if (answer.ok() || answer.status().code() != StatusCode::kUnavailable) break;
  }
  return answer;
}

// `body` POSTed to the tokenizer of the engine of a worker serving `model`.
Result<std::vector<int64_t>> TokenizeOnAnEngineOf(Daemon& daemon, std::string_view model,
                                                  std::string_view body) {
  return OnAnEngineOf<std::vector<int64_t>>(daemon, model, [&](const ingest::EngineSpec& engine) {
    return daemon.upstreams->Tokenize(OpenAIUrl(engine), engine.kind, body);
  });
}

}  // namespace

Result<std::string> DetokenizeOnAnEngineOf(Daemon& daemon, std::string_view model,
                                           std::span<const int64_t> tokens) {
  const std::string body =
      nlohmann::json{{"model", model}, {"tokens", tokens}}.dump(
          -1, ' ', false, nlohmann::json::error_handler_t::replace);
  return OnAnEngineOf<std::string>(daemon, model, [&](const ingest::EngineSpec& engine) {
    return daemon.upstreams->Detokenize(OpenAIUrl(engine), engine.kind, body);
  });
}

Result<std::vector<int64_t>> TokenizePrompt(Daemon& daemon, std::string_view model,
                                            std::string_view prompt) {
  const std::string body = nlohmann::json{{"model", model}, {"prompt", prompt}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  return TokenizeOnAnEngineOf(daemon, model, body);
}

Result<std::vector<int64_t>> TokenizeMessages(Daemon& daemon, std::string_view model,
                                              std::string_view messages) {
  // No worker serves "": NotFound, as for a prompt, not the gateway
  // decoder's refusal of an empty model.
  if (model.empty()) return NoEngineFor(model);
  // The chat completion these messages would be, decoded as the gateway
  // decodes one, so the engine gets the very /tokenize body (chat template
  // and generation prompt included) a gateway request would.
  const std::string chat =
      "{\"model\":" +
      nlohmann::json(model).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
      ",\"messages\":" + std::string(messages) + "}";
  return TokenizeChat(daemon, model, chat);
}

Result<std::vector<int64_t>> TokenizeChat(Daemon& daemon, std::string_view model,
                                          std::string_view chat) {
  if (model.empty()) return NoEngineFor(model);
  KVGOV_ASSIGN_OR_RETURN(
      const GatewayRequest request,
      DecodeGatewayRequestJson(GatewayEndpoint::kChatCompletions, chat, BodyLimits(daemon)));
  return TokenizeOnAnEngineOf(daemon, model, request.tokenize_body);
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
