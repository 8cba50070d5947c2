#include "gateway/request_path.h"

#include <utility>  // before Asio: see gateway/front_door.h

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <variant>

#include "gateway/event_relay.h"
#include "gateway/handoff.h"
#include "gateway/routes.h"
#include "gateway/upstream_pool.h"
#include "kvgov/auth/entropy.h"
#include "kvgov/auth/tokens.h"
#include "kvgov/codec/gateway_api.h"
#include "kvgov/codec/messages_api.h"
#include "kvgov/core/mutex.h"

namespace kvgov::gateway {
namespace {

// GCC 12 miscompiles temporaries in a co_await expression: a string literal
// passed straight to the awaited function, an object made by ?: or a
// lambda with captures (destroyed twice). Every awaited call below takes
// named values.
constexpr std::string_view kJson = "application/json";
constexpr std::string_view kEventStream = "text/event-stream";

// An error answer, decided before any await; written in the shape of the
// request's wire (Send).
struct ErrorAnswer {
  int status = 500;
  std::string message;
  std::string type;
  std::string param;
  std::string code;
  HeaderList headers;
};

// Which error shape a request is answered in: OpenAI's, or Anthropic's on
// the Messages endpoint.
enum class Wire { kOpenAI, kAnthropic };

Wire WireOf(GatewayEndpoint endpoint) {
  return endpoint == GatewayEndpoint::kMessages ? Wire::kAnthropic : Wire::kOpenAI;
}

asio::awaitable<void> Send(Exchange& exchange, ErrorAnswer error, Wire wire = Wire::kOpenAI) {
  std::string body = wire == Wire::kAnthropic ? EncodeMessagesErrorJson(error.status, error.message)
                                              : EncodeOpenAIErrorJson(error.message, error.type,
                                                                      error.param, error.code);
  co_await exchange.Respond(error.status, kJson, std::move(body), error.headers);
}

std::string HeaderOf(const Request& request, std::string_view name) {
  return std::string(request[name]);
}

// The caller, with `role`; otherwise the 401 or 403.
std::variant<auth::Principal, ErrorAnswer> Authorize(const Plane& plane, auth::Role role,
                                                     const Request& request, Wire wire) {
  std::string authorization = HeaderOf(request, "Authorization");
  // Anthropic's SDKs send the key as x-api-key (Authorization: Bearer only
  // with an auth token).
  if (authorization.empty() && wire == Wire::kAnthropic) {
    if (std::string key = HeaderOf(request, "x-api-key"); !key.empty()) {
      authorization = "Bearer " + key;
    }
  }
  Result<auth::Principal> caller = plane.Authorize(authorization, role);
  if (caller.ok()) return *caller;
  if (caller.status().code() == StatusCode::kUnauthenticated) {
    return ErrorAnswer{
        401, caller.status().message(), "authentication_error",
        "",  "invalid_api_key",         {{"WWW-Authenticate", "Bearer realm=\"kvgov\""}}};
  }
  return ErrorAnswer{403, caller.status().message(), "permission_error", "", "forbidden", {}};
}

// The header a fleet-wide caller (no token, or a token bound to no tenant)
// names the tenant it sends for, as /v1/route's "tenant" field does: a
// front end that authenticates end users itself.
constexpr std::string_view kTenantHeader = "X-Kvgov-Tenant";

// The tenant the request is served for: the caller's, or the one the
// header names when the caller may name one; otherwise the 400 or 403.
std::variant<std::string, ErrorAnswer> TenantOf(const auth::Principal& caller,
                                                const Request& request) {
  std::string tenant = HeaderOf(request, kTenantHeader);
  if (Status valid = auth::CheckTenant(tenant); !valid.ok()) {
    return ErrorAnswer{400,
                       std::string(kTenantHeader) + ": " + valid.message(),
                       "invalid_request_error",
                       "",
                       "invalid_value",
                       {}};
  }
  if (Status fits = FitToCaller(caller, /*names_span_by_tokens=*/true, tenant); !fits.ok()) {
    return ErrorAnswer{403, fits.message(), "permission_error", "", "forbidden", {}};
  }
  return tenant;
}

// "$.prompt[1]: ..." names the field "prompt".
std::string ParamOf(std::string_view message) {
  if (!message.starts_with("$.")) return "";
  const size_t end = message.find_first_of(".[: ", 2);
  return std::string(message.substr(2, end == std::string_view::npos ? end : end - 2));
}

// A request the gateway will serve: who for, what, and on which workers.
struct Admitted {
  std::string tenant;
  GatewayRequest decoded;
  std::vector<std::string> serving;
};

// Everything decided before an engine is asked anything: the tenant, the
// body, the workers that may serve it.
std::variant<Admitted, ErrorAnswer> Admit(const Plane& plane, const auth::Principal& caller,
                                          GatewayEndpoint endpoint, const Request& request) {
  std::variant<std::string, ErrorAnswer> tenant = TenantOf(caller, request);
  if (auto* refused = std::get_if<ErrorAnswer>(&tenant)) return std::move(*refused);
  Result<GatewayRequest> decoded =
      DecodeGatewayRequestJson(endpoint, request.body(), plane.limits().body);
  if (!decoded.ok()) {
    const bool too_large = decoded.status().code() == StatusCode::kResourceExhausted;
    return ErrorAnswer{too_large ? 413 : 400,
                       decoded.status().message(),
                       "invalid_request_error",
                       ParamOf(decoded.status().message()),
                       too_large ? "request_too_large" : "invalid_value",
                       {}};
  }
  std::vector<std::string> serving = plane.ServingWorkers(decoded->model);
  if (serving.empty()) {
    const std::set<std::string> served = plane.KnownModels();
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
      return ErrorAnswer{404, message, "invalid_request_error", "model", "model_not_found", {}};
    }
    return ErrorAnswer{503,
                       "no worker of '" + decoded->model + "' is live, healthy and not draining",
                       "service_unavailable",
                       "",
                       "no_eligible_worker",
                       {}};
  }
  if (const uint64_t limit = plane.limits().max_in_flight; limit > 0) {
    std::erase_if(serving,
                  [&](const std::string& worker) { return plane.InFlight(worker) >= limit; });
    if (serving.empty()) {
      return ErrorAnswer{429,
                         "every worker of '" + decoded->model + "' has " + std::to_string(limit) +
                             " requests in flight; retry shortly",
                         "rate_limit_error",
                         "",
                         "all_workers_busy",
                         {{"Retry-After", "1"}}};
    }
  }
  return Admitted{std::get<std::string>(std::move(tenant)), *std::move(decoded),
                  std::move(serving)};
}

// The start of an engine's error answer, for a message.
std::string Excerpt(std::string_view body) {
  constexpr size_t kMax = 200;
  return std::string(body.substr(0, kMax)) + (body.size() > kMax ? "..." : "");
}

// An engine's tokenize answer is read with these limits: a long prompt's
// token ids.
constexpr size_t kMaxTokenizeAnswerBytes = size_t{64} << 20;

// `body` POSTed to the tokenizer of `engine`, on the loop.
asio::awaitable<Result<std::vector<int64_t>>> TokenizeOn(Exchange& exchange,
                                                         const EngineAddress& engine,
                                                         std::string body) {
  const std::string& url = engine.url;
  const std::string& path = engine.tokenize_path;
  Result<UpstreamCall> call = co_await exchange.upstreams().Open(url);
  if (!call.ok()) co_return call.status();
  // The call is this frame's: its abort goes with it, however this returns.
  exchange.OnClientGone([&call] { call->Abort(); });
  struct Unwatch {
    Exchange& exchange;
    ~Unwatch() { exchange.OnClientGone(nullptr); }
  } unwatch{exchange};
  Status sent = co_await call->Send(path, std::move(body));
  if (!sent.ok()) co_return sent;
  Result<std::string> answer = co_await call->ReadAll(kMaxTokenizeAnswerBytes);
  if (!answer.ok()) co_return answer.status();
  if (call->status() != 200) {
    co_return Status::Unavailable("tokenize at " + url + path + ": HTTP " +
                                  std::to_string(call->status()) + ": " + Excerpt(*answer));
  }
  JsonLimits limits;
  limits.max_bytes = kMaxTokenizeAnswerBytes;
  limits.max_array_items = kMaxTokenizeAnswerBytes;
  co_return DecodeTokenizeAnswerJson(*answer, limits);
}

// Which worker answered each recent Responses response: a request naming
// it as previous_response_id must go there, where its conversation is
// (vLLM and SGLang keep it in the answering process only). The newest
// kKept; older ids are forgotten, and go wherever the route sends them.
//
// Thread-safe: one mutex.
class ResponseOwners {
 public:
  static constexpr size_t kKept = 65536;

  void Note(std::string id, std::string worker) {
    if (id.empty()) return;
    MutexLock lock(mu_);
    if (worker_of_.insert_or_assign(id, std::move(worker)).second) order_.push_back(std::move(id));
    while (order_.size() > kKept) {
      worker_of_.erase(order_.front());
      order_.pop_front();
    }
  }
  std::optional<std::string> Find(const std::string& id) const {
    MutexLock lock(mu_);
    const auto it = worker_of_.find(id);
    if (it == worker_of_.end()) return std::nullopt;
    return it->second;
  }

 private:
  mutable Mutex mu_;
  std::unordered_map<std::string, std::string> worker_of_ KVGOV_GUARDED_BY(mu_);
  std::deque<std::string> order_ KVGOV_GUARDED_BY(mu_);  // oldest first
};

// One request of an endpoint: tokenize (by the engine), route with the
// tenant's salt, forward, relay, account. Runs on a loop of the front
// door.
class RequestPath {
 public:
  RequestPath(Plane& plane, Exchange& exchange, GatewayEndpoint endpoint, std::string path,
              ResponseOwners& owners)
      : plane_(plane),
        exchange_(exchange),
        endpoint_(endpoint),
        path_(std::move(path)),
        owners_(owners) {}

  asio::awaitable<void> Serve(const auth::Principal& caller) {
    std::variant<Admitted, ErrorAnswer> admitted =
        Admit(plane_, caller, endpoint_, exchange_.request());
    if (auto* refused = std::get_if<ErrorAnswer>(&admitted)) {
      co_await Refuse(std::move(*refused));
      co_return;
    }
    Admitted& request = std::get<Admitted>(admitted);
    GatewayRequest& decoded = request.decoded;
    std::vector<int64_t> tokens = std::move(decoded.token_ids);
    if (tokens.empty()) {
      // The engine's own tokenizer and chat template, on a worker that may
      // serve the request; a second one when the first cannot answer.
      Result<std::vector<int64_t>> tokenized = Status::Unavailable("no worker tried");
      std::string tokenizer;  // the engine whose answer is the one reported
      for (size_t i = 0; i < request.serving.size() && i < 2; ++i) {
        const std::optional<EngineAddress> engine = plane_.EngineOf(request.serving[i]);
        if (!engine) continue;
        tokenizer = engine->engine;
        tokenized = co_await TokenizeOn(exchange_, *engine, decoded.tokenize_body);
        if (exchange_.client_gone()) co_return;
        if (tokenized.ok() || tokenized.status().code() != StatusCode::kUnavailable) break;
      }
      if (!tokenized.ok()) {
        plane_.CountTokenizeFailure(decoded.model);
        ErrorAnswer error{502,
                          "engine '" + tokenizer +
                              "' could not tokenize the request: " + tokenized.status().message(),
                          "upstream_error",
                          "",
                          "tokenizer_unavailable",
                          {}};
        co_await Refuse(std::move(error));
        co_return;
      }
      tokens = *std::move(tokenized);
    }
    const int64_t routed_tokens = static_cast<int64_t>(tokens.size());
    plane_.ObservePrompt(decoded.model, request.tenant, tokens);
    if (!decoded.previous_response_id.empty()) {
      if (std::optional<std::string> owner = owners_.Find(decoded.previous_response_id)) {
        if (std::find(request.serving.begin(), request.serving.end(), *owner) ==
            request.serving.end()) {
          ErrorAnswer error{503,
                            "previous_response_id '" + decoded.previous_response_id +
                                "' was answered by worker '" + *owner +
                                "', which is not live, healthy and undrained now; its "
                                "conversation is held there only",
                            "service_unavailable",
                            "previous_response_id",
                            "previous_response_unavailable",
                            {}};
          co_await Refuse(std::move(error));
          co_return;
        }
        request.serving = {*owner};
      }
    }
    router::RouteRequest route{decoded.model, request.tenant, std::move(tokens), "",
                               request.serving};
    Result<Salted> salted = plane_.Salt(route);
    if (!salted.ok()) {
      ErrorAnswer error{503, salted.status().message(), "service_unavailable",
                        "",  "quarantine_unresolved",   {}};
      co_await Refuse(std::move(error));
      co_return;
    }
    std::string body = ForwardedBody(exchange_.request().body(), salted->salt, decoded.ask_usage);
    if (std::optional<Plane::Pools> pools = plane_.Disaggregated(request.serving)) {
      if (endpoint_ == GatewayEndpoint::kMessages || endpoint_ == GatewayEndpoint::kResponses) {
        ErrorAnswer error{400,
                          "'" + decoded.model +
                              "' is served by prefill and decode pools, and the gateway hands "
                              "over completions and chat completions only: send "
                              "/v1/chat/completions",
                          "invalid_request_error",
                          "",
                          "invalid_value",
                          {}};
        co_await Refuse(std::move(error));
        co_return;
      }
      co_await Handoff(request, *std::move(pools), std::move(route.token_ids), *salted,
                       std::move(body));
      co_return;
    }

    // One try, and one more on the next candidate when the first engine
    // gave no byte or a 5xx head.
    std::optional<UpstreamCall> call;
    exchange_.OnClientGone([&call] {
      if (call) call->Abort();
    });
    Forwarded forwarded;
    for (int attempt = 0; attempt < 2; ++attempt) {
      Result<std::string> id = auth::RandomHexId();
      if (!id.ok()) {
        ErrorAnswer error{500, id.status().message(), "server_error", "", "internal", {}};
        co_await Refuse(std::move(error));
        co_return;
      }
      Result<router::RouteDecision> decision =
          plane_.Route(route, *salted, *id, RouteCount::kRequest);
      if (!decision.ok()) {
        ErrorAnswer error{
            400, decision.status().message(), "invalid_request_error", "", "invalid_value", {}};
        co_await Refuse(std::move(error));
        co_return;
      }
      if (decision->worker.empty()) {
        ErrorAnswer error{503,
                          "no eligible worker (" + IneligibleReasons(*decision) + ")",
                          "service_unavailable",
                          "",
                          "no_eligible_worker",
                          {}};
        co_await Refuse(std::move(error));
        co_return;
      }
      const int64_t block_size = std::max<int64_t>(1, plane_.BlockSize(decision->worker));
      forwarded = {decision->worker, decision->decision_id,
                   Prediction{decoded.model, request.tenant, routed_tokens,
                              static_cast<int64_t>(decision->overlap_blocks) * block_size,
                              block_size, decoded.previous_response_id.empty()}};

      Status failure;
      const std::optional<EngineAddress> engine = plane_.EngineOf(forwarded.worker);
      const std::string url = engine ? engine->url : std::string();
      Result<UpstreamCall> opened = co_await exchange_.upstreams().Open(url);
      if (opened.ok()) {
        call.emplace(*std::move(opened));
        if (exchange_.client_gone()) call->Abort();
        failure = co_await call->Send(path_, body);
      } else {
        failure = opened.status();
      }
      if (exchange_.client_gone()) {
        Release(forwarded, std::nullopt);
        co_return;
      }
      const bool head = failure.ok();
      if (head && call->status() < 500) break;
      std::erase(route.workers, forwarded.worker);
      const bool last = attempt == 1 || route.workers.empty();
      if (last && head) break;  // the engine's own 5xx answer goes to the client
      // Nothing reached the client: release this try and try the next
      // candidate, without this one.
      plane_.Done(forwarded.decision_id);
      call.reset();
      if (last) {
        const bool timed_out = failure.code() == StatusCode::kDeadlineExceeded;
        ErrorAnswer error{timed_out ? 504 : 502,
                          "engine '" + forwarded.worker + "': " + failure.message(),
                          "upstream_error",
                          "",
                          timed_out ? "upstream_timeout" : "upstream_unreachable",
                          {}};
        co_await Refuse(std::move(error));
        co_return;
      }
      plane_.CountRetry();
    }
    if (decoded.stream) {
      co_await Relay(*call, forwarded, decoded.ask_usage);
    } else {
      co_await PassWhole(*call, forwarded);
    }
    exchange_.OnClientGone(nullptr);
  }

 private:
  // The worker and decision a request went to, and what was predicted.
  struct Forwarded {
    std::string worker;
    std::string decision_id;
    Prediction prediction;
  };

  asio::awaitable<void> Refuse(ErrorAnswer error) {
    co_await Send(exchange_, std::move(error), WireOf(endpoint_));
  }

  // The decision's load released, what the engine reported accounted.
  void Release(const Forwarded& forwarded, const std::optional<EngineUsage>& usage) {
    plane_.Done(forwarded.decision_id);
    plane_.Account(forwarded.worker, forwarded.decision_id, forwarded.prediction, usage);
  }

  // A non-streamed answer, held whole (its usage is read from it).
  asio::awaitable<void> PassWhole(UpstreamCall& call, const Forwarded& forwarded) {
    Result<std::string> body = co_await call.ReadAll(kMaxWholeAnswerBytes);
    if (exchange_.client_gone()) {
      Release(forwarded, std::nullopt);
      co_return;
    }
    // A 200 must be an answer the client's SDK can read: a JSON object.
    Result<std::optional<EngineUsage>> answer = std::optional<EngineUsage>();
    if (body.ok() && call.status() == 200) {
      if (endpoint_ == GatewayEndpoint::kMessages) {
        answer = DecodeWholeMessagesAnswer(*body, UsageLimits());
      } else {
        answer = DecodeWholeAnswer(*body, UsageLimits());
      }
      if (endpoint_ == GatewayEndpoint::kResponses && answer.ok()) {
        answer = DecodeResponsesUsage(*body, UsageLimits());
        owners_.Note(DecodeResponseId(*body, UsageLimits()), forwarded.worker);
      }
    }
    Release(forwarded, answer.ok() ? *answer : std::nullopt);
    if (!body.ok()) {
      ErrorAnswer error{
          502,
          "engine '" + forwarded.worker + "': the answer broke off: " + body.status().message(),
          "upstream_error",
          "",
          "upstream_unreachable",
          {}};
      co_await Refuse(std::move(error));
      co_return;
    }
    if (!answer.ok()) {
      const std::string& type = call.content_type();
      ErrorAnswer error{502,
                        "engine '" + forwarded.worker + "' answered 200 with " +
                            (type.empty() ? "no content type" : type) +
                            " that is not an answer of its API: " + answer.status().message(),
                        "upstream_error",
                        "",
                        "upstream_malformed_answer",
                        {}};
      co_await Refuse(std::move(error));
      co_return;
    }
    plane_.CountRelayed(body->size());
    std::string content_type =
        call.content_type().empty() ? std::string(kJson) : call.content_type();
    co_await exchange_.Respond(call.status(), content_type, *std::move(body), {});
  }

  // A streamed answer, event by event as the engine sends them: the usage
  // kept, the usage chunk the gateway asked for itself left out, the load
  // turned to decode at the first event (the prefill is done then).
  asio::awaitable<void> Relay(UpstreamCall& call, const Forwarded& forwarded, bool strip_usage) {
    std::string content_type =
        call.content_type().empty() ? std::string(kEventStream) : call.content_type();
    std::optional<EngineUsage> usage;
    if (!co_await exchange_.StartStream(call.status(), content_type)) {
      call.Abort();
      Release(forwarded, usage);
      co_return;
    }
    bool response_noted = false;
    const EventFilter keep = [&](std::string_view data) {
      if (endpoint_ == GatewayEndpoint::kMessages) {
        // message_start carries the prompt, message_delta the final count
        // with the cached part.
        if (std::optional<EngineUsage> reported = DecodeMessagesUsage(data, UsageLimits())) {
          usage = reported;
        }
      } else if (endpoint_ == GatewayEndpoint::kResponses) {
        // response.created names the response, response.completed counts.
        if (!response_noted) {
          std::string id = DecodeResponseId(data, UsageLimits());
          response_noted = !id.empty();
          owners_.Note(std::move(id), forwarded.worker);
        }
        if (std::optional<EngineUsage> reported = DecodeResponsesUsage(data, UsageLimits())) {
          usage = reported;
        }
      } else if (std::optional<EngineUsage> reported = data.starts_with('{')
                                                           ? DecodeEngineUsage(data, UsageLimits())
                                                           : std::nullopt) {
        usage = reported;
        if (strip_usage && reported->usage_only) return false;
      }
      return true;
    };
    Plane& plane = plane_;
    const std::string& decision_id = forwarded.decision_id;
    const std::function<void()> prefilled = [&plane, &decision_id] {
      plane.Prefilled(decision_id);
    };
    std::string first_piece;
    const RelayEnd end =
        co_await RelayEvents(exchange_, call, first_piece, keep, prefilled, plane_);
    if (!end.client_gone) {
      std::string tail;
      if (!end.upstream.ok()) {
        const std::string why = "the engine's answer broke off: " + end.upstream.message();
        tail = endpoint_ == GatewayEndpoint::kMessages ? EncodeMessagesErrorEvent(why)
                                                       : EncodeOpenAIErrorEvent(why);
        co_await exchange_.Send(tail);
      }
      co_await exchange_.EndStream();
    }
    Release(forwarded, usage);
  }

  // A model served by disaggregated pools: the prefill/decode handoff.
  asio::awaitable<void> Handoff(Admitted& admitted, Plane::Pools pools, std::vector<int64_t> tokens,
                                const Salted& salted, std::string body) {
    if (pools.prefill.empty() || pools.decode.empty()) {
      const char* missing = pools.prefill.empty() ? "prefill" : "decode";
      ErrorAnswer error{503,
                        "no " + std::string(missing) + " worker of '" + admitted.decoded.model +
                            "' is live, healthy and not draining",
                        "service_unavailable",
                        "",
                        "no_eligible_worker",
                        {}};
      co_await Refuse(std::move(error));
      co_return;
    }
    HandoffRequest handoff{.path = path_,
                           .model = admitted.decoded.model,
                           .tenant = admitted.tenant,
                           .salt = salted.salt,
                           .diverted = salted.diverted,
                           .tokens = std::move(tokens),
                           .body = std::move(body),
                           .stream = admitted.decoded.stream,
                           .strip_usage = admitted.decoded.ask_usage,
                           .prefill_pool = std::move(pools.prefill),
                           .decode_pool = std::move(pools.decode)};
    co_await ServeHandoff(plane_, exchange_, std::move(handoff));
  }

  Plane& plane_;
  Exchange& exchange_;
  const GatewayEndpoint endpoint_;
  const std::string path_;
  ResponseOwners& owners_;
};

// A handler for callers with `role`: others are answered 401 or 403.
using GuardedHandler =
    std::function<asio::awaitable<void>(Exchange&, const auth::Principal& caller)>;
Handler Guard(const Plane& plane, auth::Role role, GuardedHandler handler,
              Wire wire = Wire::kOpenAI) {
  return [&plane, role, wire,
          handler = std::move(handler)](Exchange& exchange) -> asio::awaitable<void> {
    std::variant<auth::Principal, ErrorAnswer> caller =
        Authorize(plane, role, exchange.request(), wire);
    if (auto* refused = std::get_if<ErrorAnswer>(&caller)) {
      co_await Send(exchange, std::move(*refused), wire);
      co_return;
    }
    co_await handler(exchange, std::get<auth::Principal>(caller));
  };
}

// The models a worker of which may serve, each once.
asio::awaitable<void> ListModels(const Plane& plane, Exchange& exchange) {
  std::vector<std::string> list;
  for (const std::string& model : plane.KnownModels()) {
    if (!plane.ServingWorkers(model).empty()) list.push_back(model);
  }
  std::string body = EncodeModelsJson(list);
  co_await exchange.Respond(200, kJson, std::move(body), {});
}

// The request path of one endpoint, under the gateway's cap on requests
// served at once (`open`, shared by every endpoint).
GuardedHandler Forward(Plane& plane, GatewayEndpoint endpoint, std::string path,
                       std::shared_ptr<std::atomic<uint64_t>> open,
                       std::shared_ptr<ResponseOwners> owners) {
  return [&plane, endpoint, path = std::move(path), open = std::move(open),
          owners = std::move(owners)](Exchange& exchange,
                                      const auth::Principal& caller) -> asio::awaitable<void> {
    plane.CountRequest(std::string_view(path).substr(4));
    struct Held {
      std::atomic<uint64_t>& n;
      ~Held() { n.fetch_sub(1); }
    } held{*open};
    if (const uint64_t limit = plane.limits().max_requests; open->fetch_add(1) >= limit) {
      // Anthropic's clients know overload as 529.
      const Wire wire = WireOf(endpoint);
      ErrorAnswer error{wire == Wire::kAnthropic ? 529 : 429,
                        "the gateway is serving " + std::to_string(limit) +
                            " requests, its limit (serve --gateway-max-requests); retry shortly",
                        "rate_limit_error",
                        "",
                        "gateway_at_capacity",
                        {{"Retry-After", "1"}}};
      co_await Send(exchange, std::move(error), wire);
      co_return;
    }
    RequestPath request_path(plane, exchange, endpoint, path, *owners);
    co_await request_path.Serve(caller);
  };
}

}  // namespace

Handler GatewayHandler(Plane& plane) {
  auto open = std::make_shared<std::atomic<uint64_t>>(0);
  auto owners = std::make_shared<ResponseOwners>();
  Routes http;
  http.Get("/health", [](Exchange& exchange) -> asio::awaitable<void> {
    std::string body = R"({"status":"ok"})";
    co_await exchange.Respond(200, kJson, std::move(body), {});
  });
  http.Get("/v1/models",
           Guard(plane, auth::Role::kInfer, [&plane](Exchange& exchange, const auth::Principal&) {
             return ListModels(plane, exchange);
           }));
  http.Post("/v1/completions",
            Guard(plane, auth::Role::kInfer,
                  Forward(plane, GatewayEndpoint::kCompletions, "/v1/completions", open, owners)));
  http.Post("/v1/chat/completions", Guard(plane, auth::Role::kInfer,
                                          Forward(plane, GatewayEndpoint::kChatCompletions,
                                                  "/v1/chat/completions", open, owners)));
  http.Post("/v1/responses",
            Guard(plane, auth::Role::kInfer,
                  Forward(plane, GatewayEndpoint::kResponses, "/v1/responses", open, owners)));
  http.Post("/v1/messages",
            Guard(plane, auth::Role::kInfer,
                  Forward(plane, GatewayEndpoint::kMessages, "/v1/messages", open, owners),
                  Wire::kAnthropic));
  return std::move(http).Dispatch([](Exchange& exchange) -> asio::awaitable<void> {
    const Request& request = exchange.request();
    ErrorAnswer error{
        404,
        "no route for " + std::string(request.method_string()) + " " + std::string(PathOf(request)),
        "invalid_request_error",
        "",
        "not_found",
        {}};
    co_await Send(exchange, std::move(error));
  });
}

}  // namespace kvgov::gateway
