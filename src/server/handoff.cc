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

// Why a pinned span earns no decode-side credit now.
struct Withdrawal {
  HandoffOutcome outcome;
  std::string reason;
};

// One request's way through both steps. Lives on the handler's stack, or
// in a shared_ptr for a streamed answer's provider; one thread at a time.
class Handoff {
 public:
  Handoff(Daemon& daemon, HandoffRequest request)
      : daemon_(daemon), request_(std::move(request)) {
    record_.model = request_.model;
    record_.tenant = request_.tenant;
    record_.started_ms = clock::NowMillis();
  }
  Handoff(const Handoff&) = delete;
  Handoff& operator=(const Handoff&) = delete;

  // Ends what is still open (a lease no first token released, the decode
  // decision's load) and records the handoff, once.
  ~Handoff() {
    if (decode_) EndDecode();
    if (record_.first_token_ms > 0) Settle();
    if (prefill_) {
      (void)daemon_.router->Done(prefill_->decision_id);
      prefill_.reset();
    }
    if (lease_open_) EndLease(NIXLLeaseEvent::kAbort);
    daemon_.gateway_metrics.handoffs->WithLabels({std::string(ToString(record_.outcome))})->Inc();
    daemon_.handoffs.Add(std::move(record_));
  }

  // Everything before the decode step: the request id, the protocol, the
  // prefill (NIXL: answered; SGLang: dispatched with its decode leg).
  // False when the client has been answered (an error).
  bool Prepare(httplib::Response& response) {
    Result<std::string> id = auth::RandomHexId();
    if (!id.ok()) {
      SendOpenAIError(response, 500, id.status().message(), "server_error", "", "internal");
      return Fail(HandoffOutcome::kPrefillFailed, id.status().message());
    }
    record_.request_id = *id;
    // A pool mixes engine kinds only by mistake; the prefill worker's kind
    // decides the protocol.
    const ingest::EngineSpec* first = EngineOf(daemon_, request_.prefill_pool.front());
    bootstrap_ = first != nullptr && first->kind == ingest::EngineKind::kSglang;
    record_.protocol = bootstrap_ ? "bootstrap" : "nixl";
    prefill_candidates_ = request_.prefill_pool;
    return bootstrap_ ? true : Prefill(response);
  }

  // The decode step, up to the first token: routes, sends, and waits while
  // the span stays pinned and governed. False when the handoff failed; its
  // error is then `error()` with `error_status()`, and nothing was sent to
  // the client.
  bool Decode() {
    for (int attempt = 0; attempt < (bootstrap_ ? 2 : 1); ++attempt) {
      if (bootstrap_ && !DispatchBoth()) return false;
      if (!bootstrap_ && !StartDecode()) return false;
      if (AwaitFirstToken()) return true;
      // SGLang's prefill failed before the first token: both legs go again
      // with a new room, on the next prefill worker, and the failure
      // recorded is that of the try that follows.
      if (!bootstrap_ || !retry_prefill_) return false;
      retry_prefill_ = false;
      record_.outcome = HandoffOutcome::kCompleted;
      record_.error.clear();
      daemon_.gateway_metrics.retries->WithLabels({})->Inc();
    }
    return false;
  }

  // After the first token has gone on to the client, off its path: the
  // lease is released (the transfer is done) and SGLang's prefill answer
  // read and accounted. Idempotent.
  void Settle() {
    if (lease_open_) EndLease(NIXLLeaseEvent::kTransferComplete);
    if (bootstrap_) FinishPrefillLeg();
  }

  // The decode worker's answer, for the client: a head that came with the
  // first token, and the relay to read on.
  Upstream& decode() { return *decode_; }
  int decode_status() const { return decode_status_; }
  const std::string& decode_content_type() const { return decode_content_type_; }
  std::unique_ptr<Upstream> TakeDecode() { return std::move(decode_); }

  int error_status() const { return error_status_; }
  const std::string& error() const { return record_.error; }
  const std::string& error_code() const { return error_code_; }
  // An engine's own error answer, passed on as it came (a 4xx of the
  // prefill worker is the client's to read).
  const std::string& engine_error_body() const { return engine_error_body_; }

  void ClientGone() { Fail(HandoffOutcome::kClientGone, "the client went away"); }

 private:
  // Records the failure; the destructor ends the lease and counts it.
  bool Fail(HandoffOutcome outcome, std::string error, int status = 502,
            std::string code = "upstream_error") {
    record_.outcome = outcome;
    record_.error = std::move(error);
    error_status_ = status;
    error_code_ = std::move(code);
    return false;
  }

  router::RouteRequest Route(const std::vector<std::string>& pool, uint64_t pullable) const {
    router::RouteRequest route{request_.model, request_.tenant, request_.tokens, "", pool};
    route.pullable_blocks = pullable;
    route.salt_must_be_honoured = request_.diverted;
    return route;
  }

  // Routes one step among `pool`; nullopt (and the failure recorded) when
  // no worker there is eligible.
  std::optional<router::RouteDecision> Decide(const std::vector<std::string>& pool,
                                              uint64_t pullable, HandoffOutcome failure,
                                              std::string_view step) {
    Result<std::string> id = auth::RandomHexId();
    if (!id.ok()) {
      Fail(failure, id.status().message(), 500, "internal");
      return std::nullopt;
    }
    const router::RouteRequest route = Route(pool, pullable);
    Result<router::RouteDecision> decision =
        daemon_.router->Route(route, request_.salt, *id, clock::NowMillis());
    if (!decision.ok()) {
      Fail(failure, decision.status().message(), 400, "invalid_value");
      return std::nullopt;
    }
    if (decision->worker.empty()) {
      const std::string reasons = IneligibleReasons(*decision);
      Fail(failure,
           "no eligible " + std::string(step) + " worker" +
               (reasons.empty() ? std::string() : " (" + reasons + ")"),
           503, "no_eligible_worker");
      return std::nullopt;
    }
    daemon_.tenants_seen.Note(request_.tenant);
    ExpectSaltedBlocks(daemon_, route, request_.salt, *decision);
    // The console's traffic counts a request once, by its prefill: the
    // decode step's credit is what it need not pull, not prefill saved.
    if (step == "prefill") daemon_.route_totals.Count(*decision);
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
    if (!body.ok()) {
      SendOpenAIError(response, 500, body.status().message(), "server_error", "", "internal");
      return Fail(HandoffOutcome::kPrefillFailed, body.status().message());
    }
    std::vector<std::string> pool = request_.prefill_pool;
    std::string answer;
    for (int attempt = 0;; ++attempt) {
      std::optional<router::RouteDecision> decision =
          Decide(pool, 0, HandoffOutcome::kPrefillFailed, "prefill");
      if (!decision) return Refuse(response);
      ++record_.prefill_attempts;
      record_.prefill_worker = decision->worker;
      record_.prefill_overlap_blocks = decision->overlap_blocks;
      prefill_ = StartUpstream(daemon_, decision->worker, decision->decision_id, request_.path,
                               *body, record_.request_id);
      KeyTheSpan(decision->worker);
      prefill_->prediction = PredictionFor(*decision);
      int status = 0;
      std::string content_type;
      Status failure = ReadWhole(*prefill_, &status, &content_type, &answer);
      (void)daemon_.router->Done(prefill_->decision_id);
      const bool answered = failure.ok() && status < 500;
      if (answered) {
        Account(daemon_, prefill_->worker, prefill_->decision_id, prefill_->prediction,
                status == 200 ? DecodeEngineUsage(answer, UsageLimits()) : std::nullopt);
      }
      prefill_.reset();
      if (answered && status != 200) {
        // The engine refused the request itself: the client's to read.
        engine_error_body_ = answer;
        Fail(HandoffOutcome::kPrefillFailed,
             "the prefill worker answered HTTP " + std::to_string(status), status,
             "upstream_error");
        response.status = status;
        response.set_content(answer, content_type.empty() ? "application/json" : content_type);
        return false;
      }
      if (answered) break;
      std::erase(pool, record_.prefill_worker);
      const std::string why =
          failure.ok() ? "HTTP " + std::to_string(status) : failure.message();
      if (attempt == 1 || pool.empty()) {
        const bool timed_out = failure.code() == StatusCode::kDeadlineExceeded;
        Fail(HandoffOutcome::kPrefillFailed, "the prefill worker failed: " + why,
             timed_out ? 504 : 502, timed_out ? "upstream_timeout" : "upstream_unreachable");
        return Refuse(response);
      }
      daemon_.gateway_metrics.retries->WithLabels({})->Inc();
    }
    record_.prefill_done_ms = clock::NowMillis();
    prefill_answered_ = Clock::now();
    Result<std::optional<std::string>> params = DecodeKvTransferParams(answer, UsageLimits());
    if (!params.ok()) {
      Fail(HandoffOutcome::kPrefillFailed,
           "the prefill worker's answer: " + params.status().message());
      return Refuse(response);
    }
    if (!params->has_value()) {
      // vLLM freed the blocks at once (nothing to send, or the request did
      // not finish by length): the decode worker prefills on its own.
      record_.outcome = HandoffOutcome::kUnpinned;
      return true;
    }
    kv_transfer_params_ = **params;
    return Pin(NIXLTransferRole::kPrefillPin) || Refuse(response);
  }

  // Witnesses the pin as a lease of its own: the prefill worker's span,
  // its engine's pin time as the TTL. False (the failure recorded) when it
  // cannot be recorded.
  bool Pin(NIXLTransferRole role) {
    const ingest::EngineSpec* engine = EngineOf(daemon_, record_.prefill_worker);
    NIXLLease lease;
    lease.lease_id = "handoff-" + record_.request_id;
    lease.request_id = record_.request_id;
    lease.remote_engine = record_.prefill_worker;
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
    lease.role = role;
    lease.event = NIXLLeaseEvent::kCreate;
    lease.ttl_ms = engine == nullptr ? 30000 : engine->kv_lease_ms;
    lease.witness = NIXLLeaseWitness::kHandoff;
    SpanResidency span;
    span.worker = record_.prefill_worker;
    span.token_ids = request_.tokens;
    span.cache_salt = request_.salt;
    if (Status pinned = ApplyLeaseReport(daemon_, lease, span, kDaemonActor); !pinned.ok()) {
      // Fail closed: a handoff kvgov cannot witness is not run.
      return Fail(HandoffOutcome::kPrefillFailed,
                  "the handoff's lease could not be recorded: " + pinned.message(), 503,
                  "service_unavailable");
    }
    record_.lease_id = lease.lease_id;
    lease_open_ = true;
    return true;
  }

  void EndLease(NIXLLeaseEvent event) {
    lease_open_ = false;
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

  // The pinned blocks a decode worker may take now, at the route's clock:
  // none once the lease is not active; up to the first block governance
  // refuses on the prefill worker (a quarantine, a pending invalidation).
  std::optional<Withdrawal> Pullable(int64_t now_ms, uint64_t* blocks) const {
    *blocks = 0;
    if (!lease_open_) return std::nullopt;
    const std::optional<NIXLLease> lease = daemon_.leases.Get(record_.lease_id);
    const NIXLLeaseState state =
        lease ? LeaseStateAt(*lease, now_ms) : NIXLLeaseState::kFailed;
    if (keys_.empty() && state == NIXLLeaseState::kUnidentified) return std::nullopt;
    if (state == NIXLLeaseState::kExpired) {
      return Withdrawal{HandoffOutcome::kExpired,
                        "the prefill worker's pin (lease " + record_.lease_id +
                            ") expired before the decode worker's first token"};
    }
    if (state != NIXLLeaseState::kActive) {
      return Withdrawal{HandoffOutcome::kWithdrawn,
                        "the lease " + record_.lease_id + " is " +
                            std::string(ToString(state))};
    }
    const router::SpanGate::Limit limit =
        daemon_.gate.Creditable(record_.prefill_worker, keys_, keys_.size(), now_ms);
    if (limit.creditable < keys_.size()) {
      return Withdrawal{HandoffOutcome::kWithdrawn,
                        "the prefilled span was withdrawn (" +
                            std::string(ToString(limit.kind)) +
                            (limit.reason == LookupReason::kNone
                                 ? std::string()
                                 : "/" + std::string(ToString(limit.reason))) +
                            ") before the decode worker's first token"};
    }
    *blocks = keys_.size();
    return std::nullopt;
  }

  // The decode pool without the prefill worker (a worker of role both may
  // be in both pools; it does not hand over to itself).
  std::vector<std::string> DecodePool() const {
    std::vector<std::string> pool = request_.decode_pool;
    std::erase(pool, record_.prefill_worker);
    return pool;
  }

  void NoteDecodeDecision(const router::RouteDecision& decision) {
    record_.decode_worker = decision.worker;
    for (const router::Candidate& candidate : decision.candidates) {
      if (candidate.worker != decision.worker) continue;
      record_.decode_overlap_blocks = candidate.overlap_blocks;
      record_.pulled_blocks = candidate.pulled_blocks;
    }
  }

  // vLLM: the decode leg, with the pin's params, to the decode worker the
  // router chose by load and the prefix it holds itself.
  bool StartDecode() {
    uint64_t pullable = 0;
    if (std::optional<Withdrawal> withdrawn = Pullable(clock::NowMillis(), &pullable)) {
      return Fail(withdrawn->outcome, withdrawn->reason, 503, "span_withdrawn");
    }
    std::optional<router::RouteDecision> decision =
        Decide(DecodePool(), pullable, HandoffOutcome::kDecodeFailed, "decode");
    if (!decision) return false;
    NoteDecodeDecision(*decision);
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
    const std::vector<std::string>& pool = prefill_candidates_;
    if (pool.empty()) {
      return Fail(HandoffOutcome::kPrefillFailed, "no prefill worker left to try", 502,
                  "upstream_unreachable");
    }
    std::optional<router::RouteDecision> prefill =
        Decide(pool, 0, HandoffOutcome::kPrefillFailed, "prefill");
    if (!prefill) return false;
    ++record_.prefill_attempts;
    record_.prefill_worker = prefill->worker;
    record_.prefill_overlap_blocks = prefill->overlap_blocks;
    KeyTheSpan(prefill->worker);
    const ingest::EngineSpec* engine = EngineOf(daemon_, prefill->worker);
    std::mt19937_64 rooms(std::random_device{}());
    Result<std::string> body =
        BootstrapBody(request_.body, HostOf(OpenAIUrl(daemon_, prefill->worker)),
                      engine == nullptr ? 8998 : engine->bootstrap_port, rooms());
    if (!body.ok()) {
      (void)daemon_.router->Done(prefill->decision_id);
      return Fail(HandoffOutcome::kPrefillFailed, body.status().message(), 500, "internal");
    }
    if (record_.prefill_attempts > 1) {
      // A fresh id for the second try: its lease is its own.
      Result<std::string> id = auth::RandomHexId();
      if (id.ok()) record_.request_id = *id;
    }
    std::optional<router::RouteDecision> decode = Decide(
        DecodePool(), keys_.size(), HandoffOutcome::kDecodeFailed, "decode");
    if (!decode) {
      (void)daemon_.router->Done(prefill->decision_id);
      return false;
    }
    NoteDecodeDecision(*decode);
    if (!Pin(NIXLTransferRole::kPushWrite)) {
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
  // while watching the pin: a lease that ends or a span governance
  // withdraws fails the handoff, and the decode request is closed so the
  // engine aborts it. Only a streamed answer's first byte is the first
  // token; a whole answer's comes at its end, so an expiry is not judged
  // for one (the pull may long be done).
  bool AwaitFirstToken() {
    // An engine may hold its head back until the first token as well as
    // send it at once: the pin is watched through both.
    while (!decode_->relay->WaitForChunkOrEnd(kWithdrawalCheck)) {
      if (bootstrap_ && PrefillLegFailed()) {
        EndDecode();
        return false;
      }
      uint64_t pullable = 0;
      std::optional<Withdrawal> withdrawn = Pullable(clock::NowMillis(), &pullable);
      if (withdrawn && (request_.stream || withdrawn->outcome != HandoffOutcome::kExpired)) {
        EndDecode();
        return Fail(withdrawn->outcome, withdrawn->reason, 503, "span_withdrawn");
      }
    }
    Status failure;
    if (!decode_->relay->WaitForHead(&decode_status_, &decode_content_type_, &failure)) {
      EndDecode();
      return Fail(HandoffOutcome::kDecodeFailed, "the decode worker failed: " + failure.message(),
                  failure.code() == StatusCode::kDeadlineExceeded ? 504 : 502,
                  "upstream_unreachable");
    }
    if (decode_status_ >= 400) {
      std::string body;
      int status = 0;
      std::string content_type;
      (void)ReadWhole(*decode_, &status, &content_type, &body);
      engine_error_body_ = body;
      EndDecode();
      return Fail(HandoffOutcome::kDecodeFailed,
                  "the decode worker answered HTTP " + std::to_string(decode_status_) + ": " +
                      body.substr(0, 256),
                  decode_status_, "upstream_error");
    }
    record_.first_token_ms = clock::NowMillis();
    daemon_.gateway_metrics.handoff_seconds->WithLabels({})->Observe(
        std::chrono::duration<double>(Clock::now() - prefill_answered_).count());
    return true;
  }

  // SGLang: the prefill leg's answer, read on the side while the decode
  // leg waits. True once it failed (no answer, or an error status);
  // `retry_prefill_` then says whether another prefill worker may try.
  bool PrefillLegFailed() {
    if (!prefill_ || !prefill_->relay->WaitForChunkOrEnd(std::chrono::milliseconds(0))) {
      return false;
    }
    int status = 0;
    std::string content_type;
    std::string body;
    Status read = ReadWhole(*prefill_, &status, &content_type, &body);
    if (read.ok() && status == 200) {
      FinishPrefillLeg(std::move(body));
      return false;
    }
    (void)daemon_.router->Done(prefill_->decision_id);
    std::erase(prefill_candidates_, record_.prefill_worker);
    prefill_.reset();
    if (lease_open_) EndLease(NIXLLeaseEvent::kAbort);
    retry_prefill_ = record_.prefill_attempts < 2 && !prefill_candidates_.empty();
    Fail(HandoffOutcome::kPrefillFailed,
         "the prefill worker failed: " +
             (read.ok() ? "HTTP " + std::to_string(status) : read.message()),
         502, "upstream_unreachable");
    return true;
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

  // Answers the client with the recorded failure.
  bool Refuse(httplib::Response& response) const {
    SendOpenAIError(response, error_status_, record_.error,
                    error_status_ == 503 ? "service_unavailable" : "upstream_error", "",
                    error_code_);
    return false;
  }

  Daemon& daemon_;
  const HandoffRequest request_;
  HandoffRecord record_;
  bool bootstrap_ = false;  // SGLang's protocol; else vLLM's NixlConnector
  std::vector<index::BlockKey> keys_;
  std::string kv_transfer_params_;  // the prefill answer's, opaque
  bool lease_open_ = false;         // created, and no event of ours ended it yet
  Clock::time_point prefill_answered_;
  std::unique_ptr<Upstream> prefill_;  // the prefill leg, until its answer is read
  std::unique_ptr<Upstream> decode_;
  std::vector<std::string> prefill_candidates_;  // SGLang: those not yet failed
  bool retry_prefill_ = false;
  int decode_status_ = 0;
  std::string decode_content_type_;
  int error_status_ = 502;
  std::string error_code_ = "upstream_error";
  std::string engine_error_body_;
};

// A failed decode step, for a client that has no byte of the answer yet.
void AnswerFailure(const Handoff& handoff, httplib::Response& response) {
  if (!handoff.engine_error_body().empty() && handoff.error_status() < 500) {
    response.status = handoff.error_status();
    response.set_content(handoff.engine_error_body(), "application/json");
    return;
  }
  SendOpenAIError(response, handoff.error_status(), handoff.error(),
                  handoff.error_status() == 503 ? "service_unavailable" : "upstream_error", "",
                  handoff.error_code());
}

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
    if (!handoff->Decode()) return AnswerFailure(*handoff, response);
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
            const std::string event = EncodeOpenAIErrorEvent(state->handoff->error());
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
