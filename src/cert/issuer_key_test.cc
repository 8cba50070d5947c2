#include "kvgov/cert/issuer_key.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testing/scratch_dir.h"

namespace kvgov::cert {
namespace {

class IssuerKeyTest : public ::testing::Test {
 protected:
  void SetUp() override { path_ = (dir_ / "issuer.key").string(); }
  test_support::ScratchDir dir_{"kvgov_issuer_key_test"};
  std::string path_;
};

TEST_F(IssuerKeyTest, CreatedOnceWithModeOwnerOnlyAndReused) {
  Result<std::unique_ptr<IssuerKey>> first = IssuerKey::LoadOrCreate(path_);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  struct stat info {};
  ASSERT_EQ(::stat(path_.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(std::filesystem::file_size(path_), 32u);
  Result<std::unique_ptr<IssuerKey>> again = IssuerKey::LoadOrCreate(path_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->public_key_hex(), (*first)->public_key_hex());
  EXPECT_EQ((*first)->public_key_hex().size(), 64u);
  EXPECT_EQ((*first)->key_id().size(), 16u);
}

TEST_F(IssuerKeyTest, SignaturesVerifyAndTamperingFails) {
  std::unique_ptr<IssuerKey> key = *IssuerKey::LoadOrCreate(path_);
  const std::string signature = key->Sign("certificate bytes");
  EXPECT_EQ(signature.size(), 128u);
  EXPECT_TRUE(VerifySignature(key->public_key_hex(), "certificate bytes", signature).ok());
  EXPECT_EQ(VerifySignature(key->public_key_hex(), "certificate byteZ", signature).code(),
            StatusCode::kPermissionDenied);
  std::string flipped = signature;
  flipped[0] = flipped[0] == 'a' ? 'b' : 'a';
  EXPECT_EQ(VerifySignature(key->public_key_hex(), "certificate bytes", flipped).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(VerifySignature("zz", "m", signature).code(), StatusCode::kInvalidArgument);
}

TEST_F(IssuerKeyTest, RefusesBadFiles) {
  {
    std::ofstream out(path_);
    out << "short";
  }
  ::chmod(path_.c_str(), 0600);
  EXPECT_EQ(IssuerKey::LoadOrCreate(path_).status().code(), StatusCode::kCorruption);
  ::chmod(path_.c_str(), 0644);
  EXPECT_EQ(IssuerKey::LoadOrCreate(path_).status().code(), StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace kvgov::cert
