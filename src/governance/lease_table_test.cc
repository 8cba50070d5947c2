#include "kvgov/governance/lease_table.h"

#include <gtest/gtest.h>

namespace kvgov::governance {
namespace {

NIXLLease Report(NIXLLeaseEvent event, int64_t ttl_ms = 1000) {
  NIXLLease report;
  report.lease_id = "l1";
  report.span_digest = "span";
  report.remote_engine = "prefill-0";
  report.role = NIXLTransferRole::kPrefillPin;
  report.event = event;
  report.ttl_ms = ttl_ms;
  return report;
}

TEST(LeaseTableTest, LifecycleFoldsAndTerminalStatesNeverRevive) {
  LeaseTable table;
  Result<std::optional<LeaseTransition>> created =
      table.Apply(Report(NIXLLeaseEvent::kCreate), 100);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(created->has_value());
  EXPECT_FALSE((*created)->from.has_value());
  EXPECT_EQ((*created)->to, NIXLLeaseState::kActive);
  EXPECT_TRUE(NIXLLeaseVerdict(*table.Get("l1"), 200).CanServe());

  // A heartbeat keeps it active: no transition, but the expiry moves.
  Result<std::optional<LeaseTransition>> beat =
      table.Apply(Report(NIXLLeaseEvent::kHeartbeat), 900);
  ASSERT_TRUE(beat.ok());
  EXPECT_FALSE(beat->has_value());
  EXPECT_EQ(table.Get("l1")->expires_at_ms, 1900);

  Result<std::optional<LeaseTransition>> done =
      table.Apply(Report(NIXLLeaseEvent::kTransferComplete), 1000);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ((*done)->from, NIXLLeaseState::kActive);
  EXPECT_EQ((*done)->to, NIXLLeaseState::kCompleted);
  EXPECT_EQ(NIXLLeaseVerdict(*table.Get("l1"), 1000).reason, LookupReason::kLeaseReleased);

  Result<std::optional<LeaseTransition>> revived =
      table.Apply(Report(NIXLLeaseEvent::kHeartbeat), 1100);
  EXPECT_EQ(revived.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(table.Apply(Report(NIXLLeaseEvent::kCreate), 1200).status().code(),
            StatusCode::kAlreadyExists);
  NIXLLease stranger = Report(NIXLLeaseEvent::kHeartbeat);
  stranger.lease_id = "l2";
  EXPECT_EQ(table.Apply(stranger, 1200).status().code(), StatusCode::kNotFound);
}

TEST(LeaseTableTest, PreviewChangesNothingAndRestoreCommitsIt) {
  LeaseTable table;
  Result<LeaseTable::Change> grant = table.Preview(Report(NIXLLeaseEvent::kCreate), 100);
  ASSERT_TRUE(grant.ok()) << grant.status().ToString();
  ASSERT_TRUE(grant->transition.has_value());
  EXPECT_EQ(grant->transition->to, NIXLLeaseState::kActive);
  EXPECT_EQ(grant->next.expires_at_ms, 1100);
  EXPECT_FALSE(table.Get("l1").has_value());  // previewed, not applied

  table.Restore(grant->next);
  Result<LeaseTable::Change> beat = table.Preview(Report(NIXLLeaseEvent::kHeartbeat), 600);
  ASSERT_TRUE(beat.ok());
  EXPECT_FALSE(beat->transition.has_value());
  EXPECT_EQ(beat->next.expires_at_ms, 1600);
  EXPECT_EQ(table.Get("l1")->expires_at_ms, 1100);
  EXPECT_EQ(table.Preview(Report(NIXLLeaseEvent::kCreate), 700).status().code(),
            StatusCode::kAlreadyExists);
}

TEST(LeaseTableTest, ExpiryIsATimerNotOnlyALazyCheck) {
  LeaseTable table;
  ASSERT_TRUE(table.Apply(Report(NIXLLeaseEvent::kCreate, 500), 0).ok());
  EXPECT_TRUE(table.ExpireDue(499).empty());
  std::vector<LeaseTransition> expired = table.ExpireDue(500);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0],
            (LeaseTransition{"l1", NIXLLeaseState::kActive, NIXLLeaseState::kExpired, 500}));
  EXPECT_TRUE(table.ExpireDue(600).empty());  // recorded once
  // The record itself now says expired, whatever clock reads it later.
  EXPECT_EQ(LeaseStateAt(*table.Get("l1"), 0), NIXLLeaseState::kExpired);
  EXPECT_EQ(table.Apply(Report(NIXLLeaseEvent::kHeartbeat), 700).status().code(),
            StatusCode::kFailedPrecondition);
}

// Expiry follows each lease's own deadline, as heartbeats and ends move
// it: the index the timer walks stays in step with the records.
TEST(LeaseTableTest, ManyLeasesExpireEachAtItsDeadlineAsHeartbeatsAndEndsMoveIt) {
  LeaseTable table;
  for (int i = 0; i < 100; ++i) {
    NIXLLease report = Report(NIXLLeaseEvent::kCreate, 1000 + 10 * i);  // due at 1000 + 10 i
    report.lease_id = "l" + std::to_string(i);
    ASSERT_TRUE(table.Apply(report, 0).ok());
  }
  NIXLLease heartbeat = Report(NIXLLeaseEvent::kHeartbeat);
  heartbeat.lease_id = "l0";
  ASSERT_TRUE(table.Apply(heartbeat, 900).ok());  // due at 1900 now
  NIXLLease complete = Report(NIXLLeaseEvent::kTransferComplete);
  complete.lease_id = "l1";
  ASSERT_TRUE(table.Apply(complete, 900).ok());  // ends: never expires

  std::vector<LeaseTransition> expired = table.ExpireDue(1100);
  std::vector<std::string> ids;
  for (const LeaseTransition& transition : expired) ids.push_back(transition.lease_id);
  // l2..l10 were due at 1020..1100; l0 moved past, l1 ended.
  EXPECT_EQ(ids, (std::vector<std::string>{"l2", "l3", "l4", "l5", "l6", "l7", "l8", "l9", "l10"}));
  EXPECT_EQ(table.ExpireDue(1899).size(), 79u);  // l11..l89, due by 1890
  expired = table.ExpireDue(1900);               // l0 after its heartbeat, and l90
  ASSERT_EQ(expired.size(), 2u);
  EXPECT_EQ(expired[0].lease_id, "l0");
  EXPECT_EQ(expired[1].lease_id, "l90");
  EXPECT_EQ(table.ExpireDue(5000).size(), 9u);  // l91..l99
  EXPECT_EQ(table.CountByState(5000)[NIXLLeaseState::kExpired], 99u);

  // Forgotten by end time: everything ended by 1900, not what ended after.
  table.ForgetEndedBefore(1901, 1901);
  EXPECT_FALSE(table.Get("l0").has_value());
  EXPECT_FALSE(table.Get("l1").has_value());
  EXPECT_TRUE(table.Get("l95").has_value());
}

TEST(LeaseTableTest, CountsByStateAndForgetsEndedLeases) {
  LeaseTable table;
  for (const char* id : {"a", "b", "c"}) {
    NIXLLease report = Report(NIXLLeaseEvent::kCreate);
    report.lease_id = id;
    ASSERT_TRUE(table.Apply(report, 0).ok());
  }
  NIXLLease abort = Report(NIXLLeaseEvent::kAbort);
  abort.lease_id = "b";
  ASSERT_TRUE(table.Apply(abort, 10).ok());
  std::map<NIXLLeaseState, uint64_t> counts = table.CountByState(20);
  EXPECT_EQ(counts[NIXLLeaseState::kActive], 2u);
  EXPECT_EQ(counts[NIXLLeaseState::kFailed], 1u);
  table.ForgetEndedBefore(11, 11);
  EXPECT_FALSE(table.Get("b").has_value());
  EXPECT_TRUE(table.Get("a").has_value());
}

TEST(LeaseTableTest, ARestoredEndedLeaseIsForgottenToo) {
  LeaseTable table;
  NIXLLease ended = Report(NIXLLeaseEvent::kTransferComplete);
  ended.granted_at_ms = 100;
  table.Restore(ended);
  NIXLLease active = Report(NIXLLeaseEvent::kCreate);
  active.lease_id = "still";
  table.Restore(active);
  table.ForgetEndedBefore(101, 101);
  EXPECT_FALSE(table.Get(ended.lease_id).has_value());
  EXPECT_TRUE(table.Get("still").has_value());
}

// A handoff's lease, one a request, is forgotten sooner than a reported one.
TEST(LeaseTableTest, HandoffLeasesAreForgottenByTheirOwnCutoff) {
  LeaseTable table;
  for (NIXLLeaseWitness witness : {NIXLLeaseWitness::kReported, NIXLLeaseWitness::kHandoff}) {
    NIXLLease report = Report(NIXLLeaseEvent::kCreate);
    report.lease_id = std::string(ToString(witness));
    report.witness = witness;
    ASSERT_TRUE(table.Apply(report, 0).ok());
    report.event = NIXLLeaseEvent::kTransferComplete;
    ASSERT_TRUE(table.Apply(report, 10).ok());
  }
  EXPECT_EQ(table.ForgetEndedBefore(/*cutoff_ms=*/5, /*handoff_cutoff_ms=*/11),
            std::vector<std::string>{"handoff"});
  EXPECT_TRUE(table.Get("reported").has_value());
  EXPECT_FALSE(table.Get("handoff").has_value());
}

}  // namespace
}  // namespace kvgov::governance
