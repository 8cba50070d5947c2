#include "gateway/handoff.h"

#include <utility>  // before Asio: see front_door.h

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/event_relay.h"
#include "kvgov/auth/entropy.h"
#include "kvgov/clock/clock.h"
#include "kvgov/codec/gateway_api.h"
#include "kvgov/gateway/handoff_rules.h"

namespace kvgov::gateway {
namespace {

using Clock = std::chrono::steady_clock;

// How often a handoff waiting for the decode worker's first token looks
// again at its lease and its span: a withdrawal reaches a pending handoff
// within this.
constexpr std::chrono::milliseconds kWithdrawalCheck{10};

// An engine's error answer is passed on whole up to this; past it, cut.
constexpr size_t kMaxEngineErrorBytes = size_t{64} << 10;

// GCC 12 and temporaries in a co_await expression: see request_path.cc.
constexpr std::string_view kJson = "application/json";
constexpr std::string_view kEventStream = "text/event-stream";
const HeaderList kNoHeaders;

// The host of an engine URL (http://HOST:PORT/...), where SGLang's
// bootstrap server runs beside the prefill worker.
std::string HostOf(std::string_view url) {
  if (const size_t scheme = url.find("://"); scheme != std::string_view::npos) {
    url.remove_prefix(scheme + 3);
  }
  url = url.substr(0, url.find('/'));
  if (url.starts_with('[')) return std::string(url.substr(0, url.find(']') + 1));
  return std::string(url.substr(0, url.rfind(':')));
}

HandoffFailure Internal(const Status& status) {
  return {HandoffOutcome::kPrefillFailed, 500, "internal", status.message()};
}

// A leg's answer held whole (a prefill leg's): how it went, and the body.
struct WholeAnswer {
  LegAnswer leg;
  std::string body;
  std::string content_type;
};

// One request's way through both steps: performs what HandoffRules decides
// (routing, the legs' I/O, the lease reports) and records the handoff when
// the last of its coroutines lets go of it (the request's; the pin's
// watchdog; SGLang's prefill leg, read beside the decode leg).
//
// Thread-compatible: its loop only.
class Handoff : public std::enable_shared_from_this<Handoff> {
 public:
  Handoff(Plane& plane, UpstreamPool& upstreams, HandoffRequest request)
      : plane_(plane),
        upstreams_(upstreams),
        request_(std::move(request)),
        rules_(ProtocolOf(plane, request_), request_.prefill_pool, request_.decode_pool,
               request_.stream) {
    record_.model = request_.model;
    record_.tenant = request_.tenant;
    record_.protocol = bootstrap() ? "bootstrap" : "nixl";
    record_.started_ms = clock::NowMillis();
  }
  Handoff(const Handoff&) = delete;
  Handoff& operator=(const Handoff&) = delete;

  // Ends what is still open (a leg's load, a lease no first token
  // released) and records the handoff.
  ~Handoff() {
    EndDecode();
    if (rules_.step() == HandoffStep::kRelay) Settle();
    Perform(rules_.ClientGone());  // abandoned before the relay; else nothing
    ReleasePrefill();
    record_.outcome = rules_.outcome();
    record_.error = rules_.step() == HandoffStep::kFailed ? rules_.failure().message : "";
    record_.prefill_worker = rules_.prefill_worker();
    record_.decode_worker = rules_.decode_worker();
    record_.prefill_attempts = rules_.prefill_attempts();
    plane_.RecordHandoff(std::move(record_), handoff_seconds_);
  }

  asio::awaitable<void> Serve(Exchange& exchange) {
    exchange.OnClientGone([this] {
      client_gone_ = true;
      AbortLegs();
    });
    struct Unwatch {
      Exchange& exchange;
      ~Unwatch() { exchange.OnClientGone(nullptr); }
    } unwatch{exchange};

    Result<std::string> id = auth::RandomHexId();
    if (!id.ok()) {
      Perform(rules_.Fail(Internal(id.status())));
      co_await AnswerFailure(exchange);
      co_return;
    }
    record_.request_id = *std::move(id);
    // NIXL: the prefill leg answered and pinned first. SGLang's is sent
    // with its decode leg.
    if (!bootstrap()) co_await Prefill();
    while (!exchange.client_gone() && rules_.step() != HandoffStep::kFailed) {
      const bool sent = rules_.step() == HandoffStep::kRouteBoth ? DispatchBoth() : RouteDecode();
      if (!sent) break;
      co_await AwaitFirstToken();
      // SGLang's prefill failed before the first token: both legs go again
      // with a new room, on the next prefill worker.
      if (rules_.step() != HandoffStep::kRouteBoth) break;
      plane_.CountRetry();
    }
    if (exchange.client_gone()) co_return;  // the destructor tells the rules
    if (rules_.step() != HandoffStep::kRelay) {
      AbortLegs();  // SGLang's prefill leg, when its decode leg failed
      co_await AnswerFailure(exchange);
      co_return;
    }
    if (request_.stream) {
      co_await RelayStream(exchange);
    } else {
      co_await PassWhole(exchange);
    }
    // The decode worker's load is released now, not when SGLang's prefill
    // leg, still read beside, lets go of the handoff.
    EndDecode();
  }

 private:
  static HandoffProtocol ProtocolOf(const Plane& plane, const HandoffRequest& request) {
    // A pool mixes engine kinds only by mistake; the first prefill worker's
    // kind decides.
    const std::optional<EngineAddress> first =
        request.prefill_pool.empty() ? std::nullopt : plane.EngineOf(request.prefill_pool.front());
    return first && first->bootstrap ? HandoffProtocol::kBootstrap : HandoffProtocol::kNixl;
  }
  bool bootstrap() const { return rules_.protocol() == HandoffProtocol::kBootstrap; }

  // Both legs closed now (their engines see their client go and abort);
  // the coroutines reading them end Cancelled.
  void AbortLegs() {
    if (prefill_call_) prefill_call_->Abort();
    if (decode_call_) decode_call_->Abort();
  }

  void Perform(LeaseMove move) {
    if (move == LeaseMove::kAbort && pin_) pin_->End(NIXLLeaseEvent::kAbort);
    // kComplete waits for Settle, off the first token's path.
    if (move == LeaseMove::kComplete) complete_lease_ = true;
  }

  // After the first token has gone on to the client: the lease is released
  // (the transfer is done). Idempotent.
  void Settle() {
    if (!complete_lease_) return;
    complete_lease_ = false;
    if (pin_) pin_->End(NIXLLeaseEvent::kTransferComplete);
  }

  // Routes one leg among `pool`; nullopt (the failure given to the rules)
  // when the route is refused or no worker there is eligible.
  std::optional<router::RouteDecision> Decide(const std::vector<std::string>& pool,
                                              uint64_t pullable, HandoffLeg leg) {
    const HandoffOutcome failed = leg == HandoffLeg::kPrefill ? HandoffOutcome::kPrefillFailed
                                                              : HandoffOutcome::kDecodeFailed;
    Result<std::string> id = auth::RandomHexId();
    if (!id.ok()) {
      Perform(rules_.Fail({failed, 500, "internal", id.status().message()}));
      return std::nullopt;
    }
    router::RouteRequest route{request_.model, request_.tenant, request_.tokens, "", pool};
    route.pullable_blocks = pullable;
    route.salt_must_be_honoured = request_.diverted;
    const Salted salted{request_.salt, request_.diverted};
    Result<router::RouteDecision> decision =
        plane_.Route(route, salted, *std::move(id),
                     leg == HandoffLeg::kPrefill ? RouteCount::kRequest : RouteCount::kDecodeLeg);
    if (!decision.ok()) {
      Perform(rules_.Fail({failed, 400, "invalid_value", decision.status().message()}));
      return std::nullopt;
    }
    if (decision->worker.empty()) {
      Perform(rules_.NoEligibleWorker(leg, router::IneligibleReasons(*decision)));
      return std::nullopt;
    }
    return *std::move(decision);
  }

  // The prompt's full blocks on the prefill worker: what the pin holds.
  void CountSpan(const std::string& prefill_worker) {
    const int64_t block_size = std::max<int64_t>(1, plane_.BlockSize(prefill_worker));
    record_.prompt_blocks = request_.tokens.size() / static_cast<uint64_t>(block_size);
  }

  Prediction PredictionFor(const router::RouteDecision& decision) const {
    const int64_t block_size = std::max<int64_t>(1, plane_.BlockSize(decision.worker));
    return {request_.model, request_.tenant, static_cast<int64_t>(request_.tokens.size()),
            static_cast<int64_t>(decision.overlap_blocks) * block_size, block_size};
  }

  // `body` sent to `worker` on `slot` (where AbortLegs finds it) and its
  // answer read whole, at most `limit` bytes.
  asio::awaitable<WholeAnswer> CallWhole(std::string worker, std::string body,
                                         std::optional<UpstreamCall>& slot, size_t limit) {
    WholeAnswer answer;
    Status failure = co_await Send(worker, std::move(body), slot);
    if (failure.ok()) {
      answer.leg.status = slot->status();
      answer.content_type = slot->content_type();
      Result<std::string> read = co_await slot->ReadAll(limit);
      if (read.ok()) {
        answer.body = *std::move(read);
      } else {
        failure = read.status();
      }
    }
    slot.reset();
    answer.leg.reached = failure.ok();
    answer.leg.timed_out = failure.code() == StatusCode::kDeadlineExceeded;
    if (!failure.ok()) answer.leg.error = failure.message();
    co_return answer;
  }

  // Opens a call to `worker`'s engine in `slot` and sends `body` there, to
  // the head of its answer.
  asio::awaitable<Status> Send(const std::string& worker, std::string body,
                               std::optional<UpstreamCall>& slot) {
    const std::optional<EngineAddress> engine = plane_.EngineOf(worker);
    if (!engine) co_return Status::Unavailable("worker '" + worker + "' has no engine URL now");
    const std::string& url = engine->url;
    Result<UpstreamCall> call = co_await upstreams_.Open(url);
    if (!call.ok()) co_return call.status();
    slot.emplace(*std::move(call));
    const std::string& path = request_.path;
    const std::string& request_id = record_.request_id;
    co_return co_await slot->Send(path, std::move(body), request_id);
  }

  // vLLM: the prefill leg, tried on a second prefill worker when the first
  // gives no answer or a 5xx; its kv_transfer_params then pin the span.
  asio::awaitable<void> Prefill() {
    Result<std::string> body = NixlPrefillBody(request_.body);
    if (!body.ok()) {
      Perform(rules_.Fail(Internal(body.status())));
      co_return;
    }
    while (rules_.step() == HandoffStep::kRoutePrefill) {
      std::optional<router::RouteDecision> decision =
          Decide(rules_.prefill_candidates(), 0, HandoffLeg::kPrefill);
      if (!decision) co_return;
      rules_.PrefillRouted(decision->worker);
      record_.prefill_overlap_blocks = decision->overlap_blocks;
      CountSpan(decision->worker);
      prefill_decision_ = decision->decision_id;
      const std::string& worker = decision->worker;
      WholeAnswer answer = co_await CallWhole(worker, *body, prefill_call_, kMaxWholeAnswerBytes);
      ReleasePrefill();
      if (client_gone_) co_return;  // its call was aborted: no answer to judge
      if (answer.leg.reached && answer.leg.status < 500) {
        plane_.Account(decision->worker, decision->decision_id, PredictionFor(*decision),
                       answer.leg.status == 200 ? DecodeEngineUsage(answer.body, UsageLimits())
                                                : std::nullopt);
      }
      PinParams pin = PinParams::kNone;
      if (answer.leg.reached && answer.leg.status == 200) {
        Result<std::optional<std::string>> params =
            DecodeKvTransferParams(answer.body, UsageLimits());
        if (!params.ok()) {
          pin = PinParams::kMalformed;
          answer.leg.error = params.status().message();
        } else if (params->has_value()) {
          pin = PinParams::kPresent;
          kv_transfer_params_ = **params;
        }
      } else if (answer.leg.reached) {
        engine_error_ = {answer.body, answer.content_type};
      }
      rules_.PrefillAnswered(answer.leg, pin);
      if (rules_.step() == HandoffStep::kRoutePrefill) plane_.CountRetry();
    }
    if (rules_.step() == HandoffStep::kFailed) co_return;
    record_.prefill_done_ms = clock::NowMillis();
    prefill_answered_ = Clock::now();
    if (rules_.step() == HandoffStep::kPin) Pin();
  }

  // Witnesses the pin as a lease of its own. False (the rules told) when it
  // cannot be recorded.
  bool Pin() {
    Result<std::unique_ptr<HandoffPin>> pin =
        plane_.Pin(request_, record_.request_id, rules_.prefill_worker(), rules_.lease_role());
    if (!pin.ok()) {
      rules_.PinRefused(pin.status().message());
      return false;
    }
    pin_ = *std::move(pin);
    record_.lease_id = pin_->lease_id();
    rules_.Pinned();
    return true;
  }

  PinView ViewPin() const {
    if (!rules_.lease_open() || !pin_) return {};
    return pin_->View();
  }

  void NoteDecodeDecision(const router::RouteDecision& decision) {
    for (const router::Candidate& candidate : decision.candidates) {
      if (candidate.worker != decision.worker) continue;
      record_.decode_overlap_blocks = candidate.overlap_blocks;
      record_.pulled_blocks = candidate.pulled_blocks;
    }
    decode_decision_ = decision.decision_id;
    rules_.DecodeRouted(decision.worker);
  }

  // vLLM: the decode leg's route, by load and the prefix the worker holds
  // itself, and its body with the pin's params. False when the handoff
  // failed.
  bool RouteDecode() {
    const PinView pin = ViewPin();
    Perform(rules_.CheckPinBeforeDecode(pin));
    if (rules_.step() != HandoffStep::kRouteDecode) return false;
    std::optional<router::RouteDecision> decision =
        Decide(rules_.DecodeCandidates(), rules_.Pullable(pin), HandoffLeg::kDecode);
    if (!decision) return false;
    NoteDecodeDecision(*decision);
    decode_body_ = kv_transfer_params_.empty() ? request_.body
                                               : NixlDecodeBody(request_.body, kv_transfer_params_);
    return true;
  }

  // SGLang: one body with the bootstrap room for a prefill and a decode
  // worker at once (SGLang's router does the same); the prefill worker
  // pushes its KV to the decode worker, which streams the answer. Routes
  // both and pins; AwaitFirstToken sends them. False when the handoff
  // failed.
  bool DispatchBoth() {
    std::optional<router::RouteDecision> prefill =
        Decide(rules_.prefill_candidates(), 0, HandoffLeg::kPrefill);
    if (!prefill) return false;
    rules_.PrefillRouted(prefill->worker);
    record_.prefill_overlap_blocks = prefill->overlap_blocks;
    prefill_decision_ = prefill->decision_id;
    prefill_prediction_ = PredictionFor(*prefill);
    CountSpan(prefill->worker);
    Result<std::string> body = BootstrapBodyFor(prefill->worker);
    if (!body.ok()) {
      ReleasePrefill();
      Perform(rules_.Fail(Internal(body.status())));
      return false;
    }
    if (rules_.prefill_attempts() > 1) {
      // A fresh id for the second try: its lease is its own.
      if (Result<std::string> id = auth::RandomHexId(); id.ok()) record_.request_id = *id;
    }
    std::optional<router::RouteDecision> decode =
        Decide(rules_.DecodeCandidates(), record_.prompt_blocks, HandoffLeg::kDecode);
    if (!decode) {
      ReleasePrefill();
      return false;
    }
    NoteDecodeDecision(*decode);
    if (!Pin()) {
      ReleasePrefill();
      return false;
    }
    prefill_body_ = *body;
    decode_body_ = *std::move(body);
    prefill_answered_ = Clock::now();
    return true;
  }

  Result<std::string> BootstrapBodyFor(const std::string& prefill_worker) const {
    const std::optional<EngineAddress> engine = plane_.EngineOf(prefill_worker);
    if (!engine)
      return Status::Unavailable("worker '" + prefill_worker + "' has no engine URL now");
    uint64_t room = 0;
    KVGOV_RETURN_IF_ERROR(auth::FillRandom(std::span(reinterpret_cast<char*>(&room), sizeof room)));
    return BootstrapBody(request_.body, HostOf(engine->url), engine->bootstrap_port, room);
  }

  // Sends the decode leg (and SGLang's prefill leg beside it) and waits for
  // the decode worker's first token while a watchdog looks at the pin: a
  // lease that ends or a span governance withdraws fails the handoff and
  // closes the decode request, so the engine aborts it.
  asio::awaitable<void> AwaitFirstToken() {
    const asio::any_io_executor executor = co_await asio::this_coro::executor;
    watch_timer_.emplace(executor);
    asio::co_spawn(executor, WatchPin(shared_from_this()), asio::detached);
    if (bootstrap()) {
      asio::co_spawn(executor, ReadPrefillLeg(shared_from_this()), asio::detached);
    }
    LegAnswer leg;
    const std::string& worker = rules_.decode_worker();
    Status failure = co_await Send(worker, std::move(decode_body_), decode_call_);
    if (failure.ok()) {
      leg.status = decode_call_->status();
      if (leg.status >= 400) {
        Result<std::string> body = co_await decode_call_->ReadAll(kMaxEngineErrorBytes);
        engine_error_ = {body.ok() ? *body : "", decode_call_->content_type()};
        leg.error = engine_error_.body.substr(0, 256);
      } else if (!decode_call_->done()) {
        // An engine may send its head at once and the first token later,
        // or both together: the first piece of the body is the first token.
        Result<std::string_view> piece = co_await decode_call_->Read();
        if (piece.ok()) {
          first_piece_.assign(piece->data(), piece->size());
        } else {
          first_read_ = piece.status();
        }
      }
    }
    watch_timer_->cancel();  // the watchdog ends
    if (rules_.step() != HandoffStep::kAwaitFirstToken || client_gone_) {
      // The watchdog, the prefill leg or the client ended the wait.
      EndDecode();
      co_return;
    }
    leg.reached = failure.ok();  // a body that broke off after the head: relayed as an error
    if (!failure.ok()) {
      leg.timed_out = failure.code() == StatusCode::kDeadlineExceeded;
      leg.error = failure.message();
    }
    Perform(rules_.DecodeAnswered(leg));
    if (rules_.step() != HandoffStep::kRelay) {
      EndDecode();
      co_return;
    }
    record_.first_token_ms = clock::NowMillis();
    handoff_seconds_ = std::chrono::duration<double>(Clock::now() - prefill_answered_).count();
  }

  // Every kWithdrawalCheck until the first token: the pin as the rules see
  // it; a step other than waiting closes the decode leg.
  static asio::awaitable<void> WatchPin(std::shared_ptr<Handoff> self) {
    for (;;) {
      self->watch_timer_->expires_after(kWithdrawalCheck);
      boost::system::error_code ec;
      co_await self->watch_timer_->async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (ec || self->rules_.step() != HandoffStep::kAwaitFirstToken) co_return;
      self->Perform(self->rules_.CheckPinWhileWaiting(self->ViewPin()));
      if (self->rules_.step() != HandoffStep::kAwaitFirstToken) {
        self->AbortDecodeWait();
        co_return;
      }
    }
  }

  // The decode leg's wait ends now: its call is closed (not destroyed: its
  // reader is suspended in it) and AwaitFirstToken sees the rules' step.
  void AbortDecodeWait() {
    if (decode_call_) decode_call_->Abort();
  }

  // SGLang: the prefill leg, its answer read to its end beside the decode
  // leg and dropped (SGLang's router keeps it only for logprobs), its
  // usage accounted; a failure before the first token goes to the rules
  // (a retry, or the end).
  static asio::awaitable<void> ReadPrefillLeg(std::shared_ptr<Handoff> self) {
    const std::string worker = self->rules_.prefill_worker();
    std::string body = self->prefill_body_;
    WholeAnswer answer = co_await self->CallWhole(worker, std::move(body), self->prefill_call_,
                                                  kMaxWholeAnswerBytes);
    const std::string decision_id = self->prefill_decision_;
    self->ReleasePrefill();
    if (answer.leg.reached && answer.leg.status == 200) {
      self->record_.prefill_done_ms = clock::NowMillis();
      self->plane_.Account(worker, decision_id, self->prefill_prediction_,
                           DecodeEngineUsage(answer.body, UsageLimits()));
      co_return;
    }
    const bool waiting = self->rules_.step() == HandoffStep::kAwaitFirstToken;
    self->Perform(self->rules_.PrefillLegFailed(answer.leg));
    if (waiting && self->rules_.step() != HandoffStep::kAwaitFirstToken) self->AbortDecodeWait();
  }

  void ReleasePrefill() {
    if (prefill_decision_.empty()) return;
    plane_.Done(prefill_decision_);
    prefill_decision_.clear();
  }

  // Called with no read of the decode leg in progress.
  void EndDecode() {
    AbortDecodeWait();
    decode_call_.reset();
    if (decode_decision_.empty()) return;
    plane_.Done(decode_decision_);
    decode_decision_.clear();
  }

  // A streamed answer: the first token, then the rest as the engine sends
  // it, without the usage chunk the gateway asked for itself.
  asio::awaitable<void> RelayStream(Exchange& exchange) {
    UpstreamCall& call = *decode_call_;
    std::string content_type =
        call.content_type().empty() ? std::string(kEventStream) : call.content_type();
    const int status = call.status();
    if (!co_await exchange.StartStream(status, content_type)) co_return;
    const bool strip_usage = request_.strip_usage;
    const EventFilter keep = [strip_usage](std::string_view data) {
      if (!strip_usage || !data.starts_with('{')) return true;
      const std::optional<EngineUsage> usage = DecodeEngineUsage(data, UsageLimits());
      return !usage || !usage->usage_only;
    };
    const std::function<void()> settle = [this] {
      plane_.Prefilled(decode_decision_);
      Settle();
    };
    Status broke_off = first_read_;
    if (broke_off.ok()) {
      const RelayEnd end =
          co_await RelayEvents(exchange, call, std::move(first_piece_), keep, settle, plane_);
      if (end.client_gone) co_return;
      broke_off = end.upstream;
    }
    if (!broke_off.ok()) {
      std::string event =
          EncodeOpenAIErrorEvent("the engine's answer broke off: " + broke_off.message());
      co_await exchange.Send(event);
    }
    co_await exchange.EndStream();
  }

  // A whole answer: the first piece and the rest, passed on as it came.
  asio::awaitable<void> PassWhole(Exchange& exchange) {
    Settle();
    UpstreamCall& call = *decode_call_;
    std::string body = std::move(first_piece_);
    Status read = first_read_;
    if (read.ok() && !call.done()) {
      const size_t limit = kMaxWholeAnswerBytes - std::min(kMaxWholeAnswerBytes, body.size());
      Result<std::string> rest = co_await call.ReadAll(limit);
      if (rest.ok()) {
        body += *rest;
      } else {
        read = rest.status();
      }
    }
    if (exchange.client_gone()) co_return;
    if (!read.ok()) {
      std::string error = EncodeOpenAIErrorJson("the engine's answer broke off: " + read.message(),
                                                "upstream_error", "", "upstream_unreachable");
      co_await exchange.Respond(502, kJson, std::move(error), kNoHeaders);
      co_return;
    }
    plane_.CountRelayed(body.size());
    std::string content_type =
        call.content_type().empty() ? std::string(kJson) : call.content_type();
    const int status = call.status();
    co_await exchange.Respond(status, content_type, std::move(body), kNoHeaders);
  }

  // The rules' failure, for a client that has no byte of the answer yet:
  // an engine's own refusal as it came, else an OpenAI error.
  asio::awaitable<void> AnswerFailure(Exchange& exchange) {
    const HandoffFailure& failure = rules_.failure();
    const int status = failure.status;
    if (failure.engine_answer && !engine_error_.body.empty()) {
      std::string type =
          engine_error_.content_type.empty() ? std::string(kJson) : engine_error_.content_type;
      co_await exchange.Respond(status, type, std::move(engine_error_.body), kNoHeaders);
      co_return;
    }
    const std::string_view type = failure.code == "internal" ? "server_error"
                                  : status == 503            ? "service_unavailable"
                                                             : "upstream_error";
    std::string body = EncodeOpenAIErrorJson(failure.message, type, "", failure.code);
    co_await exchange.Respond(status, kJson, std::move(body), kNoHeaders);
  }

  struct EngineError {
    std::string body;
    std::string content_type;
  };

  Plane& plane_;
  UpstreamPool& upstreams_;
  const HandoffRequest request_;
  HandoffRules rules_;
  HandoffRecord record_;
  std::optional<double> handoff_seconds_;  // prefill answered -> first token
  Clock::time_point prefill_answered_;
  std::string kv_transfer_params_;  // the prefill answer's, opaque
  std::unique_ptr<HandoffPin> pin_;
  bool complete_lease_ = false;    // the rules completed the lease; Settle reports it
  std::string prefill_decision_;   // its load held until the leg's answer is read
  Prediction prefill_prediction_;  // SGLang's, for its leg read beside
  std::string prefill_body_;       // SGLang's prefill leg
  std::optional<UpstreamCall> prefill_call_;
  std::string decode_decision_;  // its load held until the answer ends
  std::string decode_body_;
  std::optional<UpstreamCall> decode_call_;
  std::optional<asio::steady_timer> watch_timer_;
  std::string first_piece_;   // the decode answer's first token
  Status first_read_;         // why the first piece did not come, when it broke off
  EngineError engine_error_;  // an engine's own error answer, for the client as it came
  bool client_gone_ = false;
};

}  // namespace

asio::awaitable<void> ServeHandoff(Plane& plane, Exchange& exchange, HandoffRequest request) {
  auto handoff = std::make_shared<Handoff>(plane, exchange.upstreams(), std::move(request));
  co_await handoff->Serve(exchange);
}

}  // namespace kvgov::gateway
