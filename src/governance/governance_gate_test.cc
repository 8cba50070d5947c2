#include "kvgov/governance/governance_gate.h"

#include <gtest/gtest.h>

namespace kvgov::governance {
namespace {

TEST(GovernanceGateTest, QuarantineStopsCreditAndEverythingAfterIt) {
  GovernanceGate gate;
  std::vector<index::BlockKey> chain = {1, 2, 3, 4};
  EXPECT_EQ(gate.Creditable("w1", chain, 4, 0).creditable, 4u);
  std::vector<index::BlockKey> poisoned = {2};
  gate.Quarantine(poisoned);
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
