#include "server/handoff.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>

#include "kvgov/auth/entropy.h"
#include "kvgov/clock/clock.h"
#include "kvgov/codec/gateway_api.h"
#include "kvgov/core/nixl_lease.h"
#include "kvgov/gateway/handoff_rules.h"
#include "kvgov/index/block_key.h"
#include "kvgov/log/log.h"
#include "server/access.h"
#include "server/daemon.h"
#include "server/gateway_upstream.h"
#include "server/governance_api.h"
#include "server/http_api.h"

namespace kvgov::server {

void HandoffLog::Add(HandoffRecord record) {
  std::lock_guard lock(mu_);
  records_.push_back(std::move(record));
  while (records_.size() > kKept) records_.pop_front();
}

std::vector<HandoffRecord> HandoffLog::NewestFirst(std::string_view tenant) const {
  std::lock_guard lock(mu_);
  std::vector<HandoffRecord> out;
  for (auto it = records_.rbegin(); it != records_.rend(); ++it) {
    if (tenant.empty() || it->tenant == tenant) out.push_back(*it);
  }
  return out;
}

ingest::EngineRole RoleOf(const Daemon& daemon, std::string_view worker) {
  const ingest::EngineSpec* engine = EngineOf(daemon, worker);
  return engine == nullptr ? ingest::EngineRole::kBoth : engine->role;
}

bool ServedDisaggregated(const Daemon& daemon, const std::vector<std::string>& serving) {
  return std::any_of(serving.begin(), serving.end(), [&](const std::string& worker) {
    return RoleOf(daemon, worker) != ingest::EngineRole::kBoth;
  });
}

namespace {

using Clock = std::chrono::steady_clock;

// How often a handoff waiting for the decode worker's first token looks
// again at its lease and its span: a withdrawal reaches a pending handoff
// within this.
constexpr std::chrono::milliseconds kWithdrawalCheck{10};

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

// The failure, for a client that has no byte of the answer yet: an
// engine's own refusal as it came, else an OpenAI error.
void AnswerFailure(const gateway::HandoffFailure& failure, const std::string& engine_body,
                   httplib::Response& response) {
  if (failure.engine_answer && !engine_body.empty()) {
    response.status = failure.status;
    response.set_content(engine_body, "application/json");
    return;
  }
  const std::string_view type = failure.code == "internal"  ? "server_error"
                                : failure.status == 503     ? "service_unavailable"
                                                            : "upstream_error";
  SendOpenAIError(response, failure.status, failure.message, type, "", failure.code);
}

using gateway::HandoffLeg;
using gateway::HandoffProtocol;
using gateway::HandoffRules;
using gateway::HandoffStep;
using gateway::LeaseMove;
using gateway::LegAnswer;

// One request's way through both steps: performs what HandoffRules decides
// (routing, the legs' I/O, the lease reports) and records it. Lives on the
// handler's stack, or in a shared_ptr for a streamed answer's provider;
// one thread at a time.
class Handoff {
 public:
  Handoff(Daemon& daemon, HandoffRequest request)
      : daemon_(daemon),
        request_(std::move(request)),
        rules_(ProtocolOf(daemon, request_), request_.prefill_pool, request_.decode_pool,
               request_.stream) {
    record_.model = request_.model;
    record_.tenant = request_.tenant;
    record_.protocol = bootstrap() ? "bootstrap" : "nixl";
    record_.started_ms = clock::NowMillis();
  }
  Handoff(const Handoff&) = delete;
  Handoff& operator=(const Handoff&) = delete;

  // Ends what is still open (the decode decision's load, a lease no first
  // token released) and records the handoff, once.
  ~Handoff() {
    if (decode_) EndDecode();
    if (rules_.step() == HandoffStep::kRelay) Settle();
    Perform(rules_.ClientGone());  // abandoned before the relay; else nothing
    if (prefill_) {
      (void)daemon_.router->Done(prefill_->decision_id);
      prefill_.reset();
    }
    record_.outcome = rules_.outcome();
    record_.error = rules_.step() == HandoffStep::kFailed ? rules_.failure().message : "";
    record_.prefill_worker = rules_.prefill_worker();
    record_.decode_worker = rules_.decode_worker();
    record_.prefill_attempts = rules_.prefill_attempts();
    daemon_.gateway_metrics.handoffs->WithLabels({std::string(ToString(record_.outcome))})->Inc();
    daemon_.handoffs.Add(std::move(record_));
  }

  // Everything before the decode step: the request id and, for NIXL, the
  // prefill leg answered and pinned (SGLang's is sent with its decode leg).
  // False when the client has been answered (an error).
  bool Prepare(httplib::Response& response) {
    Result<std::string> id = auth::RandomHexId();
    if (!id.ok()) return Refuse(Internal(id.status()), response);
    record_.request_id = *id;
    return bootstrap() ? true : Prefill(response);
  }

  // The decode step, up to the first token: routes, sends, and waits while
  // the span stays pinned and governed. False when the handoff failed
  // (`rules().failure()`); nothing was sent to the client then.
  bool Decode() {
    for (;;) {
      if (rules_.step() == HandoffStep::kRouteBoth) {
        if (!DispatchBoth()) return false;
      } else if (!StartDecode()) {
        return false;
      }
      if (AwaitFirstToken()) return true;
      // SGLang's prefill failed before the first token: both legs go again
      // with a new room, on the next prefill worker.
      if (rules_.step() != HandoffStep::kRouteBoth) return false;
      daemon_.gateway_metrics.retries->WithLabels({})->Inc();
    }
  }

  // After the first token has gone on to the client, off its path: the
  // lease is released (the transfer is done) and SGLang's prefill answer
  // read and accounted. Idempotent.
  void Settle() {
    if (complete_lease_) {
      complete_lease_ = false;
      EndLease(NIXLLeaseEvent::kTransferComplete);
    }
    if (bootstrap()) FinishPrefillLeg();
  }

  // The decode worker's answer, for the client: a head that came with the
  // first token, and the relay to read on.
  Upstream& decode() { return *decode_; }
  int decode_status() const { return decode_status_; }
  const std::string& decode_content_type() const { return decode_content_type_; }
  std::unique_ptr<Upstream> TakeDecode() { return std::move(decode_); }

  const HandoffRules& rules() const { return rules_; }
  // An engine's own error answer, passed on as it came when the rules say
  // so (a 4xx is the client's to read).
  const std::string& engine_error_body() const { return engine_error_body_; }

  void ClientGone() { Perform(rules_.ClientGone()); }

 private:
  static HandoffProtocol ProtocolOf(const Daemon& daemon, const HandoffRequest& request) {
    // A pool mixes engine kinds only by mistake; the first prefill worker's
    // kind decides.
    const ingest::EngineSpec* first =
        request.prefill_pool.empty() ? nullptr : EngineOf(daemon, request.prefill_pool.front());
    return first != nullptr && first->kind == ingest::EngineKind::kSglang
               ? HandoffProtocol::kBootstrap
               : HandoffProtocol::kNixl;
  }
  bool bootstrap() const { return rules_.protocol() == HandoffProtocol::kBootstrap; }

  static gateway::HandoffFailure Internal(const Status& status) {
    return {gateway::HandoffOutcome::kPrefillFailed, 500, "internal", status.message()};
  }

  void Perform(LeaseMove move) {
    if (move == LeaseMove::kAbort) EndLease(NIXLLeaseEvent::kAbort);
    // kComplete waits for Settle, off the first token's path.
    if (move == LeaseMove::kComplete) complete_lease_ = true;
  }

  // Routes one leg among `pool`; nullopt (the failure given to the rules)
  // when the route is refused or no worker there is eligible.
  std::optional<router::RouteDecision> Decide(const std::vector<std::string>& pool,
                                              uint64_t pullable, HandoffLeg leg) {
    const gateway::HandoffOutcome failed = leg == HandoffLeg::kPrefill
                                               ? gateway::HandoffOutcome::kPrefillFailed
                                               : gateway::HandoffOutcome::kDecodeFailed;
    Result<std::string> id = auth::RandomHexId();
    if (!id.ok()) {
      Perform(rules_.Fail({failed, 500, "internal", id.status().message()}));
      return std::nullopt;
    }
    router::RouteRequest route{request_.model, request_.tenant, request_.tokens, "", pool};
    route.pullable_blocks = pullable;
    route.salt_must_be_honoured = request_.diverted;
    Result<router::RouteDecision> decision =
        daemon_.router->Route(route, request_.salt, *id, clock::NowMillis());
    if (!decision.ok()) {
      Perform(rules_.Fail({failed, 400, "invalid_value", decision.status().message()}));
      return std::nullopt;
    }
    if (decision->worker.empty()) {
      Perform(rules_.NoEligibleWorker(leg, IneligibleReasons(*decision)));
      return std::nullopt;
    }
    daemon_.tenants_seen.Note(request_.tenant);
    ExpectSaltedBlocks(daemon_, route, request_.salt, *decision);
    // The console's traffic counts a request once, by its prefill: the
    // decode step's credit is what it need not pull, not prefill saved.
    if (leg == HandoffLeg::kPrefill) daemon_.route_totals.Count(*decision);
    return *std::move(decision);
  }

  // The prompt's keys on the prefill worker, which the pin holds.
  void KeyTheSpan(const std::string& prefill_worker) {
    const std::optional<index::WorkerResidency> worker = daemon_.index.Worker(prefill_worker);
    const int64_t block_size = worker ? std::max<int64_t>(1, worker->block_size) : 16;
    keys_ = index::RequestChain(daemon_.index.hasher(), {request_.model, "", 0}, request_.salt,
                                request_.tokens, block_size);
    record_.prompt_blocks = keys_.size();
  }

  // vLLM: the prefill leg, tried on a second prefill worker when the first
  // gives no answer or a 5xx; its kv_transfer_params then pin the span.
  bool Prefill(httplib::Response& response) {
    Result<std::string> body = NixlPrefillBody(request_.body);
    if (!body.ok()) return Refuse(Internal(body.status()), response);
    std::string answer;
    int status = 0;
    std::string content_type;
    while (rules_.step() == HandoffStep::kRoutePrefill) {
      std::optional<router::RouteDecision> decision =
          Decide(rules_.prefill_candidates(), 0, HandoffLeg::kPrefill);
      if (!decision) break;
      rules_.PrefillRouted(decision->worker);
      record_.prefill_overlap_blocks = decision->overlap_blocks;
      prefill_ = StartUpstream(daemon_, decision->worker, decision->decision_id, request_.path,
                               *body, record_.request_id);
      KeyTheSpan(decision->worker);
      prefill_->prediction = PredictionFor(*decision);
      answer.clear();
      Status failure = ReadWhole(*prefill_, &status, &content_type, &answer);
      (void)daemon_.router->Done(prefill_->decision_id);
      LegAnswer leg{failure.ok(), failure.code() == StatusCode::kDeadlineExceeded, status,
                    failure.message()};
      if (leg.reached && status < 500) {
        Account(daemon_, prefill_->worker, prefill_->decision_id, prefill_->prediction,
                status == 200 ? DecodeEngineUsage(answer, UsageLimits()) : std::nullopt);
      }
      prefill_.reset();
      gateway::PinParams pin = gateway::PinParams::kNone;
      if (leg.reached && status == 200) {
        Result<std::optional<std::string>> params = DecodeKvTransferParams(answer, UsageLimits());
        if (!params.ok()) {
          pin = gateway::PinParams::kMalformed;
          leg.error = params.status().message();
        } else if (params->has_value()) {
          pin = gateway::PinParams::kPresent;
          kv_transfer_params_ = **params;
        }
      }
      rules_.PrefillAnswered(leg, pin);
      if (rules_.step() == HandoffStep::kRoutePrefill) {
        daemon_.gateway_metrics.retries->WithLabels({})->Inc();
      }
    }
    if (rules_.step() == HandoffStep::kFailed) {
      if (rules_.failure().engine_answer) {
        response.status = status;
        response.set_content(answer, content_type.empty() ? "application/json" : content_type);
        return false;
      }
      return Refuse(response);
    }
    record_.prefill_done_ms = clock::NowMillis();
    prefill_answered_ = Clock::now();
    if (rules_.step() == HandoffStep::kPin && !Pin()) return Refuse(response);
    return true;
  }

  // Witnesses the pin as a lease of its own: the prefill worker's span,
  // its engine's pin time as the TTL. False (the rules told) when it
  // cannot be recorded.
  bool Pin() {
    const ingest::EngineSpec* engine = EngineOf(daemon_, rules_.prefill_worker());
    NIXLLease lease;
    lease.lease_id = "handoff-" + record_.request_id;
    lease.request_id = record_.request_id;
    lease.remote_engine = rules_.prefill_worker();
    // The span by its last block's key: it names the whole chain. A prompt
    // shorter than a block pins nothing kvgov can name: unidentified.
    if (!keys_.empty()) {
      char digest[17];
      std::snprintf(digest, sizeof(digest), "%016llx",
                    static_cast<unsigned long long>(keys_.back()));
      lease.span_digest = digest;
    }
    lease.tokens = static_cast<int64_t>(request_.tokens.size());
    lease.model_id = request_.model;
    lease.role = rules_.lease_role();
    lease.event = NIXLLeaseEvent::kCreate;
    lease.ttl_ms = engine == nullptr ? 30000 : engine->kv_lease_ms;
    lease.witness = NIXLLeaseWitness::kHandoff;
    SpanResidency span;
    span.worker = rules_.prefill_worker();
    span.token_ids = request_.tokens;
    span.cache_salt = request_.salt;
    if (Status pinned = ApplyLeaseReport(daemon_, lease, span, kDaemonActor); !pinned.ok()) {
      rules_.PinRefused(pinned.message());
      return false;
    }
    record_.lease_id = lease.lease_id;
    rules_.Pinned();
    return true;
  }

  void EndLease(NIXLLeaseEvent event) {
    NIXLLease report;
    report.lease_id = record_.lease_id;
    report.event = event;
    report.witness = NIXLLeaseWitness::kHandoff;
    // A lease the expiry timer ended first stays expired (terminal).
    if (Status ended = ApplyLeaseReport(daemon_, report, std::nullopt, kDaemonActor);
        !ended.ok() && ended.code() != StatusCode::kFailedPrecondition) {
      log::Line(log::Level::kError, "handoff.lease_not_ended")
          .Field("lease", record_.lease_id)
          .Field("event", ToString(event))
          .Field("error", ended.ToString());
    }
  }

  // The pin as the lease table and the gate see it at the route's clock.
  gateway::PinView ViewPin(int64_t now_ms) const {
    gateway::PinView pin;
    if (!rules_.lease_open()) return pin;
    pin.lease_id = record_.lease_id;
    pin.span_blocks = keys_.size();
    const std::optional<NIXLLease> lease = daemon_.leases.Get(record_.lease_id);
    pin.lease_state = lease ? LeaseStateAt(*lease, now_ms) : NIXLLeaseState::kFailed;
    if (pin.lease_state != NIXLLeaseState::kActive) return pin;
    const router::SpanGate::Limit limit =
        daemon_.gate.Creditable(rules_.prefill_worker(), keys_, keys_.size(), now_ms);
    pin.creditable_blocks = limit.creditable;
    pin.limit = std::string(ToString(limit.kind));
    if (limit.reason != LookupReason::kNone) pin.limit += "/" + std::string(ToString(limit.reason));
    return pin;
  }

  void NoteDecodeDecision(const router::RouteDecision& decision) {
    for (const router::Candidate& candidate : decision.candidates) {
      if (candidate.worker != decision.worker) continue;
      record_.decode_overlap_blocks = candidate.overlap_blocks;
      record_.pulled_blocks = candidate.pulled_blocks;
    }
  }

  // vLLM: the decode leg, with the pin's params, to the decode worker the
  // router chose by load and the prefix it holds itself.
  bool StartDecode() {
    const gateway::PinView pin = ViewPin(clock::NowMillis());
    Perform(rules_.CheckPinBeforeDecode(pin));
    if (rules_.step() != HandoffStep::kRouteDecode) return false;
    std::optional<router::RouteDecision> decision =
        Decide(rules_.DecodeCandidates(), rules_.Pullable(pin), HandoffLeg::kDecode);
    if (!decision) return false;
    NoteDecodeDecision(*decision);
    rules_.DecodeRouted(decision->worker);
    std::string body = kv_transfer_params_.empty()
                           ? request_.body
                           : NixlDecodeBody(request_.body, kv_transfer_params_);
    decode_ = StartUpstream(daemon_, decision->worker, decision->decision_id, request_.path,
                            std::move(body), record_.request_id);
    return true;
  }

  // SGLang: one body with the bootstrap room to a prefill and a decode
  // worker at once (SGLang's router does the same); the prefill worker
  // pushes its KV to the decode worker, which streams the answer.
  bool DispatchBoth() {
    std::optional<router::RouteDecision> prefill =
        Decide(rules_.prefill_candidates(), 0, HandoffLeg::kPrefill);
    if (!prefill) return false;
    rules_.PrefillRouted(prefill->worker);
    record_.prefill_overlap_blocks = prefill->overlap_blocks;
    KeyTheSpan(prefill->worker);
    const ingest::EngineSpec* engine = EngineOf(daemon_, prefill->worker);
    std::mt19937_64 rooms(std::random_device{}());
    Result<std::string> body =
        BootstrapBody(request_.body, HostOf(OpenAIUrl(daemon_, prefill->worker)),
                      engine == nullptr ? 8998 : engine->bootstrap_port, rooms());
    if (!body.ok()) {
      (void)daemon_.router->Done(prefill->decision_id);
      Perform(rules_.Fail(Internal(body.status())));
      return false;
    }
    if (rules_.prefill_attempts() > 1) {
      // A fresh id for the second try: its lease is its own.
      Result<std::string> id = auth::RandomHexId();
      if (id.ok()) record_.request_id = *id;
    }
    std::optional<router::RouteDecision> decode =
        Decide(rules_.DecodeCandidates(), keys_.size(), HandoffLeg::kDecode);
    if (!decode) {
      (void)daemon_.router->Done(prefill->decision_id);
      return false;
    }
    NoteDecodeDecision(*decode);
    rules_.DecodeRouted(decode->worker);
    if (!Pin()) {
      (void)daemon_.router->Done(prefill->decision_id);
      (void)daemon_.router->Done(decode->decision_id);
      return false;
    }
    prefill_ = StartUpstream(daemon_, prefill->worker, prefill->decision_id, request_.path, *body,
                             record_.request_id);
    prefill_->prediction = PredictionFor(*prefill);
    decode_ = StartUpstream(daemon_, decode->worker, decode->decision_id, request_.path,
                            *std::move(body), record_.request_id);
    prefill_answered_ = Clock::now();
    return true;
  }

  // Waits for the decode worker's first token (the first byte of its body)
  // while the rules watch the pin: a lease that ends or a span governance
  // withdraws fails the handoff, and the decode request is closed so the
  // engine aborts it.
  bool AwaitFirstToken() {
    // An engine may hold its head back until the first token as well as
    // send it at once: the pin is watched through both.
    while (!decode_->relay->WaitForChunkOrEnd(kWithdrawalCheck)) {
      if (bootstrap()) WatchPrefillLeg();
      if (rules_.step() == HandoffStep::kAwaitFirstToken) {
        Perform(rules_.CheckPinWhileWaiting(ViewPin(clock::NowMillis())));
      }
      if (rules_.step() != HandoffStep::kAwaitFirstToken) {
        EndDecode();
        return false;
      }
    }
    Status failure;
    LegAnswer leg;
    leg.reached = decode_->relay->WaitForHead(&decode_status_, &decode_content_type_, &failure);
    leg.status = decode_status_;
    if (!leg.reached) {
      leg.timed_out = failure.code() == StatusCode::kDeadlineExceeded;
      leg.error = failure.message();
    } else if (decode_status_ >= 400) {
      int status = 0;
      std::string content_type;
      (void)ReadWhole(*decode_, &status, &content_type, &engine_error_body_);
      leg.error = engine_error_body_.substr(0, 256);
    }
    Perform(rules_.DecodeAnswered(leg));
    if (rules_.step() != HandoffStep::kRelay) {
      EndDecode();
      return false;
    }
    record_.first_token_ms = clock::NowMillis();
    daemon_.gateway_metrics.handoff_seconds->WithLabels({})->Observe(
        std::chrono::duration<double>(Clock::now() - prefill_answered_).count());
    return true;
  }

  // SGLang: the prefill leg's answer, read on the side while the decode
  // leg waits; a failure goes to the rules (a retry, or the end).
  void WatchPrefillLeg() {
    if (!prefill_ || !prefill_->relay->WaitForChunkOrEnd(std::chrono::milliseconds(0))) return;
    int status = 0;
    std::string content_type;
    std::string body;
    Status read = ReadWhole(*prefill_, &status, &content_type, &body);
    if (read.ok() && status == 200) return FinishPrefillLeg(std::move(body));
    (void)daemon_.router->Done(prefill_->decision_id);
    prefill_.reset();
    Perform(rules_.PrefillLegFailed(
        {read.ok(), read.code() == StatusCode::kDeadlineExceeded, status, read.message()}));
  }

  // SGLang's prefill answer is read to its end and dropped (its router
  // keeps it only for logprobs); its usage is the prefill's to account.
  void FinishPrefillLeg(std::string body = "") {
    if (!prefill_) return;
    if (body.empty()) {
      int status = 0;
      std::string content_type;
      if (!ReadWhole(*prefill_, &status, &content_type, &body).ok() || status != 200) {
        body.clear();
      }
    }
    record_.prefill_done_ms = clock::NowMillis();
    (void)daemon_.router->Done(prefill_->decision_id);
    Account(daemon_, prefill_->worker, prefill_->decision_id, prefill_->prediction,
            body.empty() ? std::nullopt : DecodeEngineUsage(body, UsageLimits()));
    prefill_.reset();
  }

  void EndDecode() {
    decode_->relay->Cancel();
    (void)daemon_.router->Done(decode_->decision_id);
    decode_.reset();
  }

  // The whole answer of `upstream` (the head already seen or not).
  static Status ReadWhole(Upstream& upstream, int* status, std::string* content_type,
                          std::string* body) {
    Status failure;
    if (!upstream.relay->WaitForHead(status, content_type, &failure)) return failure;
    return ReadWholeBody(*upstream.relay, body);
  }

  Prediction PredictionFor(const router::RouteDecision& decision) const {
    const std::optional<index::WorkerResidency> worker = daemon_.index.Worker(decision.worker);
    const int64_t block_size = worker ? std::max<int64_t>(1, worker->block_size) : 1;
    return {request_.model, request_.tenant, static_cast<int64_t>(request_.tokens.size()),
            static_cast<int64_t>(decision.overlap_blocks) * block_size, block_size};
  }

  // Fails with `failure` and answers the client with it.
  bool Refuse(gateway::HandoffFailure failure, httplib::Response& response) {
    Perform(rules_.Fail(std::move(failure)));
    return Refuse(response);
  }
  // Answers the client with the rules' failure.
  bool Refuse(httplib::Response& response) const {
    AnswerFailure(rules_.failure(), engine_error_body_, response);
    return false;
  }

  Daemon& daemon_;
  const HandoffRequest request_;
  HandoffRules rules_;
  HandoffRecord record_;
  std::vector<index::BlockKey> keys_;
  std::string kv_transfer_params_;  // the prefill answer's, opaque
  bool complete_lease_ = false;     // the rules completed the lease; Settle reports it
  Clock::time_point prefill_answered_;
  std::unique_ptr<Upstream> prefill_;  // the prefill leg, until its answer is read
  std::unique_ptr<Upstream> decode_;
  int decode_status_ = 0;
  std::string decode_content_type_;
  std::string engine_error_body_;
};

}  // namespace

void RegisterHandoffApi(httplib::Server& http, Daemon& daemon) {
  http.Get("/v1/handoffs",
           Guard(daemon, auth::Role::kRead,
                 [&daemon](const httplib::Request&, httplib::Response& response,
                           const auth::Principal& caller) {
                   nlohmann::json out = nlohmann::json::array();
                   for (const HandoffRecord& r : daemon.handoffs.NewestFirst(caller.tenant)) {
                     out.push_back({{"request_id", r.request_id},
                                    {"model", r.model},
                                    {"tenant", r.tenant},
                                    {"protocol", r.protocol},
                                    {"prefill",
                                     {{"worker", r.prefill_worker},
                                      {"attempts", r.prefill_attempts},
                                      {"overlap_blocks", r.prefill_overlap_blocks}}},
                                    {"decode",
                                     {{"worker", r.decode_worker},
                                      {"overlap_blocks", r.decode_overlap_blocks},
                                      {"pulled_blocks", r.pulled_blocks}}},
                                    {"prompt_blocks", r.prompt_blocks},
                                    {"lease_id", r.lease_id},
                                    {"outcome", std::string(ToString(r.outcome))},
                                    {"error", r.error},
                                    {"started_ms", r.started_ms},
                                    {"prefill_done_ms", r.prefill_done_ms},
                                    {"first_token_ms", r.first_token_ms}});
                   }
                   SendJson(response, 200, {{"handoffs", std::move(out)}});
                 }));
}

void ServeHandoff(Daemon& daemon, HandoffRequest request, httplib::Response& response) {
  const bool stream = request.stream;
  const bool strip_usage = request.strip_usage;
  auto handoff = std::make_shared<Handoff>(daemon, std::move(request));
  if (!handoff->Prepare(response)) return;
  if (!stream) {
    if (!handoff->Decode()) {
      return AnswerFailure(handoff->rules().failure(), handoff->engine_error_body(), response);
    }
    std::string body;
    bool finished = false;
    Status outcome;
    Upstream& decode = handoff->decode();
    while (!finished) {
      for (std::string& chunk : decode.relay->Next(&finished, &outcome)) body += chunk;
    }
    if (!outcome.ok()) {
      return SendOpenAIError(response, 502, "the engine's answer broke off: " + outcome.message(),
                             "upstream_error", "", "upstream_unreachable");
    }
    response.status = handoff->decode_status();
    response.set_content(std::move(body), handoff->decode_content_type().empty()
                                              ? "application/json"
                                              : handoff->decode_content_type());
    handoff->Settle();
    return;
  }
  // The decode step runs in the stream's provider: a client gone while the
  // prefill ran is seen there, before the decode request is sent. From
  // here on the status is 200 and a failure is an error event.
  struct StreamState {
    std::shared_ptr<Handoff> handoff;
    std::unique_ptr<StreamPump> pump;
  };
  auto state = std::make_shared<StreamState>();
  state->handoff = std::move(handoff);
  response.status = 200;
  response.set_chunked_content_provider(
      "text/event-stream",
      [state, strip_usage](size_t, httplib::DataSink& sink) {
        if (!state->pump) {
          if (!sink.is_writable()) {
            state->handoff->ClientGone();
            return false;
          }
          if (!state->handoff->Decode()) {
            const std::string event =
                EncodeOpenAIErrorEvent(state->handoff->rules().failure().message);
            sink.write(event.data(), event.size());
            sink.done();
            return true;
          }
          state->pump = std::make_unique<StreamPump>();
          state->pump->upstream = state->handoff->TakeDecode();
          state->pump->strip_usage = strip_usage;
          const bool alive = state->pump->Pump(sink);  // the first token, to the client first
          state->handoff->Settle();
          return alive;
        }
        return state->pump->Pump(sink);
      },
      [state, &daemon](bool success) {
        if (state->pump) {
          state->pump->upstream->relay->Cancel();
          (void)daemon.router->Done(state->pump->upstream->decision_id);
          state->pump.reset();
        } else if (!success) {
          state->handoff->ClientGone();
        }
        state->handoff.reset();  // records the handoff
      });
}

}  // namespace kvgov::server
