#include "kvgov/gateway/handoff_rules.h"

#include <gtest/gtest.h>

namespace kvgov::gateway {
namespace {

using Step = HandoffStep;

LegAnswer Status(int status, std::string excerpt = "") {
  LegAnswer answer;
  answer.reached = true;
  answer.status = status;
  answer.error = std::move(excerpt);
  return answer;
}
LegAnswer NoAnswer(std::string why, bool timed_out = false) {
  LegAnswer answer;
  answer.timed_out = timed_out;
  answer.error = std::move(why);
  return answer;
}

PinView Pin(NIXLLeaseState state, uint64_t blocks) {
  PinView pin;
  pin.lease_id = "handoff-r1";
  pin.lease_state = state;
  pin.span_blocks = blocks;
  pin.creditable_blocks = blocks;
  return pin;
}
PinView LivePin(uint64_t blocks = 4) { return Pin(NIXLLeaseState::kActive, blocks); }

HandoffRules Nixl(bool stream = true) {
  return HandoffRules(HandoffProtocol::kNixl, {"p1", "p2", "both"}, {"d1", "both"}, stream);
}
HandoffRules Bootstrap(bool stream = true) {
  return HandoffRules(HandoffProtocol::kBootstrap, {"p1", "p2"}, {"d1"}, stream);
}

// NIXL up to the decode leg's send: prefilled on p1, pinned.
HandoffRules NixlAwaitingFirstToken(bool stream = true) {
  HandoffRules rules = Nixl(stream);
  rules.PrefillRouted("p1");
  rules.PrefillAnswered(Status(200), PinParams::kPresent);
  rules.Pinned();
  EXPECT_EQ(rules.CheckPinBeforeDecode(LivePin()), LeaseMove::kNone);
  rules.DecodeRouted("d1");
  return rules;
}

void ExpectFailed(const HandoffRules& rules, HandoffOutcome outcome, int status,
                  std::string_view code) {
  EXPECT_EQ(rules.step(), Step::kFailed);
  EXPECT_EQ(rules.outcome(), outcome);
  EXPECT_EQ(rules.failure().outcome, outcome);
  EXPECT_EQ(rules.failure().status, status) << rules.failure().message;
  EXPECT_EQ(rules.failure().code, code) << rules.failure().message;
}

TEST(HandoffRulesTest, EachProtocolStartsWithItsFirstLegAndItsLeaseRole) {
  EXPECT_EQ(Nixl().step(), Step::kRoutePrefill);
  EXPECT_EQ(Nixl().lease_role(), NIXLTransferRole::kPrefillPin);
  EXPECT_EQ(Bootstrap().step(), Step::kRouteBoth);
  EXPECT_EQ(Bootstrap().lease_role(), NIXLTransferRole::kPushWrite);
}

TEST(HandoffRulesTest, NixlPinnedHandoffRunsPrefillPinDecodeRelayAndCompletesItsLease) {
  HandoffRules rules = Nixl();
  rules.PrefillRouted("p1");
  EXPECT_EQ(rules.step(), Step::kAwaitPrefill);
  EXPECT_EQ(rules.prefill_attempts(), 1);
  rules.PrefillAnswered(Status(200), PinParams::kPresent);
  EXPECT_EQ(rules.step(), Step::kPin);
  EXPECT_FALSE(rules.lease_open());
  rules.Pinned();
  EXPECT_TRUE(rules.lease_open());
  EXPECT_EQ(rules.step(), Step::kRouteDecode);
  EXPECT_EQ(rules.Pullable(LivePin(4)), 4u);
  EXPECT_EQ(rules.CheckPinBeforeDecode(LivePin()), LeaseMove::kNone);
  rules.DecodeRouted("d1");
  EXPECT_EQ(rules.step(), Step::kAwaitFirstToken);
  EXPECT_EQ(rules.CheckPinWhileWaiting(LivePin()), LeaseMove::kNone);
  EXPECT_EQ(rules.DecodeAnswered(Status(200)), LeaseMove::kComplete);
  EXPECT_EQ(rules.step(), Step::kRelay);
  EXPECT_EQ(rules.outcome(), HandoffOutcome::kCompleted);
  EXPECT_FALSE(rules.lease_open());
  EXPECT_EQ(rules.prefill_worker(), "p1");
  EXPECT_EQ(rules.decode_worker(), "d1");
  // Finished: nothing later moves it or its lease.
  EXPECT_EQ(rules.ClientGone(), LeaseMove::kNone);
  EXPECT_EQ(rules.step(), Step::kRelay);
}

TEST(HandoffRulesTest, APrefillAnswerWithoutParamsGoesToDecodeUnpinnedWithNothingToPull) {
  HandoffRules rules = Nixl();
  rules.PrefillRouted("p1");
  rules.PrefillAnswered(Status(200), PinParams::kNone);
  EXPECT_EQ(rules.step(), Step::kRouteDecode);
  EXPECT_EQ(rules.outcome(), HandoffOutcome::kUnpinned);
  EXPECT_FALSE(rules.lease_open());
  EXPECT_EQ(rules.Pullable(LivePin()), 0u);
  // No pin to check: whatever the lease table says.
  EXPECT_EQ(rules.CheckPinBeforeDecode(Pin(NIXLLeaseState::kExpired, 4)), LeaseMove::kNone);
  rules.DecodeRouted("d1");
  EXPECT_EQ(rules.DecodeAnswered(Status(200)), LeaseMove::kNone);
  EXPECT_EQ(rules.step(), Step::kRelay);
  EXPECT_EQ(rules.outcome(), HandoffOutcome::kUnpinned);
}

TEST(HandoffRulesTest, MalformedParamsFailThePrefill) {
  HandoffRules rules = Nixl();
  rules.PrefillRouted("p1");
  rules.PrefillAnswered(Status(200, "kv_transfer_params: not an object"), PinParams::kMalformed);
  ExpectFailed(rules, HandoffOutcome::kPrefillFailed, 502, "upstream_error");
  EXPECT_EQ(rules.failure().message,
            "the prefill worker's answer: kv_transfer_params: not an object");
  EXPECT_FALSE(rules.failure().engine_answer);
}

TEST(HandoffRulesTest, APrefillRefusalIsTheClientsToReadAndNotRetried) {
  HandoffRules rules = Nixl();
  rules.PrefillRouted("p1");
  rules.PrefillAnswered(Status(400));
  ExpectFailed(rules, HandoffOutcome::kPrefillFailed, 400, "upstream_error");
  EXPECT_TRUE(rules.failure().engine_answer);
  EXPECT_EQ(rules.prefill_attempts(), 1);
}

TEST(HandoffRulesTest, AFailedPrefillIsTriedOnceMoreOnAnotherWorker) {
  HandoffRules rules = Nixl();
  rules.PrefillRouted("p1");
  rules.PrefillAnswered(Status(503));
  EXPECT_EQ(rules.step(), Step::kRoutePrefill);
  EXPECT_EQ(rules.prefill_candidates(), (std::vector<std::string>{"p2", "both"}));
  rules.PrefillRouted("both");
  rules.PrefillAnswered(Status(200), PinParams::kPresent);
  EXPECT_EQ(rules.step(), Step::kPin);
  EXPECT_EQ(rules.prefill_attempts(), 2);
  // A worker of role both does not hand over to itself.
  EXPECT_EQ(rules.DecodeCandidates(), (std::vector<std::string>{"d1"}));
}

TEST(HandoffRulesTest, TheSecondFailedPrefillEndsTheHandoffNamingWhy) {
  HandoffRules rules = Nixl();
  rules.PrefillRouted("p1");
  rules.PrefillAnswered(NoAnswer("connection refused"));
  rules.PrefillRouted("p2");
  rules.PrefillAnswered(NoAnswer("no answer in 30000 ms", /*timed_out=*/true));
  ExpectFailed(rules, HandoffOutcome::kPrefillFailed, 504, "upstream_timeout");
  EXPECT_EQ(rules.failure().message, "the prefill worker failed: no answer in 30000 ms");

  HandoffRules by_status = Nixl();
  by_status.PrefillRouted("p1");
  by_status.PrefillAnswered(Status(500));
  by_status.PrefillRouted("p2");
  by_status.PrefillAnswered(Status(502));
  ExpectFailed(by_status, HandoffOutcome::kPrefillFailed, 502, "upstream_unreachable");
  EXPECT_EQ(by_status.failure().message, "the prefill worker failed: HTTP 502");
}

TEST(HandoffRulesTest, APrefillPoolOfOneIsNotRetried) {
  HandoffRules rules(HandoffProtocol::kNixl, {"p1"}, {"d1"}, true);
  rules.PrefillRouted("p1");
  rules.PrefillAnswered(Status(503));
  ExpectFailed(rules, HandoffOutcome::kPrefillFailed, 502, "upstream_unreachable");
  EXPECT_TRUE(rules.prefill_candidates().empty());
}

TEST(HandoffRulesTest, NoEligibleWorkerFailsTheLegItWasRoutedFor) {
  HandoffRules prefill = Nixl();
  EXPECT_EQ(prefill.NoEligibleWorker(HandoffLeg::kPrefill, "p1: busy"), LeaseMove::kNone);
  ExpectFailed(prefill, HandoffOutcome::kPrefillFailed, 503, "no_eligible_worker");
  EXPECT_EQ(prefill.failure().message, "no eligible prefill worker (p1: busy)");

  HandoffRules decode = Nixl();
  decode.PrefillRouted("p1");
  decode.PrefillAnswered(Status(200), PinParams::kPresent);
  decode.Pinned();
  // The pin is live: failing the decode leg aborts it.
  EXPECT_EQ(decode.NoEligibleWorker(HandoffLeg::kDecode, ""), LeaseMove::kAbort);
  ExpectFailed(decode, HandoffOutcome::kDecodeFailed, 503, "no_eligible_worker");
  EXPECT_EQ(decode.failure().message, "no eligible decode worker");
  EXPECT_FALSE(decode.lease_open());
}

TEST(HandoffRulesTest, ALeaseKvgovCannotRecordStopsTheHandoff) {
  HandoffRules rules = Nixl();
  rules.PrefillRouted("p1");
  rules.PrefillAnswered(Status(200), PinParams::kPresent);
  rules.PinRefused("the store is full");
  ExpectFailed(rules, HandoffOutcome::kPrefillFailed, 503, "service_unavailable");
  EXPECT_EQ(rules.failure().message,
            "the handoff's lease could not be recorded: the store is full");
  EXPECT_FALSE(rules.lease_open());
}

TEST(HandoffRulesTest, APinWithdrawnBeforeTheDecodeLegStopsItAndAbortsTheLease) {
  struct Case {
    PinView pin;
    HandoffOutcome outcome;
    std::string message;
  };
  const PinView expired = Pin(NIXLLeaseState::kExpired, 4);
  const PinView failed = Pin(NIXLLeaseState::kFailed, 4);
  PinView quarantined = LivePin(4);
  quarantined.creditable_blocks = 2;
  quarantined.limit = "quarantine/poisoned";
  const Case cases[] = {
      {expired, HandoffOutcome::kExpired,
       "the prefill worker's pin (lease handoff-r1) expired before the decode worker's first "
       "token"},
      {failed, HandoffOutcome::kWithdrawn, "the lease handoff-r1 is failed"},
      {quarantined, HandoffOutcome::kWithdrawn,
       "the prefilled span was withdrawn (quarantine/poisoned) before the decode worker's first "
       "token"},
  };
  for (const Case& c : cases) {
    HandoffRules rules = Nixl(/*stream=*/false);
    rules.PrefillRouted("p1");
    rules.PrefillAnswered(Status(200), PinParams::kPresent);
    rules.Pinned();
    EXPECT_EQ(rules.Pullable(c.pin), 0u);
    // Before the decode leg, even an expiry stops a whole answer.
    EXPECT_EQ(rules.CheckPinBeforeDecode(c.pin), LeaseMove::kAbort);
    ExpectFailed(rules, c.outcome, 503, "span_withdrawn");
    EXPECT_EQ(rules.failure().message, c.message);
  }
}

TEST(HandoffRulesTest, AnUnnamedSpanIsNoWithdrawal) {
  HandoffRules rules = Nixl();
  rules.PrefillRouted("p1");
  rules.PrefillAnswered(Status(200), PinParams::kPresent);
  rules.Pinned();
  const PinView unnamed = Pin(NIXLLeaseState::kUnidentified, 0);
  EXPECT_EQ(rules.CheckPinBeforeDecode(unnamed), LeaseMove::kNone);
  EXPECT_EQ(rules.step(), Step::kRouteDecode);
  EXPECT_EQ(rules.Pullable(unnamed), 0u);
}

TEST(HandoffRulesTest, WhileWaitingAWithdrawalFailsAStreamAndAnExpiryOnlyAStream) {
  const PinView expired = Pin(NIXLLeaseState::kExpired, 4);
  PinView quarantined = LivePin();
  quarantined.creditable_blocks = 0;

  HandoffRules stream = NixlAwaitingFirstToken(/*stream=*/true);
  EXPECT_EQ(stream.CheckPinWhileWaiting(expired), LeaseMove::kAbort);
  ExpectFailed(stream, HandoffOutcome::kExpired, 503, "span_withdrawn");

  // A whole answer's first byte comes at its end, long after the pull.
  HandoffRules whole = NixlAwaitingFirstToken(/*stream=*/false);
  EXPECT_EQ(whole.CheckPinWhileWaiting(expired), LeaseMove::kNone);
  EXPECT_EQ(whole.step(), Step::kAwaitFirstToken);
  EXPECT_EQ(whole.CheckPinWhileWaiting(quarantined), LeaseMove::kAbort);
  ExpectFailed(whole, HandoffOutcome::kWithdrawn, 503, "span_withdrawn");
}

TEST(HandoffRulesTest, ADecodeLegThatFailsAbortsTheLease) {
  HandoffRules refused = NixlAwaitingFirstToken();
  EXPECT_EQ(refused.DecodeAnswered(Status(422, "{\"error\":\"too long\"}")), LeaseMove::kAbort);
  ExpectFailed(refused, HandoffOutcome::kDecodeFailed, 422, "upstream_error");
  EXPECT_TRUE(refused.failure().engine_answer);
  EXPECT_EQ(refused.failure().message,
            "the decode worker answered HTTP 422: {\"error\":\"too long\"}");

  HandoffRules broken = NixlAwaitingFirstToken();
  EXPECT_EQ(broken.DecodeAnswered(Status(500, "oops")), LeaseMove::kAbort);
  ExpectFailed(broken, HandoffOutcome::kDecodeFailed, 500, "upstream_error");
  EXPECT_FALSE(broken.failure().engine_answer);

  HandoffRules silent = NixlAwaitingFirstToken();
  EXPECT_EQ(silent.DecodeAnswered(NoAnswer("no first byte in 30000 ms", true)), LeaseMove::kAbort);
  ExpectFailed(silent, HandoffOutcome::kDecodeFailed, 504, "upstream_unreachable");
  EXPECT_EQ(silent.failure().message, "the decode worker failed: no first byte in 30000 ms");
}

TEST(HandoffRulesTest, AClientThatLeavesEndsTheHandoffAtAnyStepBeforeTheRelay) {
  HandoffRules before_prefill = Nixl();
  EXPECT_EQ(before_prefill.ClientGone(), LeaseMove::kNone);
  ExpectFailed(before_prefill, HandoffOutcome::kClientGone, 499, "client_gone");

  HandoffRules pinned = Nixl();
  pinned.PrefillRouted("p1");
  pinned.PrefillAnswered(Status(200), PinParams::kPresent);
  pinned.Pinned();
  EXPECT_EQ(pinned.ClientGone(), LeaseMove::kAbort);
  ExpectFailed(pinned, HandoffOutcome::kClientGone, 499, "client_gone");

  HandoffRules waiting = NixlAwaitingFirstToken();
  EXPECT_EQ(waiting.ClientGone(), LeaseMove::kAbort);
  // A report that comes after the end moves nothing.
  EXPECT_EQ(waiting.DecodeAnswered(Status(200)), LeaseMove::kNone);
  ExpectFailed(waiting, HandoffOutcome::kClientGone, 499, "client_gone");
}

TEST(HandoffRulesTest, TransitionsOutOfTheirStepAreIgnored) {
  HandoffRules rules = Nixl();
  rules.Pinned();
  rules.DecodeRouted("d1");
  rules.PrefillAnswered(Status(200), PinParams::kPresent);
  rules.PinRefused("x");
  EXPECT_EQ(rules.PrefillLegFailed(Status(500)), LeaseMove::kNone);
  EXPECT_EQ(rules.DecodeAnswered(Status(200)), LeaseMove::kNone);
  EXPECT_EQ(rules.step(), Step::kRoutePrefill);
  EXPECT_FALSE(rules.lease_open());
  EXPECT_EQ(rules.prefill_attempts(), 0);
}

TEST(HandoffRulesTest, BootstrapRoutesBothLegsPinsThenWaitsForTheFirstToken) {
  HandoffRules rules = Bootstrap();
  // The decode leg is routed once the prefill worker is chosen, beside it.
  rules.DecodeRouted("d1");
  EXPECT_EQ(rules.step(), Step::kRouteBoth);
  rules.PrefillRouted("p1");
  EXPECT_EQ(rules.step(), Step::kRouteBoth);
  EXPECT_EQ(rules.prefill_attempts(), 1);
  rules.PrefillRouted("p2");  // once a round
  EXPECT_EQ(rules.prefill_worker(), "p1");
  rules.DecodeRouted("d1");
  EXPECT_EQ(rules.step(), Step::kPin);
  rules.Pinned();
  EXPECT_EQ(rules.step(), Step::kAwaitFirstToken);
  EXPECT_EQ(rules.DecodeAnswered(Status(200)), LeaseMove::kComplete);
  EXPECT_EQ(rules.step(), Step::kRelay);
  EXPECT_EQ(rules.outcome(), HandoffOutcome::kCompleted);
}

TEST(HandoffRulesTest, BootstrapRetriesBothLegsOnceWhenThePrefillLegFails) {
  HandoffRules rules = Bootstrap();
  rules.PrefillRouted("p1");
  rules.DecodeRouted("d1");
  rules.Pinned();
  EXPECT_EQ(rules.PrefillLegFailed(Status(500)), LeaseMove::kAbort);
  EXPECT_EQ(rules.step(), Step::kRouteBoth);
  EXPECT_EQ(rules.outcome(), HandoffOutcome::kCompleted);
  EXPECT_FALSE(rules.lease_open());
  EXPECT_EQ(rules.prefill_candidates(), (std::vector<std::string>{"p2"}));
  rules.PrefillRouted("p2");
  rules.DecodeRouted("d1");
  rules.Pinned();
  EXPECT_EQ(rules.PrefillLegFailed(NoAnswer("connection reset")), LeaseMove::kAbort);
  ExpectFailed(rules, HandoffOutcome::kPrefillFailed, 502, "upstream_unreachable");
  EXPECT_EQ(rules.failure().message, "the prefill worker failed: connection reset");
  EXPECT_EQ(rules.prefill_attempts(), 2);
}

TEST(HandoffRulesTest, BootstrapWithoutADecodeWorkerBesideThePrefillFailsTheDecodeLeg) {
  HandoffRules rules(HandoffProtocol::kBootstrap, {"both"}, {"both"}, true);
  rules.PrefillRouted("both");
  EXPECT_TRUE(rules.DecodeCandidates().empty());
  EXPECT_EQ(rules.NoEligibleWorker(HandoffLeg::kDecode, ""), LeaseMove::kNone);
  ExpectFailed(rules, HandoffOutcome::kDecodeFailed, 503, "no_eligible_worker");
}

TEST(HandoffRulesTest, NixlHasNoPrefillLegToFailWhileWaiting) {
  HandoffRules rules = NixlAwaitingFirstToken();
  EXPECT_EQ(rules.PrefillLegFailed(Status(500)), LeaseMove::kNone);
  EXPECT_EQ(rules.step(), Step::kAwaitFirstToken);
  EXPECT_TRUE(rules.lease_open());
}

TEST(HandoffRulesTest, FailWithARouteErrorAbortsALivePin) {
  HandoffRules rules = Nixl();
  rules.PrefillRouted("p1");
  rules.PrefillAnswered(Status(200), PinParams::kPresent);
  rules.Pinned();
  EXPECT_EQ(rules.Fail({HandoffOutcome::kDecodeFailed, 400, "invalid_value", "bad tenant"}),
            LeaseMove::kAbort);
  ExpectFailed(rules, HandoffOutcome::kDecodeFailed, 400, "invalid_value");
  // Failed once: a second failure does not overwrite the first.
  EXPECT_EQ(rules.Fail({HandoffOutcome::kPrefillFailed, 500, "internal", "x"}), LeaseMove::kNone);
  EXPECT_EQ(rules.failure().code, "invalid_value");
}

}  // namespace
}  // namespace kvgov::gateway
