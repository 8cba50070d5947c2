#include "kvgov/services/replicated_governance.h"

#include <gtest/gtest.h>

#include "kvgov/codec/directive_record.h"
#include "kvgov/codec/json_codec.h"
#include "kvgov/index/block_key.h"
#include "testing/scratch_governance_store.h"

namespace kvgov::services {
namespace {

using test_support::ScratchGovernanceStore;

// One replica's services, fed from the log alone: its recorder is a
// replica's, so the directive driver leaves every directive to the log.
class ReplicatedGovernanceTest : public ScratchGovernanceStore {
 protected:
  void SetUp() override {
    ScratchGovernanceStore::SetUp();
    replica_recorder_ = std::make_unique<GovernanceRecorder>(journal_.get(), /*replicated=*/true);
    ASSERT_TRUE(index_.AddWorker("w", "m", 4).ok());
    ASSERT_TRUE(workers_.Add("w", /*probed=*/false).ok());
    Result<std::unique_ptr<LeaseService>> leases =
        LeaseService::Create(&gate_, &index_, store_.get(), replica_recorder_.get(), &metrics_, {});
    ASSERT_TRUE(leases.ok());
    leases_ = std::move(leases).value();
    Result<std::unique_ptr<DirectiveDriver>> directives = DirectiveDriver::Create(
        {.index = &index_,
         .gate = &gate_,
         .salts = &salts_,
         .recorder = replica_recorder_.get(),
         .store = store_.get(),
         .issuer = nullptr,  // a replica certifies only what it drives
         .engines = {.engine_of = [](std::string_view) { return nullptr; },
                     .stream_seq = [](std::string_view) -> int64_t { return -1; }}},
        &metrics_, {.witness_timeout_ms = 60000, .claim_ttl_ms = 10000});
    ASSERT_TRUE(directives.ok());
    directives_ = std::move(directives).value();
  }
  void TearDown() override {
    directives_.reset();
    leases_.reset();
    ScratchGovernanceStore::TearDown();
  }

  ReplicatedGovernance Governance() {
    return ReplicatedGovernance(leases_.get(), &quarantines_, &salts_, directives_.get(), &drains_);
  }

  std::unique_ptr<GovernanceRecorder> replica_recorder_;
  index::ResidencyIndex index_;
  governance::GovernanceGate gate_;
  router::WorkerStatusTable workers_;
  metrics::Registry metrics_;
  TenantSalts salts_{"secret", &index_, &gate_};
  // Applying the log's writes needs the gate and the status table alone.
  QuarantineService quarantines_{&gate_, nullptr, nullptr};
  WorkerDrains drains_{&workers_, nullptr, nullptr};
  std::unique_ptr<LeaseService> leases_;
  std::unique_ptr<DirectiveDriver> directives_;
};

// A lease record as the lease service stores it, for worker "w", no keys.
std::string LeaseRecordOf(std::string_view lease_id, NIXLLeaseEvent event) {
  NIXLLease lease;
  lease.lease_id = std::string(lease_id);
  lease.span_digest = "span";
  lease.remote_engine = "w";
  lease.event = event;
  lease.ttl_ms = 1000;
  return R"({"lease":)" + EncodeJson(lease) + R"(,"worker":"w","keys":[]})";
}

TEST_F(ReplicatedGovernanceTest, EachRecordReachesTheServiceWhoseRecordItIs) {
  governance::Directive directive;
  directive.id = "d1";
  directive.model = "m";
  const std::string salt_before = salts_.Current("acme", "m");
  const store::WriteOp revoked = TenantSalts::RecordOf("acme", salts_.Advanced("acme", ""));

  replication::LogEntry entry;
  entry.writes = {
      {"governance", "lease/l1", LeaseRecordOf("l1", NIXLLeaseEvent::kCreate)},
      {"governance", "quarantine/q1", R"({"id":"q1","keys":[1,2]})"},
      {"governance", "drain/w", "1"},
      {"governance", revoked.key, revoked.value},
      {"governance", "invalidation/d1", EncodeDirectiveRecord(directive)},
      {"tokens", "lease/not-a-lease", "ignored: the tokens column is the token file's"},
  };
  ReplicatedGovernance governance = Governance();
  ASSERT_TRUE(governance.Guard(entry).ok());
  governance.Apply(entry);

  ASSERT_TRUE(leases_->Get("l1").has_value());
  EXPECT_EQ(leases_->Get("l1")->remote_engine, "w");
  EXPECT_EQ(gate_.quarantined_blocks(), 2u);
  EXPECT_TRUE(workers_.Get("w")->draining);
  EXPECT_NE(salts_.Current("acme", "m"), salt_before);
  ASSERT_TRUE(directives_->Get("d1").has_value());
  EXPECT_EQ(directives_->Get("d1")->model, "m");

  // Deletions lift and undrain; applied twice, the same.
  replication::LogEntry lifted;
  lifted.writes = {{"governance", "quarantine/q1", std::nullopt},
                   {"governance", "drain/w", std::nullopt}};
  governance.Apply(lifted);
  governance.Apply(lifted);
  EXPECT_EQ(gate_.quarantined_blocks(), 0u);
  EXPECT_FALSE(workers_.Get("w")->draining);
}

TEST_F(ReplicatedGovernanceTest, TheGuardRefusesAnIllegalLeaseStep) {
  replication::LogEntry entry;
  entry.writes = {{"governance", "lease/never-created",
                   LeaseRecordOf("never-created", NIXLLeaseEvent::kHeartbeat)}};
  EXPECT_EQ(Governance().Guard(entry).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvgov::services
