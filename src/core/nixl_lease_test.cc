#include "kvgov/core/nixl_lease.h"

#include <gtest/gtest.h>

namespace kvgov {
namespace {

NIXLLease LeaseWith(NIXLLeaseEvent event) {
  NIXLLease lease;
  lease.lease_id = "lease-1";
  lease.span_digest = "span-1";
  lease.tokens = 512;
  lease.model_id = "llama";
  lease.remote_engine = "prefill-0";
  lease.role = NIXLTransferRole::kPrefillPin;
  lease.event = event;
  lease.granted_at_ms = 1000;
  lease.expires_at_ms = 5000;
  return lease;
}

TEST(NIXLLeaseTest, VerdictFoldsLifecycle) {
  EXPECT_TRUE(NIXLLeaseVerdict(LeaseWith(NIXLLeaseEvent::kCreate), 1000).CanServe());
  EXPECT_TRUE(NIXLLeaseVerdict(LeaseWith(NIXLLeaseEvent::kHeartbeat), 3000).CanServe());

  LookupVerdict completed = NIXLLeaseVerdict(LeaseWith(NIXLLeaseEvent::kTransferComplete), 3000);
  EXPECT_EQ(completed.kind, LookupKind::kMiss);
  EXPECT_EQ(completed.reason, LookupReason::kLeaseReleased);

  LookupVerdict expired = NIXLLeaseVerdict(LeaseWith(NIXLLeaseEvent::kExpiry), 3000);
  EXPECT_EQ(expired.kind, LookupKind::kMiss);
  EXPECT_EQ(expired.reason, LookupReason::kExpiredTTL);

  LookupVerdict aborted = NIXLLeaseVerdict(LeaseWith(NIXLLeaseEvent::kAbort), 3000);
  EXPECT_EQ(aborted.kind, LookupKind::kFault);
  EXPECT_EQ(aborted.reason, LookupReason::kResidencyFault);
  EXPECT_FALSE(aborted.CanServe());
}

TEST(NIXLLeaseTest, ExpiredLeaseDemotesWarmSetAndBlocksRoute) {
  NIXLLease lease = LeaseWith(NIXLLeaseEvent::kHeartbeat);
  EXPECT_TRUE(LeaseWarm(lease, 4999));
  EXPECT_TRUE(NIXLLeaseVerdict(lease, 4999).CanServe());

  EXPECT_FALSE(LeaseWarm(lease, 5000));  // expiry is inclusive: no event needed
  LookupVerdict at_expiry = NIXLLeaseVerdict(lease, 5000);
  EXPECT_EQ(at_expiry.reason, LookupReason::kExpiredTTL);
  EXPECT_FALSE(at_expiry.CanServe());
  EXPECT_EQ(LeaseStateAt(lease, 6000), NIXLLeaseState::kExpired);
}

TEST(NIXLLeaseTest, UnidentifiedLeaseNeverWarm) {
  NIXLLease lease = LeaseWith(NIXLLeaseEvent::kCreate);
  lease.span_digest.clear();
  EXPECT_EQ(LeaseStateAt(lease, 2000), NIXLLeaseState::kUnidentified);
  EXPECT_FALSE(LeaseWarm(lease, 2000));
  LookupVerdict verdict = NIXLLeaseVerdict(lease, 2000);
  EXPECT_EQ(verdict.reason, LookupReason::kAbsent);
  Entry entry = FromNIXLLease(lease, 2000);
  EXPECT_FALSE(entry.id.Valid());
  EXPECT_EQ(entry.labels.at("nixl_state"), "unidentified");
}

TEST(NIXLLeaseTest, ClockBeforeGrantFailsClosed) {
  EXPECT_FALSE(LeaseWarm(LeaseWith(NIXLLeaseEvent::kCreate), 999));
}

TEST(NIXLLeaseTest, LowersToRemoteResidency) {
  NIXLLease lease = LeaseWith(NIXLLeaseEvent::kCreate);
  lease.trace_id = "trace-1";
  lease.request_id = "req-1";
  Entry entry = FromNIXLLease(lease, 2000);
  EXPECT_EQ(entry.plane, Plane::kKVTransfer);
  EXPECT_EQ(entry.source, Source::kRideEngine);
  EXPECT_EQ(entry.id.media_type, MediaType::kKVSpan);
  EXPECT_EQ(entry.residency.tier, ResidencyTier::kRemote);
  EXPECT_EQ(entry.residency.owner, "prefill-0");
  EXPECT_EQ(entry.residency.lease, "lease-1");
  EXPECT_EQ(entry.coherence.invalidation_mode, InvalidationMode::kExternalRefutation);
  EXPECT_EQ(entry.labels.at("nixl_lease"), "lease-1");
  EXPECT_EQ(entry.labels.at("nixl_role"), "prefill_pin");
  EXPECT_EQ(entry.labels.at("nixl_event"), "create");
  EXPECT_EQ(entry.labels.at("nixl_state"), "active");
  EXPECT_EQ(entry.labels.at("remote_engine"), "prefill-0");
  EXPECT_EQ(entry.labels.at("trace_id"), "trace-1");
  EXPECT_EQ(entry.labels.at("request_id"), "req-1");
  EXPECT_EQ(entry.labels.at("lease_expires_at"), "5000");
  EXPECT_EQ(entry.labels.at("direction"), "offload");

  Entry aborted = FromNIXLLease(LeaseWith(NIXLLeaseEvent::kAbort), 2000);
  EXPECT_EQ(aborted.labels.at("outcome"), "fault");
  EXPECT_EQ(aborted.labels.at("fault_reason"), "nixl_lease_abort");
  EXPECT_EQ(aborted.labels.at("nixl_state"), "failed");
}

TEST(NIXLLeaseTest, RoleChoosesDirection) {
  NIXLLease lease = LeaseWith(NIXLLeaseEvent::kCreate);
  lease.role = NIXLTransferRole::kDecodePull;
  EXPECT_EQ(FromNIXLLease(lease, 2000).labels.at("direction"), "restore");
  lease.role = NIXLTransferRole::kPushWrite;
  EXPECT_EQ(FromNIXLLease(lease, 2000).labels.at("direction"), "migrate");
}

TEST(NIXLLeaseTest, GrantStartsTheClock) {
  NIXLLease report;
  report.lease_id = "lease-2";
  report.span_digest = "span-2";
  report.ttl_ms = 30000;
  Result<NIXLLease> lease = GrantNIXLLease(report, 100);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->granted_at_ms, 100);
  EXPECT_EQ(lease->expires_at_ms, 30100);
  EXPECT_TRUE(LeaseWarm(*lease, 30099));
  EXPECT_FALSE(LeaseWarm(*lease, 30100));

  report.lease_id.clear();
  EXPECT_EQ(GrantNIXLLease(report, 100).status().message(), "lease_id: required, got empty");
}

TEST(NIXLLeaseTest, HeartbeatExtendsExpiryByTheTTL) {
  NIXLLease lease = LeaseWith(NIXLLeaseEvent::kCreate);
  lease.ttl_ms = 4000;
  Result<NIXLLease> beaten = ApplyNIXLLeaseEvent(lease, NIXLLeaseEvent::kHeartbeat, 4500);
  ASSERT_TRUE(beaten.ok());
  EXPECT_EQ(beaten->expires_at_ms, 8500);
  EXPECT_TRUE(LeaseWarm(*beaten, 8000));
}

TEST(NIXLLeaseTest, TerminalStatesNeverRevive) {
  Result<NIXLLease> done = ApplyNIXLLeaseEvent(LeaseWith(NIXLLeaseEvent::kCreate),
                                               NIXLLeaseEvent::kTransferComplete, 2000);
  ASSERT_TRUE(done.ok());
  Result<NIXLLease> revived = ApplyNIXLLeaseEvent(*done, NIXLLeaseEvent::kHeartbeat, 2500);
  ASSERT_FALSE(revived.ok());
  EXPECT_EQ(revived.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(revived.status().message(),
            "lease 'lease-1' is completed; event 'heartbeat' cannot revive it");

  // Expired by the clock alone, then a heartbeat arrives late.
  Result<NIXLLease> late =
      ApplyNIXLLeaseEvent(LeaseWith(NIXLLeaseEvent::kHeartbeat), NIXLLeaseEvent::kHeartbeat, 5000);
  EXPECT_EQ(late.status().code(), StatusCode::kFailedPrecondition);
}

TEST(NIXLLeaseTest, LateExpiryReportOnExpiredLeaseIsANoop) {
  NIXLLease lease = LeaseWith(NIXLLeaseEvent::kHeartbeat);
  Result<NIXLLease> same = ApplyNIXLLeaseEvent(lease, NIXLLeaseEvent::kExpiry, 7000);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, lease);
}

TEST(NIXLLeaseTest, CreateTwiceAndTimeTravelAreRejected) {
  NIXLLease lease = LeaseWith(NIXLLeaseEvent::kCreate);
  EXPECT_EQ(ApplyNIXLLeaseEvent(lease, NIXLLeaseEvent::kCreate, 2000).status().code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(ApplyNIXLLeaseEvent(lease, NIXLLeaseEvent::kHeartbeat, 500).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(NIXLLeaseTest, ClassifyClearRecordsProof) {
  EXPECT_EQ(ClassifyNIXLClear({"span-1", true, false}), NIXLClearKind::kExactSpan);
  EXPECT_EQ(EvictionScopeOf(NIXLClearKind::kExactSpan), KVEvictionScope::kExactSpan);

  EXPECT_EQ(ClassifyNIXLClear({"", false, true}), NIXLClearKind::kWholePrefix);
  EXPECT_EQ(EvictionScopeOf(NIXLClearKind::kWholePrefix), KVEvictionScope::kWholePrefixCache);

  EXPECT_EQ(ClassifyNIXLClear({"span-1", false, false}), NIXLClearKind::kNone);
  EXPECT_FALSE(EvictionScopeOf(NIXLClearKind::kNone).has_value());

  // Confirmed without a named span proves nothing exact.
  EXPECT_EQ(ClassifyNIXLClear({"", true, false}), NIXLClearKind::kNone);
}

}  // namespace
}  // namespace kvgov
