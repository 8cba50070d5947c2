#include "kvgov/services/tenant_salts.h"

#include <gtest/gtest.h>

#include "kvgov/index/block_key.h"
#include "testing/scratch_governance_store.h"

namespace kvgov::services {
namespace {

using test_support::ScratchGovernanceStore;

constexpr int64_t kBlockSize = 4;
const std::vector<int64_t> kPrompt = {1, 2, 3, 4, 5, 6, 7, 8};

class TenantSaltsTest : public ScratchGovernanceStore {
 protected:
  void SetUp() override {
    ScratchGovernanceStore::SetUp();
    ASSERT_TRUE(index_.AddWorker("w", "m", kBlockSize).ok());
  }

  TenantSalts Salts() const { return TenantSalts("secret", &index_, &gate_); }

  index::ResidencyIndex index_;
  governance::GovernanceGate gate_;
};

TEST_F(TenantSaltsTest, ATenantsSaltIsItsOwnAndARevocationReplacesItForThatModelOnly) {
  TenantSalts salts = Salts();
  const std::string acme = salts.Current("acme", "m");
  EXPECT_EQ(acme.size(), 32u);
  EXPECT_EQ(salts.Current("", "m"), "");
  EXPECT_NE(salts.Current("globex", "m"), acme);
  // Another kvgov with another secret salts the same tenant apart.
  EXPECT_NE(TenantSalts("other secret", &index_, &gate_).Current("acme", "m"), acme);

  const std::string other_model = salts.Current("acme", "other");
  salts.Install("acme", salts.Advanced("acme", "m"));
  const std::string revoked = salts.Current("acme", "m");
  EXPECT_NE(revoked, acme);
  // Every salt of the tenant keeps its tag, so the old salts' blocks are found.
  EXPECT_EQ(revoked.substr(0, 16), acme.substr(0, 16));
  EXPECT_EQ(salts.Current("acme", "other"), other_model);
  salts.Install("acme", salts.Advanced("acme", ""));
  EXPECT_NE(salts.Current("acme", "other"), other_model);
  EXPECT_NE(salts.Current("acme", "m"), revoked);
}

TEST_F(TenantSaltsTest, RecordedEpochsComeBackAtStartAndAnUnreadableOneStopsIt) {
  TenantSalts salts = Salts();
  const router::SaltEpochs::TenantEpochs revoked = salts.Advanced("acme", "");
  const store::WriteOp record = TenantSalts::RecordOf("acme", revoked);
  ASSERT_TRUE(store_->Write({&record, 1}, /*sync=*/true).ok());
  salts.Install("acme", revoked);

  TenantSalts restarted = Salts();
  ASSERT_TRUE(restarted.Recover(*store_).ok());
  EXPECT_EQ(restarted.Current("acme", "m"), salts.Current("acme", "m"));
  TenantSalts replica = Salts();
  ASSERT_TRUE(replica.ApplyReplicatedRecord(record.value.value()));
  EXPECT_EQ(replica.Current("acme", "m"), salts.Current("acme", "m"));
  EXPECT_FALSE(replica.ApplyReplicatedRecord(R"({"tenant":"acme"})"));

  const store::WriteOp broken{store::Column::kGovernance, "salt_epoch/globex",
                              R"({"tenant":"globex","all_models":-1,"models":{}})"};
  ASSERT_TRUE(store_->Write({&broken, 1}, /*sync=*/true).ok());
  const Status recovered = Salts().Recover(*store_);
  EXPECT_EQ(recovered.code(), StatusCode::kCorruption);
  EXPECT_NE(recovered.ToString().find("salt_epoch/globex: salt epoch record: all_models"),
            std::string::npos)
      << recovered.ToString();
}

TEST_F(TenantSaltsTest, APromptCrossingAQuarantineIsDivertedAlikeForEveryRequest) {
  TenantSalts salts = Salts();
  Result<RequestSalt> ordinary = salts.ForPrompt("acme", "m", "", kPrompt);
  ASSERT_TRUE(ordinary.ok());
  EXPECT_FALSE(ordinary->diverted());

  // Quarantine the prompt's second block under its ordinary salt.
  const std::vector<index::BlockKey> chain =
      index::RequestChain(index_.hasher(), {"m", "", 0}, ordinary->salt, kPrompt, kBlockSize);
  ASSERT_EQ(chain.size(), 2u);
  gate_.Quarantine("q1", std::span(chain).subspan(1));

  Result<RequestSalt> diverted = salts.ForPrompt("acme", "m", "", kPrompt);
  ASSERT_TRUE(diverted.ok());
  EXPECT_EQ(diverted->diverted_by, std::vector<std::string>{"q1"});
  EXPECT_NE(diverted->salt, ordinary->salt);
  EXPECT_EQ(salts.ForPrompt("acme", "m", "", kPrompt)->salt, diverted->salt);
  // A prompt that stops short of the quarantined block is not diverted.
  EXPECT_FALSE(salts.ForPrompt("acme", "m", "", std::span(kPrompt).first(4))->diverted());
}

}  // namespace
}  // namespace kvgov::services
