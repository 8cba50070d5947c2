#include "kvgov/governance/governance_gate.h"

#include <gtest/gtest.h>

#include <set>

namespace kvgov::governance {
namespace {

TEST(GovernanceGateTest, QuarantineStopsCreditAndEverythingAfterIt) {
  GovernanceGate gate;
  std::vector<index::BlockKey> chain = {1, 2, 3, 4};
  EXPECT_EQ(gate.Creditable("w1", chain, 4, 0).creditable, 4u);
  std::vector<index::BlockKey> poisoned = {2};
  gate.Quarantine("q1", poisoned);
  router::SpanGate::Limit limit = gate.Creditable("w1", chain, 4, 0);
  EXPECT_EQ(limit.creditable, 1u);  // blocks 3 and 4 extend 2: refused too
  EXPECT_EQ(limit.kind, LookupKind::kQuarantine);
  EXPECT_EQ(gate.Creditable("w2", chain, 4, 0).creditable, 1u);  // on every worker
  EXPECT_TRUE(gate.IsQuarantined(2));
  EXPECT_EQ(gate.quarantined_blocks(), 1u);
}

TEST(GovernanceGateTest, LeasesCreditOnlyWhileActiveAndOnlyOnTheirWorker) {
  GovernanceGate gate;
  std::vector<index::BlockKey> chain = {10, 11, 12};
  std::vector<index::BlockKey> covered = {11, 12};
  NIXLLease lease;
  lease.lease_id = "l1";
  lease.span_digest = "s";
  lease.granted_at_ms = 0;
  lease.expires_at_ms = 1000;
  gate.CoverLease(lease, "prefill-0", covered);
  EXPECT_EQ(gate.Creditable("prefill-0", chain, 3, 999).creditable, 3u);
  // Expiry takes effect at the route's clock, with no event and no timer.
  router::SpanGate::Limit limit = gate.Creditable("prefill-0", chain, 3, 1000);
  EXPECT_EQ(limit.creditable, 1u);
  EXPECT_EQ(limit.reason, LookupReason::kExpiredTTL);
  EXPECT_EQ(gate.Creditable("decode-0", chain, 3, 1000).creditable, 3u);
  lease.event = NIXLLeaseEvent::kTransferComplete;
  gate.UpdateLease(lease);
  EXPECT_EQ(gate.Creditable("prefill-0", chain, 3, 10).reason, LookupReason::kLeaseReleased);
  lease.event = NIXLLeaseEvent::kAbort;
  gate.UpdateLease(lease);
  EXPECT_EQ(gate.Creditable("prefill-0", chain, 3, 10).reason, LookupReason::kResidencyFault);
}

}  // namespace
}  // namespace kvgov::governance

namespace kvgov::governance {
namespace {

TEST(GovernanceGateTest, PendingInvalidationsStopCreditUntilCleared) {
  GovernanceGate gate;
  std::vector<index::BlockKey> chain = {1, 2, 3};
  std::vector<index::BlockKey> target = {2};
  gate.SetPending("w1", target, false, true);
  EXPECT_EQ(gate.Creditable("w1", chain, 3, 0).creditable, 1u);
  EXPECT_EQ(gate.Creditable("w1", chain, 3, 0).reason, LookupReason::kStale);
  EXPECT_EQ(gate.Creditable("w2", chain, 3, 0).creditable, 3u);
  gate.SetPending("w1", target, false, false);
  EXPECT_EQ(gate.Creditable("w1", chain, 3, 0).creditable, 3u);
  gate.SetPending("w2", {}, true, true);
  EXPECT_EQ(gate.Creditable("w2", chain, 3, 0).creditable, 0u);
}

}  // namespace
}  // namespace kvgov::governance

namespace kvgov::governance {
namespace {

// Creditable returns early for a worker governance holds nothing against;
// these check that every rule still stops credit when it exists, and that
// the bookkeeping behind the early return forgets a worker only when it
// refuses nothing.

TEST(GovernanceGateTest, NothingHeldCreditsEveryResidentBlock) {
  GovernanceGate gate;
  std::vector<index::BlockKey> chain = {1, 2, 3, 4, 5};
  router::SpanGate::Limit limit = gate.Creditable("w1", chain, 3, 0);
  EXPECT_EQ(limit.creditable, 3u);  // resident, not the chain's length
  EXPECT_EQ(limit.kind, LookupKind::kMiss);
  EXPECT_EQ(limit.reason, LookupReason::kNone);
  EXPECT_EQ(gate.Creditable("w1", chain, 0, 0).creditable, 0u);
}

TEST(GovernanceGateTest, QuarantineStopsCreditOnWorkersWithNoOtherRules) {
  GovernanceGate gate;
  std::vector<index::BlockKey> chain = {1, 2, 3};
  std::vector<index::BlockKey> first = {1};
  gate.Quarantine("q1", first);
  for (const char* worker : {"w1", "w2", "never-seen"}) {
    router::SpanGate::Limit limit = gate.Creditable(worker, chain, 3, 0);
    EXPECT_EQ(limit.creditable, 0u) << worker;
    EXPECT_EQ(limit.kind, LookupKind::kQuarantine) << worker;
    EXPECT_EQ(limit.reason, LookupReason::kTaintDenied) << worker;
  }
  // Only resident blocks are checked: a quarantined block past them does
  // not refuse the ones before it.
  std::vector<index::BlockKey> third = {3};
  GovernanceGate later;
  later.Quarantine("q3", third);
  EXPECT_EQ(later.Creditable("w1", chain, 2, 0).creditable, 2u);
  EXPECT_EQ(later.Creditable("w1", chain, 3, 0).creditable, 2u);
}

// Lifting one quarantine gives credit back only to blocks no other
// quarantine names; applying one twice (a replica's own write, from the
// log) is one quarantine.
TEST(GovernanceGateTest, ALiftedQuarantineLeavesTheOthersInForce) {
  GovernanceGate gate;
  const std::vector<index::BlockKey> chain = {1, 2, 3};
  const std::vector<index::BlockKey> first = {2, 3};
  const std::vector<index::BlockKey> second = {3};
  gate.Quarantine("a", first);
  gate.Quarantine("a", first);
  gate.Quarantine("b", second);
  EXPECT_EQ(gate.quarantined_blocks(), 2u);
  EXPECT_EQ(gate.Creditable("w1", chain, 3, 0).creditable, 1u);
  EXPECT_TRUE(gate.Lift("a"));
  EXPECT_FALSE(gate.Lift("a"));
  EXPECT_EQ(gate.Creditable("w1", chain, 3, 0).creditable, 2u);  // 3 is still b's
  EXPECT_TRUE(gate.IsQuarantined(3));
  EXPECT_FALSE(gate.IsQuarantined(2));
  EXPECT_TRUE(gate.Lift("b"));
  EXPECT_EQ(gate.Creditable("w1", chain, 3, 0).creditable, 3u);
  EXPECT_EQ(gate.quarantined_blocks(), 0u);
  EXPECT_FALSE(gate.Lift("never"));
}

TEST(GovernanceGateTest, QuarantinesCrossedNamesEveryQuarantineOfTheChainInOrder) {
  GovernanceGate gate;
  const std::vector<index::BlockKey> chain = {1, 2, 3, 4};
  EXPECT_TRUE(gate.QuarantinesCrossed(chain).empty());
  const std::vector<index::BlockKey> late = {4, 9};
  const std::vector<index::BlockKey> early = {2};
  const std::vector<index::BlockKey> elsewhere = {7};
  gate.Quarantine("q-late", late);
  gate.Quarantine("q-early", early);
  gate.Quarantine("q-elsewhere", elsewhere);
  EXPECT_EQ(gate.QuarantinesCrossed(chain), (std::vector<std::string>{"q-early", "q-late"}));
  const std::vector<index::BlockKey> prefix = {1};
  EXPECT_TRUE(gate.QuarantinesCrossed(prefix).empty());
  const std::vector<std::string> both = {"q-early", "q-late", "q-gone"};
  gate.CountDiverted(both);
  gate.CountDiverted(std::span(both).first(1));
  EXPECT_EQ(gate.Diverted("q-early"), 2u);
  EXPECT_EQ(gate.Diverted("q-late"), 1u);
  EXPECT_EQ(gate.Diverted("q-gone"), 0u);
  ASSERT_TRUE(gate.Lift("q-early"));
  EXPECT_EQ(gate.Diverted("q-early"), 0u);
  EXPECT_EQ(gate.QuarantinesCrossed(chain), (std::vector<std::string>{"q-late"}));
  ASSERT_TRUE(gate.Lift("q-late"));
  ASSERT_TRUE(gate.Lift("q-elsewhere"));
  EXPECT_TRUE(gate.QuarantinesCrossed(chain).empty());
}

TEST(GovernanceGateTest, PendingCountsPerBlockAndNeverGoBelowZero) {
  GovernanceGate gate;
  std::vector<index::BlockKey> chain = {1, 2, 3};
  std::vector<index::BlockKey> target = {2};
  gate.SetPending("w1", target, false, true);
  gate.SetPending("w1", target, false, true);  // a second directive names it
  gate.SetPending("w1", target, false, false);
  EXPECT_EQ(gate.Creditable("w1", chain, 3, 0).creditable, 1u);  // one still pending
  gate.SetPending("w1", target, false, false);
  EXPECT_EQ(gate.Creditable("w1", chain, 3, 0).creditable, 3u);
  // Releasing what is not pending leaves it at zero: one directive then
  // makes it pending again, and one release clears it.
  gate.SetPending("w1", target, false, false);
  gate.SetPending("w3", target, false, false);  // never pending there at all
  EXPECT_EQ(gate.Creditable("w3", chain, 3, 0).creditable, 3u);
  gate.SetPending("w1", target, false, true);
  router::SpanGate::Limit limit = gate.Creditable("w1", chain, 3, 0);
  EXPECT_EQ(limit.creditable, 1u);
  EXPECT_EQ(limit.kind, LookupKind::kMiss);
  EXPECT_EQ(limit.reason, LookupReason::kStale);
  gate.SetPending("w1", target, false, false);
  EXPECT_EQ(gate.Creditable("w1", chain, 3, 0).creditable, 3u);
}

TEST(GovernanceGateTest, WholeWorkerPendingCountsAndClears) {
  GovernanceGate gate;
  std::vector<index::BlockKey> chain = {1, 2, 3};
  gate.SetPending("w1", {}, true, false);  // nothing pending: stays at zero
  EXPECT_EQ(gate.Creditable("w1", chain, 3, 0).creditable, 3u);
  gate.SetPending("w1", {}, true, true);
  gate.SetPending("w1", {}, true, true);
  gate.SetPending("w1", {}, true, false);
  router::SpanGate::Limit limit = gate.Creditable("w1", chain, 3, 0);
  EXPECT_EQ(limit.creditable, 0u);
  EXPECT_EQ(limit.reason, LookupReason::kStale);
  EXPECT_EQ(gate.Creditable("w2", chain, 3, 0).creditable, 3u);
  gate.SetPending("w1", {}, true, false);
  EXPECT_EQ(gate.Creditable("w1", chain, 3, 0).creditable, 3u);
}

TEST(GovernanceGateTest, RulesOfOneKindSurviveTheOthersBeingReleased) {
  GovernanceGate gate;
  std::vector<index::BlockKey> chain = {1, 2, 3, 4};
  std::vector<index::BlockKey> pending = {2};
  std::vector<index::BlockKey> covered = {3};
  NIXLLease lease;
  lease.lease_id = "l1";
  lease.span_digest = "s";
  lease.granted_at_ms = 0;
  lease.expires_at_ms = 1000;
  gate.CoverLease(lease, "w1", covered);
  gate.SetPending("w1", pending, false, true);
  gate.SetPending("w1", {}, true, true);
  EXPECT_EQ(gate.Creditable("w1", chain, 4, 2000).creditable, 0u);
  gate.SetPending("w1", {}, true, false);
  EXPECT_EQ(gate.Creditable("w1", chain, 4, 2000).creditable, 1u);  // block 2 pending
  gate.SetPending("w1", pending, false, false);
  // The worker's lease is still there after its pending blocks are gone.
  router::SpanGate::Limit limit = gate.Creditable("w1", chain, 4, 2000);
  EXPECT_EQ(limit.creditable, 2u);
  EXPECT_EQ(limit.reason, LookupReason::kExpiredTTL);
  EXPECT_EQ(gate.Creditable("w1", chain, 4, 500).creditable, 4u);  // active: credits
}

// The prefill worker keeps the blocks in its prefix cache when the pin
// ends (vLLM frees them to its free queue, not out of the cache); only its
// event stream says when they go.
TEST(GovernanceGateTest, AHandoffsLeaseLeavesThePrefillWorkersCreditAlone) {
  GovernanceGate gate;
  std::vector<index::BlockKey> chain = {10, 11, 12};
  NIXLLease lease;
  lease.lease_id = "handoff-1";
  lease.span_digest = "s";
  lease.expires_at_ms = 1000;
  lease.witness = NIXLLeaseWitness::kHandoff;
  gate.CoverLease(lease, "prefill-0", chain);
  EXPECT_EQ(gate.Creditable("prefill-0", chain, 3, 5000).creditable, 3u);  // expired
  lease.event = NIXLLeaseEvent::kTransferComplete;
  gate.UpdateLease(lease);
  EXPECT_EQ(gate.Creditable("prefill-0", chain, 3, 10).creditable, 3u);
  // A quarantine still refuses the span, there as everywhere.
  const std::vector<index::BlockKey> poisoned = {11};
  gate.Quarantine("q", poisoned);
  EXPECT_EQ(gate.Creditable("prefill-0", chain, 3, 10).creditable, 1u);
}

TEST(GovernanceGateTest, TheLastLeaseToCoverABlockDecides) {
  GovernanceGate gate;
  std::vector<index::BlockKey> chain = {1, 2};
  std::vector<index::BlockKey> covered = {2};
  NIXLLease old_lease;
  old_lease.lease_id = "old";
  old_lease.span_digest = "s";
  old_lease.granted_at_ms = 0;
  old_lease.expires_at_ms = 100;
  NIXLLease new_lease = old_lease;
  new_lease.lease_id = "new";
  new_lease.expires_at_ms = 10000;
  gate.CoverLease(old_lease, "w1", covered);
  EXPECT_EQ(gate.Creditable("w1", chain, 2, 500).creditable, 1u);
  gate.CoverLease(new_lease, "w1", covered);
  EXPECT_EQ(gate.Creditable("w1", chain, 2, 500).creditable, 2u);
  // A lease covering nothing on a worker leaves it with nothing to check.
  NIXLLease empty = old_lease;
  empty.lease_id = "empty";
  gate.CoverLease(empty, "w2", {});
  EXPECT_EQ(gate.Creditable("w2", chain, 2, 500).creditable, 2u);
}

}  // namespace
}  // namespace kvgov::governance

namespace kvgov::governance {
namespace {

NIXLLease LeaseUntil(std::string id, int64_t expires_at_ms) {
  NIXLLease lease;
  lease.lease_id = std::move(id);
  lease.span_digest = "s";
  lease.granted_at_ms = 0;
  lease.expires_at_ms = expires_at_ms;
  return lease;
}

// Ended reported leases are not kept for ever (issue 41): what an ended
// lease still governs is its blocks the worker holds; the rest is let go.
TEST(GovernanceGateTest, AnEndedLeaseIsForgottenBlockByBlockAsItsWorkerDropsThem) {
  GovernanceGate gate;
  const std::vector<index::BlockKey> chain = {1, 2, 3};
  const std::vector<index::BlockKey> covered = {2, 3};
  gate.CoverLease(LeaseUntil("ended", 100), "w1", covered);
  gate.CoverLease(LeaseUntil("active", 10000), "w2", covered);
  std::set<index::BlockKey> held_on_w1 = {2, 3};
  auto held = [&](std::string_view worker, index::BlockKey key) {
    return worker != "w1" || held_on_w1.contains(key);
  };

  // Active, or ended with every block still held: nothing changes.
  EXPECT_EQ(gate.ForgetEnded(50, held), 0u);
  EXPECT_EQ(gate.ForgetEnded(500, held), 0u);
  EXPECT_EQ(gate.lease_count(), 2u);
  EXPECT_EQ(gate.Creditable("w1", chain, 3, 500).creditable, 1u);

  // Block 3 leaves w1: once the lease is asked about again, block 3 is no
  // longer watched; block 2 still refuses.
  held_on_w1.erase(3);
  const int64_t next = 500 + GovernanceGate::kEndedRecheckMs;
  EXPECT_EQ(gate.ForgetEnded(next, held), 0u);
  EXPECT_EQ(gate.Creditable("w1", chain, 3, next).creditable, 1u);
  const std::vector<index::BlockKey> stored_again = {1, 3};  // w1's own KV now
  EXPECT_EQ(gate.Creditable("w1", stored_again, 2, next).creditable, 2u);

  // Block 2 leaves too: the lease is dropped, and w1 has nothing to check.
  // The lease on w2 has ended by now, but its blocks are held: it stays.
  held_on_w1.clear();
  EXPECT_EQ(gate.ForgetEnded(next - 1, held), 0u);  // not asked about again yet
  const int64_t later = next + GovernanceGate::kEndedRecheckMs;
  EXPECT_EQ(gate.ForgetEnded(later, held), 1u);
  EXPECT_EQ(gate.lease_count(), 1u);
  EXPECT_EQ(gate.Creditable("w1", chain, 3, later).creditable, 3u);
  EXPECT_EQ(gate.Creditable("w2", chain, 3, 500).creditable, 3u);
  EXPECT_EQ(gate.Creditable("w2", chain, 3, later).creditable, 1u);
}

TEST(GovernanceGateTest, ForgettingALeaseLeavesTheBlocksALaterLeaseCovers) {
  GovernanceGate gate;
  const std::vector<index::BlockKey> chain = {1, 2};
  const std::vector<index::BlockKey> covered = {2};
  gate.CoverLease(LeaseUntil("old", 100), "w1", covered);
  gate.CoverLease(LeaseUntil("new", 200), "w1", covered);  // ends too, later
  auto gone = [](std::string_view, index::BlockKey) { return false; };
  // Both ended and the block is gone: both dropped, nothing watched.
  EXPECT_EQ(gate.ForgetEnded(300, gone), 2u);
  EXPECT_EQ(gate.lease_count(), 0u);

  gate.CoverLease(LeaseUntil("old", 100), "w1", covered);
  gate.CoverLease(LeaseUntil("new", 200), "w1", covered);
  auto held = [](std::string_view, index::BlockKey) { return true; };
  // "old" no longer decides block 2 ("new" does); at 150 only "old" ended.
  EXPECT_EQ(gate.ForgetEnded(150, gone), 1u);
  EXPECT_EQ(gate.Creditable("w1", chain, 2, 150).creditable, 2u);  // "new" still active
  EXPECT_EQ(gate.ForgetEnded(250, held), 0u);
  EXPECT_EQ(gate.Creditable("w1", chain, 2, 250).creditable, 1u);  // "new" ended, still held
}

}  // namespace
}  // namespace kvgov::governance
