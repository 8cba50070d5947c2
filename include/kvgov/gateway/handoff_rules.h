#pragma once

// The rules of a prefill/decode handoff (docs/formats/gateway.md,
// "Prefill/decode disaggregation"; docs/adr/0021): which leg goes next,
// when a leg is tried again, how the witnessed lease moves and how the
// handoff ends. Pure: no I/O, no clock; src/server/handoff.cc performs
// each step and reports what it saw.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvgov/core/enum_spelling.h"
#include "kvgov/core/vocabulary.h"

namespace kvgov::gateway {

/// How a handoff ended.
enum class HandoffOutcome {
  kCompleted,      // the decode worker's first token came while the pin was live
  kUnpinned,       // the prefill answer carried no kv_transfer_params: decode prefilled itself
  kPrefillFailed,  // no prefill worker answered (after one retry), or one refused the request
  kDecodeFailed,   // no decode worker was eligible, or the one chosen failed
  kWithdrawn,      // the span was quarantined or put under invalidation during the handoff
  kExpired,        // the pin's lease ran out before the decode worker's first token
  kClientGone,     // the client went away between the steps or before the first token
};

/// vLLM's NixlConnector (the prefill answers, its kv_transfer_params go to
/// the decode worker) or SGLang's bootstrap (both legs sent at once with a
/// bootstrap room; the prefill worker pushes its KV).
enum class HandoffProtocol { kNixl, kBootstrap };

/// The two requests of a handoff.
enum class HandoffLeg { kPrefill, kDecode };

/// What the I/O does next.
enum class HandoffStep {
  kRoutePrefill,     // NIXL: route among prefill_candidates(), send the prefill leg
  kAwaitPrefill,     // NIXL: read the prefill leg's whole answer
  kPin,              // witness the pin as a lease of role lease_role()
  kRouteDecode,      // NIXL: route among DecodeCandidates(), send the decode leg
  kRouteBoth,        // bootstrap: route both legs (a fresh room), then kPin
  kAwaitFirstToken,  // watch the pin (and, bootstrap, the prefill leg) until the first byte
  kRelay,            // the first token came: the rest of the answer is the client's
  kFailed,           // answer the client with failure(); nothing more is sent to an engine
};

/// What the I/O does to the witnessed lease after a transition.
enum class LeaseMove {
  kNone,
  kComplete,  // transfer_complete: the decode worker has its first token
  kAbort,     // abort: the handoff failed or was abandoned with the pin live
};

/// Why the handoff failed, and how the client is answered.
struct HandoffFailure {
  HandoffOutcome outcome = HandoffOutcome::kCompleted;
  int status = 0;
  std::string code;  // the OpenAI error `code`
  std::string message;
  /// An engine refused the request itself (a 4xx): its own answer is the
  /// client's to read, as it came.
  bool engine_answer = false;
};

/// A leg's answer as the I/O saw it.
struct LegAnswer {
  bool reached = false;    // a status line came
  bool timed_out = false;  // not reached: no answer within the engine timeout
  int status = 0;          // when reached
  std::string error;       // not reached: why; reached with an error status: an excerpt
};

/// What a 200 prefill answer said of the pin.
enum class PinParams { kNone, kPresent, kMalformed };

/// The pin as the lease table and the gate see it now.
struct PinView {
  std::string lease_id;
  NIXLLeaseState lease_state = NIXLLeaseState::kFailed;  // kFailed: the lease is gone
  uint64_t span_blocks = 0;                              // the prompt's keys on the prefill worker
  uint64_t creditable_blocks = 0;  // of them, what governance lets a worker take now
  std::string limit;               // why fewer are creditable ("quarantine/...")
};

/// One handoff's state. Thread-safety: none; one request's thread at a time.
class HandoffRules {
 public:
  /// Each leg is tried on at most this many prefill workers.
  static constexpr int kPrefillTries = 2;

  HandoffRules(HandoffProtocol protocol, std::vector<std::string> prefill_pool,
               std::vector<std::string> decode_pool, bool stream);

  HandoffStep step() const { return step_; }
  HandoffProtocol protocol() const { return protocol_; }
  /// The outcome so far: kCompleted or kUnpinned until something fails.
  HandoffOutcome outcome() const { return outcome_; }
  /// Valid at kFailed.
  const HandoffFailure& failure() const { return failure_; }
  /// Prefill workers not yet failed, to route the prefill leg among.
  const std::vector<std::string>& prefill_candidates() const { return prefill_candidates_; }
  /// The decode pool without the prefill worker: a worker of role both
  /// does not hand over to itself.
  std::vector<std::string> DecodeCandidates() const;
  NIXLTransferRole lease_role() const;
  bool lease_open() const { return lease_open_; }
  int prefill_attempts() const { return prefill_attempts_; }
  const std::string& prefill_worker() const { return prefill_worker_; }
  const std::string& decode_worker() const { return decode_worker_; }

  /// The pinned blocks a decode worker may pull now: none without a live
  /// pin, all of the span while the lease is active and every block of it
  /// creditable.
  uint64_t Pullable(const PinView& pin) const;

  // Transitions. Each names the step it is valid at (any other step:
  // ignored, so a late report cannot move a finished handoff).

  /// Any step before kRelay: something the I/O could not do (routing
  /// refused the request, a body could not be made). kFailed.
  LeaseMove Fail(HandoffFailure failure);
  /// kRoutePrefill, kRouteDecode, kRouteBoth: routing found no worker of
  /// `leg`'s pool eligible (`reasons` as the router gave them). kFailed.
  LeaseMove NoEligibleWorker(HandoffLeg leg, std::string_view reasons);
  /// kRoutePrefill (NIXL): the prefill leg goes to `worker`. kAwaitPrefill.
  /// kRouteBoth (bootstrap): the prefill worker is chosen; the decode leg
  /// is routed next, among DecodeCandidates().
  void PrefillRouted(std::string worker);
  /// kAwaitPrefill: its answer. A 200 with params: kPin; without: kUnpinned
  /// and kRouteDecode; with malformed params: kFailed. A 4xx: kFailed with
  /// the engine's answer. No answer or a 5xx: the worker leaves the
  /// candidates; kRoutePrefill again while tries and candidates are left,
  /// else kFailed (504 when it timed out).
  void PrefillAnswered(const LegAnswer& answer, PinParams params = PinParams::kNone);
  /// kRouteDecode (NIXL, the pin checked first): the decode leg goes to
  /// `worker`. kAwaitFirstToken. kRouteBoth (bootstrap, after
  /// PrefillRouted): both legs are routed. kPin; both are sent once pinned.
  void DecodeRouted(std::string worker);
  /// kPin: the lease is recorded (NIXL: kRouteDecode; bootstrap:
  /// kAwaitFirstToken, both legs then sent), or could not be (`error`,
  /// fail closed: a handoff kvgov cannot witness is not run; kFailed).
  void Pinned();
  void PinRefused(std::string_view error);
  /// kRouteDecode: before routing, the pin must still hold. kFailed when
  /// it does not (kAbort).
  LeaseMove CheckPinBeforeDecode(const PinView& pin);
  /// kAwaitFirstToken: the pin looked at again. A lease that ended or a
  /// span withdrawn fails the handoff (kAbort); an expiry does not fail a
  /// whole (non-streamed) answer, whose first byte comes at its end, long
  /// after the pull.
  LeaseMove CheckPinWhileWaiting(const PinView& pin);
  /// kAwaitFirstToken, bootstrap: the prefill leg failed before the first
  /// token. The worker leaves the candidates and the lease is aborted;
  /// kRouteBoth again (a new request id and room) while tries and
  /// candidates are left, else kFailed.
  LeaseMove PrefillLegFailed(const LegAnswer& answer);
  /// kAwaitFirstToken: the decode leg's head with its first byte. Below
  /// 400: kRelay, the lease completes. Else kFailed (kAbort): the engine's
  /// answer passed on for a 4xx.
  LeaseMove DecodeAnswered(const LegAnswer& answer);
  /// Any step before kRelay: the client went away. kFailed (kAbort when
  /// the pin is live).
  LeaseMove ClientGone();

 private:
  bool Finished() const { return step_ == HandoffStep::kFailed || step_ == HandoffStep::kRelay; }
  LeaseMove EndLease(LeaseMove move);
  // kFailed with `failure`; aborts a live lease.
  LeaseMove FailWith(HandoffOutcome outcome, int status, std::string code, std::string message,
                     bool engine_answer = false);
  // Why a live pin earns no credit now; nullopt while it holds.
  std::optional<std::pair<HandoffOutcome, std::string>> Withdrawal(const PinView& pin) const;

  HandoffProtocol protocol_;
  std::vector<std::string> decode_pool_;
  bool stream_;
  HandoffStep step_;
  HandoffOutcome outcome_ = HandoffOutcome::kCompleted;
  HandoffFailure failure_;
  std::vector<std::string> prefill_candidates_;
  int prefill_attempts_ = 0;
  std::string prefill_worker_;
  std::string decode_worker_;
  bool prefill_routed_ = false;  // bootstrap: this round's prefill worker is chosen
  bool lease_open_ = false;      // recorded, and no move of ours ended it yet
};

}  // namespace kvgov::gateway

template <>
struct kvgov::EnumSpelling<kvgov::gateway::HandoffOutcome> {
  static constexpr std::string_view kName = "handoff outcome";
  static constexpr auto kValues =
      std::to_array<std::pair<gateway::HandoffOutcome, std::string_view>>(
          {{gateway::HandoffOutcome::kCompleted, "completed"},
           {gateway::HandoffOutcome::kUnpinned, "unpinned"},
           {gateway::HandoffOutcome::kPrefillFailed, "prefill_failed"},
           {gateway::HandoffOutcome::kDecodeFailed, "decode_failed"},
           {gateway::HandoffOutcome::kWithdrawn, "withdrawn"},
           {gateway::HandoffOutcome::kExpired, "expired"},
           {gateway::HandoffOutcome::kClientGone, "client_gone"}});
};

template <>
struct kvgov::EnumSpelling<kvgov::gateway::HandoffStep> {
  static constexpr std::string_view kName = "handoff step";
  static constexpr auto kValues = std::to_array<std::pair<gateway::HandoffStep, std::string_view>>(
      {{gateway::HandoffStep::kRoutePrefill, "route_prefill"},
       {gateway::HandoffStep::kAwaitPrefill, "await_prefill"},
       {gateway::HandoffStep::kPin, "pin"},
       {gateway::HandoffStep::kRouteDecode, "route_decode"},
       {gateway::HandoffStep::kRouteBoth, "route_both"},
       {gateway::HandoffStep::kAwaitFirstToken, "await_first_token"},
       {gateway::HandoffStep::kRelay, "relay"},
       {gateway::HandoffStep::kFailed, "failed"}});
};
