#include "kvgov/router/salts.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvgov::router {
namespace {

TEST(SaltsTest, EpochZeroKeepsTheSaltKvgovAlwaysGave) {
  EXPECT_EQ(TenantCacheSalt("secret", "t", "llama", {}), TenantCacheSalt("secret", "t"));
  EXPECT_EQ(TenantCacheSalt("secret", "", "llama", {}), "");
  EXPECT_EQ(TenantCacheSalt("secret", "", "llama", {1, 1}), "");
}

TEST(SaltsTest, EveryEpochGivesANewSaltWithTheTenantsTag) {
  const std::string tag = TenantSaltTag("secret", "t");
  ASSERT_EQ(tag.size(), 16u);
  std::vector<std::string> seen;
  for (SaltEpoch epoch :
       {SaltEpoch{0, 0}, SaltEpoch{1, 0}, SaltEpoch{0, 1}, SaltEpoch{1, 1}, SaltEpoch{2, 0}}) {
    const std::string salt = TenantCacheSalt("secret", "t", "llama", epoch);
    EXPECT_EQ(salt.size(), 32u);
    EXPECT_TRUE(salt.starts_with(tag)) << salt;
    for (const std::string& earlier : seen) EXPECT_NE(salt, earlier);
    seen.push_back(salt);
  }
  // Another model's epoch is another salt; another secret, another tag.
  EXPECT_NE(TenantCacheSalt("secret", "t", "llama", {0, 1}),
            TenantCacheSalt("secret", "t", "qwen", {0, 1}));
  EXPECT_NE(TenantSaltTag("other", "t"), tag);
  EXPECT_NE(TenantSaltTag("secret", "u"), tag);
}

TEST(SaltsTest, DiversionIsStablePerQuarantineSetAndKeepsTheLineage) {
  const std::string salt = TenantCacheSalt("secret", "t");
  const std::vector<std::string> one = {"q1"};
  const std::vector<std::string> two = {"q1", "q2"};
  const std::string diverted = DivertedCacheSalt("secret", salt, one);
  EXPECT_EQ(diverted, DivertedCacheSalt("secret", salt, one));
  EXPECT_NE(diverted, DivertedCacheSalt("secret", salt, two));
  EXPECT_TRUE(diverted.starts_with(salt + "."));
  EXPECT_EQ(diverted.size(), 49u);
  // Untenanted requests are diverted too, apart from every tenant.
  const std::string untenanted = DivertedCacheSalt("secret", "", one);
  EXPECT_FALSE(untenanted.empty());
  EXPECT_NE(untenanted, diverted);
}

TEST(SaltsTest, RevokedSaltsAreFoundByTheirRootExtraKey) {
  const std::string tag = TenantSaltTag("secret", "t");
  const std::string old_salt = TenantCacheSalt("secret", "t", "llama", {});
  const std::string current = TenantCacheSalt("secret", "t", "llama", {1, 0});
  const std::vector<std::string> ids = {"q"};
  auto key = [](std::string_view lora, std::string_view salt) {
    return lora.empty() ? "[\"" + std::string(salt) + "\"]"
                        : "[\"" + std::string(lora) + "\",\"" + std::string(salt) + "\"]";
  };
  EXPECT_TRUE(KeyedByRevokedSalt(key("", old_salt), tag, current));
  EXPECT_TRUE(KeyedByRevokedSalt(key("adapter", old_salt), tag, current));
  EXPECT_TRUE(
      KeyedByRevokedSalt(key("", DivertedCacheSalt("secret", old_salt, ids)), tag, current));
  EXPECT_FALSE(KeyedByRevokedSalt(key("", current), tag, current));
  EXPECT_FALSE(
      KeyedByRevokedSalt(key("", DivertedCacheSalt("secret", current, ids)), tag, current));
  EXPECT_FALSE(KeyedByRevokedSalt(key("", TenantCacheSalt("secret", "u")), tag, current));
  EXPECT_FALSE(KeyedByRevokedSalt("", tag, current));
  // Starting with the tag is not enough: a salt is 32 digits, or 32 and a dot.
  EXPECT_FALSE(KeyedByRevokedSalt(key(tag + "x", ""), tag, current));
  EXPECT_FALSE(KeyedByRevokedSalt(key("", old_salt + "x"), tag, current));
  EXPECT_FALSE(KeyedByRevokedSalt("[\"" + old_salt, tag, current));
}

TEST(SaltsTest, EpochsOnlyGrow) {
  SaltEpochs epochs;
  EXPECT_EQ(epochs.Of("t", "llama"), (SaltEpoch{0, 0}));
  SaltEpochs::TenantEpochs next = epochs.Advanced("t", "llama");
  EXPECT_EQ(epochs.Of("t", "llama"), (SaltEpoch{0, 0}));  // Advanced changes nothing
  epochs.Set("t", next);
  EXPECT_EQ(epochs.Of("t", "llama"), (SaltEpoch{0, 1}));
  EXPECT_EQ(epochs.Of("t", "qwen"), (SaltEpoch{0, 0}));
  epochs.Set("t", epochs.Advanced("t", ""));
  EXPECT_EQ(epochs.Of("t", "qwen"), (SaltEpoch{1, 0}));
  EXPECT_EQ(epochs.Of("t", "llama"), (SaltEpoch{1, 1}));
  // An older record applied late moves nothing back.
  epochs.Set("t", next);
  EXPECT_EQ(epochs.Of("t", "llama"), (SaltEpoch{1, 1}));
  EXPECT_EQ(epochs.Of("u", "llama"), (SaltEpoch{0, 0}));
  EXPECT_EQ(epochs.size(), 1u);
}

}  // namespace
}  // namespace kvgov::router
