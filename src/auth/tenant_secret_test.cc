#include "kvgov/auth/tenant_secret.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "kvgov/auth/entropy.h"
#include "testing/scratch_dir.h"

namespace kvgov::auth {
namespace {

class TenantSecretTest : public ::testing::Test {
 protected:
  void SetUp() override { path_ = (dir_ / "tenant.secret").string(); }

  test_support::ScratchDir dir_{"kvgov_tenant_secret_test"};
  std::string path_;
};

TEST_F(TenantSecretTest, AMissingSecretIsCreatedOwnerOnlyAndReadBackTheSame) {
  Result<std::string> created = LoadOrCreateTenantSecret(path_);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created->size(), 32u);
  struct stat info {};
  ASSERT_EQ(::stat(path_.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  Result<std::string> again = LoadOrCreateTenantSecret(path_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, *created);
}

TEST_F(TenantSecretTest, ASecretOfTheWrongSizeIsCorruption) {
  std::ofstream(path_) << "short";
  std::filesystem::permissions(
      path_, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_EQ(LoadOrCreateTenantSecret(path_).status().code(), StatusCode::kCorruption);
}

TEST_F(TenantSecretTest, ASecretOthersCanReadIsRefused) {
  std::ofstream(path_) << std::string(32, 'k');
  std::filesystem::permissions(path_, std::filesystem::perms::owner_read |
                                          std::filesystem::perms::owner_write |
                                          std::filesystem::perms::others_read);
  Result<std::string> loaded = LoadOrCreateTenantSecret(path_);
  EXPECT_EQ(loaded.status().code(), StatusCode::kPermissionDenied);
  // The secret itself is never part of an error.
  EXPECT_EQ(loaded.status().message().find(std::string(32, 'k')), std::string::npos);
}

TEST(EntropyTest, IdsAre128BitsOfLowercaseHexAndDiffer) {
  Result<std::string> a = RandomHexId();
  Result<std::string> b = RandomHexId();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 32u);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(*a, *b);
}

}  // namespace
}  // namespace kvgov::auth
