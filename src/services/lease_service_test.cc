#include "kvgov/services/lease_service.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/scratch_governance_store.h"

namespace kvgov::services {
namespace {

using test_support::ScratchGovernanceStore;

using Json = nlohmann::json;

constexpr int64_t kBlockSize = 4;

NIXLLease Report(std::string id, NIXLLeaseEvent event, int64_t ttl_ms = 1000) {
  NIXLLease report;
  report.lease_id = std::move(id);
  report.span_digest = "span";
  report.remote_engine = "prefill-0";
  report.role = NIXLTransferRole::kPrefillPin;
  report.event = event;
  report.ttl_ms = ttl_ms;
  return report;
}

// Two blocks of the prefill worker, named by token ids.
SpanResidency TwoBlocks() {
  SpanResidency span;
  span.worker = "prefill-0";
  span.token_ids = {1, 2, 3, 4, 5, 6, 7, 8};
  return span;
}

// The service over a real store and journal, made again as a restart
// makes it by Restart().
class LeaseServiceTest : public ScratchGovernanceStore {
 protected:
  void SetUp() override {
    ScratchGovernanceStore::SetUp();
    ASSERT_TRUE(index_.AddWorker("prefill-0", "m", kBlockSize).ok());
    Restart();
  }
  void TearDown() override {
    service_.reset();
    ScratchGovernanceStore::TearDown();
  }

  // A fresh service, gate and registry over the same store and journal.
  void Restart() {
    service_.reset();
    gate_ = std::make_unique<governance::GovernanceGate>();
    metrics_ = std::make_unique<metrics::Registry>();
    Result<std::unique_ptr<LeaseService>> service = LeaseService::Create(
        gate_.get(), &index_, store_.get(), recorder_.get(), metrics_.get(), {});
    ASSERT_TRUE(service.ok()) << service.status().ToString();
    service_ = std::move(service).value();
  }

  Json StoredRecord(const std::string& lease_id) const {
    Result<std::optional<std::string>> record =
        store_->Get(store::Column::kGovernance, "lease/" + lease_id);
    EXPECT_TRUE(record.ok() && record->has_value()) << lease_id;
    return record.ok() && record->has_value() ? Json::parse(**record) : Json();
  }

  bool Rendered(std::string_view sample) const {
    return metrics_->Render().find(sample) != std::string::npos;
  }

  index::ResidencyIndex index_{index::BlockKeyHasher(), 2};
  std::unique_ptr<governance::GovernanceGate> gate_;
  std::unique_ptr<metrics::Registry> metrics_;
  std::unique_ptr<LeaseService> service_;
};

TEST_F(LeaseServiceTest, EachTransitionIsJournaledWithTheLeaseRecordBesideItAndCounted) {
  ASSERT_TRUE(
      service_->ApplyReport(Report("l1", NIXLLeaseEvent::kCreate), TwoBlocks(), "ops", 100).ok());
  // The gate credits the pinned span while the lease is active, and not
  // once it ended.
  const auto keys = StoredRecord("l1")["keys"].get<std::vector<index::BlockKey>>();
  EXPECT_EQ(gate_->Creditable("prefill-0", keys, keys.size(), 150).creditable, 2u);
  ASSERT_TRUE(
      service_
          ->ApplyReport(Report("l1", NIXLLeaseEvent::kTransferComplete), std::nullopt, "ops", 200)
          .ok());
  EXPECT_EQ(gate_->Creditable("prefill-0", keys, keys.size(), 250).creditable, 0u);

  const std::vector<journal::Row> rows = Rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].kind, "lease.transition");
  EXPECT_EQ(rows[0].actor, "ops");
  const Json granted = Json::parse(rows[0].payload);
  EXPECT_EQ(granted["from"], "none");
  EXPECT_EQ(granted["to"], "active");
  EXPECT_EQ(granted["blocks"], 2);
  // The completion keeps the span the grant resolved.
  EXPECT_EQ(Json::parse(rows[1].payload)["to"], "completed");
  EXPECT_EQ(Json::parse(rows[1].payload)["blocks"], 2);
  const Json record = StoredRecord("l1");
  EXPECT_EQ(record["worker"], "prefill-0");
  EXPECT_EQ(record["keys"].size(), 2u);
  EXPECT_EQ(record["lease"]["event"], "transfer_complete");

  EXPECT_TRUE(Rendered(R"(kvgov_lease_grants_total{witness="reported"} 1)"));
  EXPECT_TRUE(Rendered(R"(kvgov_lease_grants_total{witness="handoff"} 0)"));
  EXPECT_TRUE(Rendered(R"(kvgov_lease_transitions_total{from="active",to="completed"} 1)"));
}

TEST_F(LeaseServiceTest, AnEndedLeaseIsNotRevivedAndTheRefusalIsCountedNotJournaled) {
  ASSERT_TRUE(
      service_->ApplyReport(Report("l1", NIXLLeaseEvent::kCreate), TwoBlocks(), "ops", 100).ok());
  ASSERT_TRUE(service_->ApplyReport(Report("l1", NIXLLeaseEvent::kAbort), {}, "ops", 150).ok());
  const Status revived =
      service_->ApplyReport(Report("l1", NIXLLeaseEvent::kHeartbeat), {}, "ops", 200);
  EXPECT_EQ(revived.code(), StatusCode::kFailedPrecondition) << revived.ToString();
  EXPECT_EQ(Rows().size(), 2u);
  EXPECT_EQ(LeaseStateAt(*service_->Get("l1"), 200), NIXLLeaseState::kFailed);
  EXPECT_TRUE(Rendered(R"(kvgov_lease_rejections_total{reason="failed_precondition"} 1)"));
}

TEST_F(LeaseServiceTest, AHeartbeatStoresTheNewExpiryWithoutARow) {
  ASSERT_TRUE(
      service_->ApplyReport(Report("l1", NIXLLeaseEvent::kCreate, 5000), TwoBlocks(), "ops", 1000)
          .ok());
  ASSERT_TRUE(
      service_->ApplyReport(Report("l1", NIXLLeaseEvent::kHeartbeat, 5000), {}, "ops", 4000).ok());
  EXPECT_EQ(Rows().size(), 1u);
  EXPECT_EQ(StoredRecord("l1")["lease"]["expires_at_ms"], 9000);
  // And the span the grant resolved stays with it.
  EXPECT_EQ(StoredRecord("l1")["keys"].size(), 2u);
}

TEST_F(LeaseServiceTest, RecoveryRestoresLeasesAndJournalsThoseThatExpiredWhileDown) {
  ASSERT_TRUE(
      service_->ApplyReport(Report("short", NIXLLeaseEvent::kCreate, 1000), TwoBlocks(), "ops", 0)
          .ok());
  ASSERT_TRUE(
      service_->ApplyReport(Report("long", NIXLLeaseEvent::kCreate, 100000), TwoBlocks(), "ops", 0)
          .ok());
  Restart();
  EXPECT_FALSE(service_->Get("short").has_value());
  ASSERT_TRUE(service_->Recover(5000).ok());

  ASSERT_TRUE(service_->Get("short").has_value());
  EXPECT_EQ(LeaseStateAt(*service_->Get("short"), 5000), NIXLLeaseState::kExpired);
  EXPECT_EQ(LeaseStateAt(*service_->Get("long"), 5000), NIXLLeaseState::kActive);
  const std::vector<journal::Row> rows = Rows();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[2].subject, "short");
  EXPECT_EQ(rows[2].actor, kDaemonActor);
  EXPECT_EQ(Json::parse(rows[2].payload)["to"], "expired");
  EXPECT_EQ(Json::parse(rows[2].payload)["blocks"], 2);
  // Expiry is recorded once: the next round finds nothing due.
  service_->ExpireDue(6000);
  EXPECT_EQ(Rows().size(), 3u);
}

TEST_F(LeaseServiceTest, RecoveryOfAReplicaLeavesExpiryToTheHousekeeper) {
  ASSERT_TRUE(
      service_->ApplyReport(Report("short", NIXLLeaseEvent::kCreate, 1000), TwoBlocks(), "ops", 0)
          .ok());
  GovernanceRecorder replica_recorder(journal_.get(), /*replicated=*/true);
  metrics::Registry metrics;
  Result<std::unique_ptr<LeaseService>> replica =
      LeaseService::Create(gate_.get(), &index_, store_.get(), &replica_recorder, &metrics, {});
  ASSERT_TRUE(replica.ok());
  ASSERT_TRUE((*replica)->Recover(5000).ok());
  EXPECT_TRUE((*replica)->Get("short").has_value());
  EXPECT_EQ(Rows().size(), 1u);
}

TEST_F(LeaseServiceTest, AHandoffsRecordIsDeletedAMinuteAfterItEnded) {
  NIXLLease handoff = Report("handoff-r1", NIXLLeaseEvent::kCreate);
  handoff.witness = NIXLLeaseWitness::kHandoff;
  ASSERT_TRUE(service_->ApplyReport(handoff, TwoBlocks(), kDaemonActor, 0).ok());
  handoff.event = NIXLLeaseEvent::kTransferComplete;
  ASSERT_TRUE(service_->ApplyReport(handoff, {}, kDaemonActor, 10).ok());

  service_->ForgetEnded(10 + 59 * 1000);
  EXPECT_TRUE(service_->Get("handoff-r1").has_value());
  service_->ForgetEnded(10 + 61 * 1000);
  EXPECT_FALSE(service_->Get("handoff-r1").has_value());
  Result<std::optional<std::string>> record =
      store_->Get(store::Column::kGovernance, "lease/handoff-r1");
  ASSERT_TRUE(record.ok());
  EXPECT_FALSE(record->has_value());
  EXPECT_EQ(Rows().size(), 2u);  // its history stays
}

// The replicated log's entry writing `record` (a lease record) for `lease_id`.
replication::LogEntry EntryWriting(std::string lease_id, std::string record, int64_t time_ms) {
  replication::LogEntry entry;
  entry.actor = "ops";
  entry.time_ms = time_ms;
  entry.writes.push_back({"governance", "lease/" + std::move(lease_id), std::move(record)});
  return entry;
}

TEST_F(LeaseServiceTest, TheReplicatedGuardAdmitsOnlyLegalStepsFromTheStoredRecord) {
  ASSERT_TRUE(
      service_->ApplyReport(Report("l1", NIXLLeaseEvent::kCreate), TwoBlocks(), "ops", 100).ok());
  Json record = StoredRecord("l1");

  // A second create of a known lease.
  EXPECT_EQ(service_->GuardReplicated(EntryWriting("l1", record.dump(), 200)).code(),
            StatusCode::kAlreadyExists);
  // A heartbeat of an active lease applies; of an unknown one, not.
  record["lease"]["event"] = "heartbeat";
  EXPECT_TRUE(service_->GuardReplicated(EntryWriting("l1", record.dump(), 200)).ok());
  EXPECT_EQ(service_->GuardReplicated(EntryWriting("l9", record.dump(), 200)).code(),
            StatusCode::kNotFound);
  // kvgov's own expiry of a lease whose time is not up.
  record["lease"]["event"] = "expiry";
  replication::LogEntry early = EntryWriting("l1", record.dump(), 200);
  early.actor = kDaemonActor;
  EXPECT_EQ(service_->GuardReplicated(early).code(), StatusCode::kFailedPrecondition);

  // Once ended, nothing moves it.
  ASSERT_TRUE(
      service_->ApplyReport(Report("l1", NIXLLeaseEvent::kTransferComplete), {}, "ops", 300).ok());
  record["lease"]["event"] = "heartbeat";
  const Status moved = service_->GuardReplicated(EntryWriting("l1", record.dump(), 400));
  EXPECT_EQ(moved.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(moved.message().find("completed"), std::string::npos) << moved.ToString();
  // A value that is not a lease record names the lease.
  const Status garbage = service_->GuardReplicated(EntryWriting("l1", "{}", 400));
  EXPECT_EQ(garbage.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(garbage.ToString().find("lease 'l1'"), std::string::npos) << garbage.ToString();
}

TEST_F(LeaseServiceTest, AReplicatedRecordIsAppliedAsRecoveryAppliesIt) {
  ASSERT_TRUE(
      service_->ApplyReport(Report("l1", NIXLLeaseEvent::kCreate), TwoBlocks(), "ops", 100).ok());
  const std::string record = StoredRecord("l1").dump();
  Restart();
  EXPECT_FALSE(service_->ApplyReplicatedRecord("{\"not\":\"a lease\"}"));
  ASSERT_TRUE(service_->ApplyReplicatedRecord(record));
  ASSERT_TRUE(service_->Get("l1").has_value());
  EXPECT_EQ(service_->Get("l1")->remote_engine, "prefill-0");
}

}  // namespace
}  // namespace kvgov::services
