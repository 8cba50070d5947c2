#include "kvgov/services/quarantine_service.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/scratch_governance_store.h"

namespace kvgov::services {
namespace {

using test_support::ScratchGovernanceStore;

using Json = nlohmann::json;

const std::vector<index::BlockKey> kKeys = {11, 12, 13};

class QuarantineServiceTest : public ScratchGovernanceStore {
 protected:
  void SetUp() override {
    ScratchGovernanceStore::SetUp();
    service_ = std::make_unique<QuarantineService>(&gate_, store_.get(), recorder_.get());
  }

  Quarantine Imposed() {
    Quarantine wanted;
    wanted.model = "m";
    wanted.tenant = "acme";
    wanted.reason = "leaked";
    wanted.keys = kKeys;
    Result<Quarantine> imposed = service_->Impose("ops", std::move(wanted), 1234);
    EXPECT_TRUE(imposed.ok()) << imposed.status().ToString();
    return imposed.ok() ? *imposed : Quarantine{};
  }

  size_t Creditable(const governance::GovernanceGate& gate) const {
    return gate.Creditable("w", kKeys, kKeys.size(), 0).creditable;
  }

  governance::GovernanceGate gate_;
  std::unique_ptr<QuarantineService> service_;
};

TEST_F(QuarantineServiceTest, ImposingJournalsTheRecordAndStopsCreditLiftingRestoresIt) {
  const Quarantine quarantine = Imposed();
  ASSERT_EQ(quarantine.id.size(), 32u);
  EXPECT_EQ(quarantine.created_ms, 1234);
  EXPECT_EQ(Creditable(gate_), 0u);
  EXPECT_EQ(gate_.quarantined_blocks(), 3u);

  Result<Quarantine> found = service_->Find(quarantine.id);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->tenant, "acme");
  EXPECT_EQ(found->keys, kKeys);

  ASSERT_TRUE(service_->Lift("ops", *found, "cleaned").ok());
  EXPECT_EQ(Creditable(gate_), kKeys.size());
  EXPECT_EQ(service_->Find(quarantine.id).status().code(), StatusCode::kNotFound);

  const std::vector<journal::Row> rows = Rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].kind, "quarantine");
  EXPECT_EQ(Json::parse(rows[0].payload)["keys"].size(), 3u);
  EXPECT_EQ(rows[1].kind, "quarantine.lift");
  const Json lift = Json::parse(rows[1].payload);
  EXPECT_EQ(lift["blocks"], 3);
  EXPECT_EQ(lift["reason"], "cleaned");
  EXPECT_EQ(lift["quarantined_for"], "leaked");
}

TEST_F(QuarantineServiceTest, RecoveryPutsTheQuarantinesInForceBackIntoAFreshGate) {
  const Quarantine kept = Imposed();
  const Quarantine lifted = Imposed();
  ASSERT_TRUE(service_->Lift("ops", lifted, "done").ok());

  governance::GovernanceGate fresh;
  QuarantineService restarted(&fresh, store_.get(), recorder_.get());
  ASSERT_TRUE(restarted.Recover().ok());
  EXPECT_EQ(Creditable(fresh), 0u);
  Result<std::vector<Quarantine>> in_force = restarted.InForce();
  ASSERT_TRUE(in_force.ok());
  ASSERT_EQ(in_force->size(), 1u);
  EXPECT_EQ(in_force->front().id, kept.id);
}

TEST_F(QuarantineServiceTest, AnUnreadableRecordStopsRecoveryNamingItsKey) {
  const store::WriteOp broken{store::Column::kGovernance, "quarantine/bad", R"({"id":"bad"})"};
  ASSERT_TRUE(store_->Write({&broken, 1}, /*sync=*/true).ok());
  const Status recovered = service_->Recover();
  EXPECT_EQ(recovered.code(), StatusCode::kCorruption);
  EXPECT_NE(recovered.ToString().find("quarantine/bad"), std::string::npos) << recovered.ToString();
  // Listing skips it; finding it answers as an unknown one.
  EXPECT_TRUE(service_->InForce()->empty());
  EXPECT_EQ(service_->Find("bad").status().code(), StatusCode::kNotFound);
}

TEST_F(QuarantineServiceTest, AReplicatedWriteImposesAndALiftingOneLifts) {
  const Quarantine quarantine = Imposed();
  Result<std::optional<std::string>> record =
      store_->Get(store::Column::kGovernance, "quarantine/" + quarantine.id);
  ASSERT_TRUE(record.ok() && record->has_value());

  governance::GovernanceGate replica;
  QuarantineService on_replica(&replica, store_.get(), recorder_.get());
  on_replica.ApplyReplicatedWrite(quarantine.id, **record);
  on_replica.ApplyReplicatedWrite(quarantine.id, **record);  // applied twice: the same
  EXPECT_EQ(replica.quarantined_blocks(), 3u);
  on_replica.ApplyReplicatedWrite(quarantine.id, std::nullopt);
  EXPECT_EQ(Creditable(replica), kKeys.size());
}

}  // namespace
}  // namespace kvgov::services
