#include "server/gateway.h"

#include <utility>  // before Asio: see gateway/front_door.h

#include <httplib.h>

#include <boost/beast/http/verb.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <variant>

#include "gateway/routes.h"
#include "gateway/upstream_pool.h"
#include "kvgov/auth/entropy.h"
#include "kvgov/auth/tokens.h"
#include "kvgov/clock/clock.h"
#include "kvgov/codec/gateway_api.h"
#include "kvgov/codec/messages_api.h"
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

namespace http = boost::beast::http;
namespace asio = boost::asio;
using gateway::Exchange;
using gateway::HeaderList;

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
  std::string body = wire == Wire::kAnthropic
                         ? EncodeMessagesErrorJson(error.status, error.message)
                         : EncodeOpenAIErrorJson(error.message, error.type, error.param, error.code);
  co_await exchange.Respond(error.status, kJson, std::move(body), error.headers);
}

std::string HeaderOf(const gateway::Request& request, std::string_view name) {
  return std::string(request[name]);
}

// The caller, with `role`; otherwise the 401 or 403.
std::variant<auth::Principal, ErrorAnswer> Authorize(Daemon& daemon, auth::Role role,
                                                     const gateway::Request& request, Wire wire) {
  std::string authorization = HeaderOf(request, "Authorization");
  // Anthropic's SDKs send the key as x-api-key (Authorization: Bearer only
  // with an auth token).
  if (authorization.empty() && wire == Wire::kAnthropic) {
    if (std::string key = HeaderOf(request, "x-api-key"); !key.empty()) {
      authorization = "Bearer " + key;
    }
  }
  Result<auth::Principal> caller = daemon.auth->Authorize(authorization, role);
  if (caller.ok()) return *caller;
  if (caller.status().code() == StatusCode::kUnauthenticated) {
    return ErrorAnswer{401, caller.status().message(), "authentication_error", "",
                       "invalid_api_key", {{"WWW-Authenticate", "Bearer realm=\"kvgov\""}}};
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
                                                const gateway::Request& request) {
  std::string tenant = HeaderOf(request, kTenantHeader);
  if (Status valid = auth::CheckTenant(tenant); !valid.ok()) {
    return ErrorAnswer{400, std::string(kTenantHeader) + ": " + valid.message(),
                       "invalid_request_error", "", "invalid_value", {}};
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

// A request the gateway will serve: who for, what, and on which workers.
struct Admitted {
  std::string tenant;
  GatewayRequest decoded;
  std::vector<std::string> serving;
};

// Everything decided before an engine is asked anything: the tenant, the
// body, the workers that may serve it.
std::variant<Admitted, ErrorAnswer> Admit(Daemon& daemon, const auth::Principal& caller,
                                          GatewayEndpoint endpoint,
                                          const gateway::Request& request) {
  std::variant<std::string, ErrorAnswer> tenant = TenantOf(caller, request);
  if (auto* refused = std::get_if<ErrorAnswer>(&tenant)) return std::move(*refused);
  Result<GatewayRequest> decoded =
      DecodeGatewayRequestJson(endpoint, request.body(), BodyLimits(daemon));
  if (!decoded.ok()) {
    const bool too_large = decoded.status().code() == StatusCode::kResourceExhausted;
    return ErrorAnswer{too_large ? 413 : 400, decoded.status().message(), "invalid_request_error",
                       ParamOf(decoded.status().message()),
                       too_large ? "request_too_large" : "invalid_value", {}};
  }
  std::vector<std::string> serving = ServingWorkers(daemon, decoded->model);
  if (serving.empty()) {
    std::set<std::string> served;
    for (const index::WorkerResidency& worker : daemon.index.Workers()) {
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
      return ErrorAnswer{404, message, "invalid_request_error", "model", "model_not_found", {}};
    }
    return ErrorAnswer{503,
                       "no worker of '" + decoded->model + "' is live, healthy and not draining",
                       "service_unavailable", "", "no_eligible_worker", {}};
  }
  if (const uint64_t limit = daemon.options.gateway_max_in_flight; limit > 0) {
    std::erase_if(serving, [&](const std::string& worker) {
      return daemon.router->LoadOf(worker).in_flight_requests >= limit;
    });
    if (serving.empty()) {
      return ErrorAnswer{429,
                         "every worker of '" + decoded->model + "' has " + std::to_string(limit) +
                             " requests in flight; retry shortly",
                         "rate_limit_error", "", "all_workers_busy", {{"Retry-After", "1"}}};
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
                                                          const ingest::EngineSpec& engine,
                                                          std::string body) {
  const std::string url = OpenAIUrl(engine);
  const std::string path(connectors::TokenizePath(engine.kind));
  Result<gateway::UpstreamCall> call = co_await exchange.upstreams().Open(url);
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

// An answer ServeHandoff wrote into an httplib::Response, passed on
// through the front door from the handoff's thread.
void Deliver(httplib::Response& response, gateway::BlockingAnswer& answer) {
  std::string content_type = response.get_header_value("Content-Type");
  if (!response.content_provider_) {
    HeaderList headers;
    for (const auto& [name, value] : response.headers) {
      if (name != "Content-Type" && name != "Content-Length") headers.emplace_back(name, value);
    }
    answer.Respond(response.status, content_type.empty() ? "application/json" : content_type,
                   std::move(response.body), std::move(headers));
    return;
  }
  if (!answer.StartStream(response.status, content_type)) return;
  bool done = false;
  httplib::DataSink sink;
  sink.write = [&answer](const char* data, size_t size) {
    return answer.Send(std::string(data, size));
  };
  sink.done = [&done] { done = true; };
  sink.is_writable = [&answer] { return !answer.client_gone(); };
  while (!done && response.content_provider_(0, 0, sink)) {
  }
  if (done) answer.EndStream();
  response.content_provider_success_ = done;  // the releaser hears how it ended
}

// The request path of POST /v1/completions and /v1/chat/completions:
// tokenize (by the engine), route with the tenant's salt, forward, relay,
// account. Runs on a loop of the front door; only the handoff runs off it.
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
    std::lock_guard lock(mu_);
    if (worker_of_.insert_or_assign(id, std::move(worker)).second) order_.push_back(std::move(id));
    while (order_.size() > kKept) {
      worker_of_.erase(order_.front());
      order_.pop_front();
    }
  }
  std::optional<std::string> Find(const std::string& id) const {
    std::lock_guard lock(mu_);
    const auto it = worker_of_.find(id);
    if (it == worker_of_.end()) return std::nullopt;
    return it->second;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::string> worker_of_;
  std::deque<std::string> order_;  // oldest first
};

class RequestPath {
 public:
  RequestPath(Daemon& daemon, Exchange& exchange, GatewayEndpoint endpoint, std::string path,
              ResponseOwners& owners)
      : daemon_(daemon),
        exchange_(exchange),
        endpoint_(endpoint),
        path_(std::move(path)),
        owners_(owners) {}

  asio::awaitable<void> Serve(const auth::Principal& caller) {
    std::variant<Admitted, ErrorAnswer> admitted =
        Admit(daemon_, caller, endpoint_, exchange_.request());
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
        // A serving worker's engine has a URL (MayServe).
        const ingest::EngineSpec& engine = *EngineOf(daemon_, request.serving[i]);
        tokenizer = engine.id;
        tokenized = co_await TokenizeOn(exchange_, engine, decoded.tokenize_body);
        if (exchange_.client_gone()) co_return;
        if (tokenized.ok() || tokenized.status().code() != StatusCode::kUnavailable) break;
      }
      if (!tokenized.ok()) {
        daemon_.gateway_metrics.tokenize_failures->WithLabels({decoded.model})->Inc();
        ErrorAnswer error{502,
                                  "engine '" + tokenizer + "' could not tokenize the request: " +
                                      tokenized.status().message(),
                                  "upstream_error", "", "tokenizer_unavailable", {}};
        co_await Refuse(std::move(error));
        co_return;
      }
      tokens = *std::move(tokenized);
    }
    const int64_t routed_tokens = static_cast<int64_t>(tokens.size());
    ObservePrompt(daemon_, decoded.model, request.tenant, tokens);
    if (!decoded.previous_response_id.empty()) {
      if (std::optional<std::string> owner = owners_.Find(decoded.previous_response_id)) {
        if (std::find(request.serving.begin(), request.serving.end(), *owner) ==
            request.serving.end()) {
          ErrorAnswer error{503,
                            "previous_response_id '" + decoded.previous_response_id +
                                "' was answered by worker '" + *owner +
                                "', which is not live, healthy and undrained now; its "
                                "conversation is held there only",
                            "service_unavailable", "previous_response_id",
                            "previous_response_unavailable", {}};
          co_await Refuse(std::move(error));
          co_return;
        }
        request.serving = {*owner};
      }
    }
    router::RouteRequest route{decoded.model, request.tenant, std::move(tokens), "",
                               request.serving};
    Result<RequestSalt> salted = SaltRoute(daemon_, route);
    if (!salted.ok()) {
      ErrorAnswer error{503, salted.status().message(), "service_unavailable", "",
                                "quarantine_unresolved", {}};
      co_await Refuse(std::move(error));
      co_return;
    }
    const std::string& salt = salted->salt;
    std::string body = ForwardedBody(exchange_.request().body(), salt, decoded.ask_usage);
    if (ServedDisaggregated(daemon_, request.serving)) {
      if (endpoint_ == GatewayEndpoint::kMessages || endpoint_ == GatewayEndpoint::kResponses) {
        ErrorAnswer error{400,
                          "'" + decoded.model +
                              "' is served by prefill and decode pools, and the gateway hands "
                              "over completions and chat completions only: send "
                              "/v1/chat/completions",
                          "invalid_request_error", "", "invalid_value", {}};
        co_await Refuse(std::move(error));
        co_return;
      }
      co_await Handoff(request, std::move(route.token_ids), salt, salted->diverted(),
                       std::move(body));
      co_return;
    }

    // One try, and one more on the next candidate when the first engine
    // gave no byte or a 5xx head.
    std::optional<gateway::UpstreamCall> call;
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
          daemon_.router->Route(route, salt, *id, clock::NowMillis());
      if (!decision.ok()) {
        ErrorAnswer error{400, decision.status().message(), "invalid_request_error", "",
                                  "invalid_value", {}};
        co_await Refuse(std::move(error));
        co_return;
      }
      if (decision->worker.empty()) {
        ErrorAnswer error{503, "no eligible worker (" + IneligibleReasons(*decision) + ")",
                                  "service_unavailable", "", "no_eligible_worker", {}};
        co_await Refuse(std::move(error));
        co_return;
      }
      MarkDiverted(*salted, *decision);
      daemon_.tenants_seen.Note(request.tenant);
      ExpectSaltedBlocks(daemon_, route, salt, *decision);
      daemon_.route_totals.Count(*decision);
      const std::optional<index::WorkerResidency> residency =
          daemon_.index.Worker(decision->worker);
      const int64_t block_size = residency ? std::max<int64_t>(1, residency->block_size) : 1;
      forwarded = {decision->worker, decision->decision_id,
                   Prediction{decoded.model, request.tenant, routed_tokens,
                              static_cast<int64_t>(decision->overlap_blocks) * block_size,
                              block_size, decoded.previous_response_id.empty()}};

      Status failure;
      const std::string url = OpenAIUrl(daemon_, forwarded.worker);
      Result<gateway::UpstreamCall> opened = co_await exchange_.upstreams().Open(url);
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
      (void)daemon_.router->Done(forwarded.decision_id);
      call.reset();
      if (last) {
        const bool timed_out = failure.code() == StatusCode::kDeadlineExceeded;
        ErrorAnswer error{timed_out ? 504 : 502,
                                  "engine '" + forwarded.worker + "': " + failure.message(),
                                  "upstream_error", "", timed_out ? "upstream_timeout"
                                                                  : "upstream_unreachable",
                                  {}};
        co_await Refuse(std::move(error));
        co_return;
      }
      daemon_.gateway_metrics.retries->WithLabels({})->Inc();
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
    (void)daemon_.router->Done(forwarded.decision_id);
    Account(daemon_, forwarded.worker, forwarded.decision_id, forwarded.prediction, usage);
  }

  // A non-streamed answer, held whole (its usage is read from it).
  asio::awaitable<void> PassWhole(gateway::UpstreamCall& call, const Forwarded& forwarded) {
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
      ErrorAnswer error{502,
                                "engine '" + forwarded.worker +
                                    "': the answer broke off: " + body.status().message(),
                                "upstream_error", "", "upstream_unreachable", {}};
      co_await Refuse(std::move(error));
      co_return;
    }
    if (!answer.ok()) {
      const std::string& type = call.content_type();
      ErrorAnswer error{502,
                                "engine '" + forwarded.worker + "' answered 200 with " +
                                    (type.empty() ? "no content type" : type) +
                                    " that is not an answer of its API: " +
                                    answer.status().message(),
                                "upstream_error", "", "upstream_malformed_answer", {}};
      co_await Refuse(std::move(error));
      co_return;
    }
    daemon_.gateway_metrics.bytes_relayed->WithLabels({})->Add(static_cast<double>(body->size()));
    std::string content_type = call.content_type().empty() ? std::string(kJson)
                                                           : call.content_type();
    co_await exchange_.Respond(call.status(), content_type, *std::move(body), {});
  }

  // A streamed answer, event by event as the engine sends them: the usage
  // kept, the usage chunk the gateway asked for itself left out, the load
  // turned to decode at the first event (the prefill is done then).
  asio::awaitable<void> Relay(gateway::UpstreamCall& call, const Forwarded& forwarded,
                              bool strip_usage) {
    std::string content_type = call.content_type().empty() ? std::string(kEventStream)
                                                           : call.content_type();
    std::optional<EngineUsage> usage;
    if (!co_await exchange_.StartStream(call.status(), content_type)) {
      call.Abort();
      Release(forwarded, usage);
      co_return;
    }
    const std::shared_ptr<metrics::Counter> relayed =
        daemon_.gateway_metrics.bytes_relayed->WithLabels({});
    SseSplitter splitter;
    bool first_event = true;
    bool response_noted = false;
    Status outcome;
    while (!call.done()) {
      Result<std::string_view> piece = co_await call.Read();
      if (!piece.ok()) {
        outcome = piece.status();
        break;
      }
      std::string out;
      for (std::string& event : splitter.Push(*piece)) {
        const std::string_view data = SseSplitter::Data(event);
        if (endpoint_ == GatewayEndpoint::kMessages) {
          // message_start carries the prompt, message_delta the final
          // count with the cached part.
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
        } else if (std::optional<EngineUsage> reported =
                       data.starts_with('{') ? DecodeEngineUsage(data, UsageLimits())
                                             : std::nullopt) {
          usage = reported;
          if (strip_usage && reported->usage_only) continue;
        }
        if (first_event) {
          first_event = false;
          (void)daemon_.router->Prefilled(forwarded.decision_id);
        }
        out += event;
      }
      relayed->Add(static_cast<double>(out.size()));
      if (!co_await exchange_.Send(out)) {
        call.Abort();  // the engine sees its client go and aborts the request
        Release(forwarded, usage);
        co_return;
      }
    }
    if (exchange_.client_gone()) {
      Release(forwarded, usage);
      co_return;
    }
    std::string rest = splitter.Rest();
    if (!outcome.ok()) {
      const std::string why = "the engine's answer broke off: " + outcome.message();
      if (endpoint_ == GatewayEndpoint::kMessages) {
        rest += EncodeMessagesErrorEvent(why);
      } else {
        rest += EncodeOpenAIErrorEvent(why);
      }
    }
    co_await exchange_.Send(rest);
    co_await exchange_.EndStream();
    Release(forwarded, usage);
  }

  // A model served by disaggregated pools: ServeHandoff, on a thread of
  // its own until the handoff runs on the loop too (issue 36).
  asio::awaitable<void> Handoff(Admitted& admitted, std::vector<int64_t> tokens,
                                const std::string& salt, bool diverted, std::string body) {
    HandoffRequest handoff{.path = path_,
                           .model = admitted.decoded.model,
                           .tenant = admitted.tenant,
                           .salt = salt,
                           .diverted = diverted,
                           .tokens = std::move(tokens),
                           .body = std::move(body),
                           .stream = admitted.decoded.stream,
                           .strip_usage = admitted.decoded.ask_usage,
                           .prefill_pool = {},
                           .decode_pool = {}};
    for (const std::string& worker : admitted.serving) {
      const ingest::EngineRole role = RoleOf(daemon_, worker);
      if (role != ingest::EngineRole::kDecode) handoff.prefill_pool.push_back(worker);
      if (role != ingest::EngineRole::kPrefill) handoff.decode_pool.push_back(worker);
    }
    if (handoff.prefill_pool.empty() || handoff.decode_pool.empty()) {
      const char* missing = handoff.prefill_pool.empty() ? "prefill" : "decode";
      ErrorAnswer error{503,
                                "no " + std::string(missing) + " worker of '" + handoff.model +
                                    "' is live, healthy and not draining",
                                "service_unavailable", "", "no_eligible_worker", {}};
      co_await Refuse(std::move(error));
      co_return;
    }
    Daemon* daemon = &daemon_;
    std::function<void(gateway::BlockingAnswer&)> job =
        [daemon, handoff = std::move(handoff)](gateway::BlockingAnswer& answer) mutable {
          httplib::Response response;
          ServeHandoff(*daemon, std::move(handoff), response);
          Deliver(response, answer);
        };
    co_await exchange_.RunBlocking(std::move(job));
  }

  Daemon& daemon_;
  Exchange& exchange_;
  const GatewayEndpoint endpoint_;
  const std::string path_;
  ResponseOwners& owners_;
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

namespace {

// A handler for callers with `role`: others are answered 401 or 403.
using GuardedHandler =
    std::function<asio::awaitable<void>(Exchange&, const auth::Principal& caller)>;
gateway::Handler Guard(Daemon& daemon, auth::Role role, GuardedHandler handler,
                       Wire wire = Wire::kOpenAI) {
  return [&daemon, role, wire,
          handler = std::move(handler)](Exchange& exchange) -> asio::awaitable<void> {
    std::variant<auth::Principal, ErrorAnswer> caller =
        Authorize(daemon, role, exchange.request(), wire);
    if (auto* refused = std::get_if<ErrorAnswer>(&caller)) {
      co_await Send(exchange, std::move(*refused), wire);
      co_return;
    }
    co_await handler(exchange, std::get<auth::Principal>(caller));
  };
}

// The models a worker of which may serve, each once.
asio::awaitable<void> ListModels(Daemon& daemon, Exchange& exchange) {
  std::set<std::string> models;
  for (const index::WorkerResidency& worker : daemon.index.Workers()) {
    if (!models.contains(worker.model) && MayServe(daemon, worker)) models.insert(worker.model);
  }
  const std::vector<std::string> list(models.begin(), models.end());
  std::string body = EncodeModelsJson(list);
  co_await exchange.Respond(200, kJson, std::move(body), {});
}

// The request path of one endpoint, under the gateway's cap on requests
// served at once (`open`, shared by every endpoint).
GuardedHandler Forward(Daemon& daemon, GatewayEndpoint endpoint, std::string path,
                       std::shared_ptr<std::atomic<uint64_t>> open,
                       std::shared_ptr<ResponseOwners> owners) {
  return [&daemon, endpoint, path = std::move(path), open, owners](
             Exchange& exchange, const auth::Principal& caller) -> asio::awaitable<void> {
    daemon.gateway_metrics.requests->WithLabels({path.substr(4)})->Inc();
    struct Held {
      std::atomic<uint64_t>& n;
      ~Held() { n.fetch_sub(1); }
    } held{*open};
    if (const uint64_t limit = daemon.options.gateway_max_requests; open->fetch_add(1) >= limit) {
      // Anthropic's clients know overload as 529.
      const Wire wire = WireOf(endpoint);
      ErrorAnswer error{wire == Wire::kAnthropic ? 529 : 429,
                        "the gateway is serving " + std::to_string(limit) +
                            " requests, its limit (serve --gateway-max-requests); retry shortly",
                        "rate_limit_error", "", "gateway_at_capacity", {{"Retry-After", "1"}}};
      co_await Send(exchange, std::move(error), wire);
      co_return;
    }
    RequestPath request_path(daemon, exchange, endpoint, path, *owners);
    co_await request_path.Serve(caller);
  };
}

}  // namespace

gateway::Handler GatewayHandler(Daemon& daemon) {
  auto open = std::make_shared<std::atomic<uint64_t>>(0);
  auto owners = std::make_shared<ResponseOwners>();
  gateway::Routes http;
  http.Get("/health", [](Exchange& exchange) -> asio::awaitable<void> {
    std::string body = R"({"status":"ok"})";
    co_await exchange.Respond(200, kJson, std::move(body), {});
  });
  http.Get("/v1/models",
           Guard(daemon, auth::Role::kInfer,
                 [&daemon](Exchange& exchange, const auth::Principal&) {
                   return ListModels(daemon, exchange);
                 }));
  http.Post("/v1/completions",
            Guard(daemon, auth::Role::kInfer,
                  Forward(daemon, GatewayEndpoint::kCompletions, "/v1/completions", open, owners)));
  http.Post("/v1/chat/completions",
            Guard(daemon, auth::Role::kInfer,
                  Forward(daemon, GatewayEndpoint::kChatCompletions, "/v1/chat/completions",
                          open, owners)));
  http.Post("/v1/responses",
            Guard(daemon, auth::Role::kInfer,
                  Forward(daemon, GatewayEndpoint::kResponses, "/v1/responses", open, owners)));
  http.Post("/v1/messages",
            Guard(daemon, auth::Role::kInfer,
                  Forward(daemon, GatewayEndpoint::kMessages, "/v1/messages", open, owners),
                  Wire::kAnthropic));
  return std::move(http).Dispatch([](Exchange& exchange) -> asio::awaitable<void> {
    const gateway::Request& request = exchange.request();
    ErrorAnswer error{404,
                      "no route for " + std::string(request.method_string()) + " " +
                          std::string(gateway::PathOf(request)),
                      "invalid_request_error", "", "not_found", {}};
    co_await Send(exchange, std::move(error));
  });
}

}  // namespace kvgov::server
