#include "kvgov/gateway/handoff_rules.h"

#include <algorithm>
#include <utility>

namespace kvgov::gateway {

HandoffRules::HandoffRules(HandoffProtocol protocol, std::vector<std::string> prefill_pool,
                           std::vector<std::string> decode_pool, bool stream)
    : protocol_(protocol),
      decode_pool_(std::move(decode_pool)),
      stream_(stream),
      step_(protocol == HandoffProtocol::kNixl ? HandoffStep::kRoutePrefill
                                               : HandoffStep::kRouteBoth),
      prefill_candidates_(std::move(prefill_pool)) {}

std::vector<std::string> HandoffRules::DecodeCandidates() const {
  std::vector<std::string> pool = decode_pool_;
  std::erase(pool, prefill_worker_);
  return pool;
}

NIXLTransferRole HandoffRules::lease_role() const {
  // vLLM's prefill worker holds its blocks until the decode worker pulls
  // them; SGLang's pushes them into the decode worker's memory.
  return protocol_ == HandoffProtocol::kNixl ? NIXLTransferRole::kPrefillPin
                                             : NIXLTransferRole::kPushWrite;
}

std::optional<std::pair<HandoffOutcome, std::string>> HandoffRules::Withdrawal(
    const PinView& pin) const {
  if (!lease_open_) return std::nullopt;
  // A prompt shorter than a block pins nothing kvgov can name.
  if (pin.span_blocks == 0 && pin.lease_state == NIXLLeaseState::kUnidentified) {
    return std::nullopt;
  }
  if (pin.lease_state == NIXLLeaseState::kExpired) {
    return std::pair{HandoffOutcome::kExpired,
                     "the prefill worker's pin (lease " + pin.lease_id +
                         ") expired before the decode worker's first token"};
  }
  if (pin.lease_state != NIXLLeaseState::kActive) {
    return std::pair{HandoffOutcome::kWithdrawn,
                     "the lease " + pin.lease_id + " is " + std::string(ToString(pin.lease_state))};
  }
  if (pin.creditable_blocks < pin.span_blocks) {
    return std::pair{HandoffOutcome::kWithdrawn, "the prefilled span was withdrawn (" + pin.limit +
                                                     ") before the decode worker's first token"};
  }
  return std::nullopt;
}

uint64_t HandoffRules::Pullable(const PinView& pin) const {
  if (!lease_open_ || Withdrawal(pin)) return 0;
  return pin.span_blocks;
}

LeaseMove HandoffRules::Fail(HandoffFailure failure) {
  if (Finished()) return LeaseMove::kNone;
  outcome_ = failure.outcome;
  failure_ = std::move(failure);
  step_ = HandoffStep::kFailed;
  return EndLease(LeaseMove::kAbort);
}

LeaseMove HandoffRules::FailWith(HandoffOutcome outcome, int status, std::string code,
                                 std::string message, bool engine_answer) {
  return Fail({outcome, status, std::move(code), std::move(message), engine_answer});
}

LeaseMove HandoffRules::EndLease(LeaseMove move) {
  if (!lease_open_) return LeaseMove::kNone;
  lease_open_ = false;
  return move;
}

LeaseMove HandoffRules::NoEligibleWorker(HandoffLeg leg, std::string_view reasons) {
  if (step_ != HandoffStep::kRoutePrefill && step_ != HandoffStep::kRouteDecode &&
      step_ != HandoffStep::kRouteBoth) {
    return LeaseMove::kNone;
  }
  const bool prefill = leg == HandoffLeg::kPrefill;
  return FailWith(prefill ? HandoffOutcome::kPrefillFailed : HandoffOutcome::kDecodeFailed, 503,
                  "no_eligible_worker",
                  std::string("no eligible ") + (prefill ? "prefill" : "decode") + " worker" +
                      (reasons.empty() ? std::string() : " (" + std::string(reasons) + ")"));
}

void HandoffRules::PrefillRouted(std::string worker) {
  if (step_ == HandoffStep::kRoutePrefill) {
    step_ = HandoffStep::kAwaitPrefill;
  } else if (step_ != HandoffStep::kRouteBoth || prefill_routed_) {
    return;
  }
  ++prefill_attempts_;
  prefill_worker_ = std::move(worker);
  prefill_routed_ = step_ == HandoffStep::kRouteBoth;
}

void HandoffRules::PrefillAnswered(const LegAnswer& answer, PinParams params) {
  if (step_ != HandoffStep::kAwaitPrefill) return;
  if (answer.reached && answer.status == 200) {
    switch (params) {
      case PinParams::kPresent:
        step_ = HandoffStep::kPin;
        return;
      case PinParams::kNone:
        // vLLM freed the blocks at once (nothing to send, or the request
        // did not finish by length): the decode worker prefills on its own.
        outcome_ = HandoffOutcome::kUnpinned;
        step_ = HandoffStep::kRouteDecode;
        return;
      case PinParams::kMalformed:
        FailWith(HandoffOutcome::kPrefillFailed, 502, "upstream_error",
                 "the prefill worker's answer: " + answer.error);
        return;
    }
  }
  if (answer.reached && answer.status < 500) {
    FailWith(HandoffOutcome::kPrefillFailed, answer.status, "upstream_error",
             "the prefill worker answered HTTP " + std::to_string(answer.status),
             /*engine_answer=*/true);
    return;
  }
  std::erase(prefill_candidates_, prefill_worker_);
  if (prefill_attempts_ < kPrefillTries && !prefill_candidates_.empty()) {
    step_ = HandoffStep::kRoutePrefill;
    return;
  }
  const bool timed_out = !answer.reached && answer.timed_out;
  FailWith(HandoffOutcome::kPrefillFailed, timed_out ? 504 : 502,
           timed_out ? "upstream_timeout" : "upstream_unreachable",
           "the prefill worker failed: " +
               (answer.reached ? "HTTP " + std::to_string(answer.status) : answer.error));
}

void HandoffRules::Pinned() {
  if (step_ != HandoffStep::kPin) return;
  lease_open_ = true;
  step_ = protocol_ == HandoffProtocol::kNixl ? HandoffStep::kRouteDecode
                                              : HandoffStep::kAwaitFirstToken;
}

void HandoffRules::PinRefused(std::string_view error) {
  if (step_ != HandoffStep::kPin) return;
  FailWith(HandoffOutcome::kPrefillFailed, 503, "service_unavailable",
           "the handoff's lease could not be recorded: " + std::string(error));
}

LeaseMove HandoffRules::CheckPinBeforeDecode(const PinView& pin) {
  if (step_ != HandoffStep::kRouteDecode) return LeaseMove::kNone;
  auto withdrawn = Withdrawal(pin);
  if (!withdrawn) return LeaseMove::kNone;
  return FailWith(withdrawn->first, 503, "span_withdrawn", std::move(withdrawn->second));
}

void HandoffRules::DecodeRouted(std::string worker) {
  if (step_ == HandoffStep::kRouteDecode) {
    step_ = HandoffStep::kAwaitFirstToken;
  } else if (step_ == HandoffStep::kRouteBoth && prefill_routed_) {
    step_ = HandoffStep::kPin;
  } else {
    return;
  }
  decode_worker_ = std::move(worker);
}

LeaseMove HandoffRules::CheckPinWhileWaiting(const PinView& pin) {
  if (step_ != HandoffStep::kAwaitFirstToken) return LeaseMove::kNone;
  auto withdrawn = Withdrawal(pin);
  if (!withdrawn || (!stream_ && withdrawn->first == HandoffOutcome::kExpired)) {
    return LeaseMove::kNone;
  }
  return FailWith(withdrawn->first, 503, "span_withdrawn", std::move(withdrawn->second));
}

LeaseMove HandoffRules::PrefillLegFailed(const LegAnswer& answer) {
  if (step_ != HandoffStep::kAwaitFirstToken || protocol_ != HandoffProtocol::kBootstrap) {
    return LeaseMove::kNone;
  }
  std::erase(prefill_candidates_, prefill_worker_);
  const LeaseMove move = EndLease(LeaseMove::kAbort);
  if (prefill_attempts_ < kPrefillTries && !prefill_candidates_.empty()) {
    outcome_ = HandoffOutcome::kCompleted;
    decode_worker_.clear();
    prefill_routed_ = false;
    step_ = HandoffStep::kRouteBoth;
    return move;
  }
  FailWith(HandoffOutcome::kPrefillFailed, 502, "upstream_unreachable",
           "the prefill worker failed: " +
               (answer.reached ? "HTTP " + std::to_string(answer.status) : answer.error));
  return move;
}

LeaseMove HandoffRules::DecodeAnswered(const LegAnswer& answer) {
  if (step_ != HandoffStep::kAwaitFirstToken) return LeaseMove::kNone;
  if (answer.reached && answer.status < 400) {
    step_ = HandoffStep::kRelay;
    return EndLease(LeaseMove::kComplete);
  }
  if (answer.reached) {
    return FailWith(
        HandoffOutcome::kDecodeFailed, answer.status, "upstream_error",
        "the decode worker answered HTTP " + std::to_string(answer.status) + ": " + answer.error,
        /*engine_answer=*/answer.status < 500);
  }
  return FailWith(HandoffOutcome::kDecodeFailed, answer.timed_out ? 504 : 502,
                  "upstream_unreachable", "the decode worker failed: " + answer.error);
}

LeaseMove HandoffRules::ClientGone() {
  // 499 as nginx logs it: no one reads this answer.
  return FailWith(HandoffOutcome::kClientGone, 499, "client_gone", "the client went away");
}

}  // namespace kvgov::gateway
