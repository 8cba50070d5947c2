#include "kvgov/core/secret_file_mode.h"

#include <gtest/gtest.h>

namespace kvgov {
namespace {

constexpr uint32_t kRoot = 0;
constexpr uint32_t kService = 65532;

TEST(SecretFileModeTest, OwnerOnlyIsAcceptedWhoeverOwnsIt) {
  for (uint32_t owner : {kRoot, kService}) {
    EXPECT_TRUE(CheckSecretFileMode("key", 0600, owner).ok()) << owner;
    EXPECT_TRUE(CheckSecretFileMode("key", 0400, owner).ok()) << owner;
  }
}

TEST(SecretFileModeTest, GroupReadIsAcceptedOnlyWhenRootOwnsTheFile) {
  // A Kubernetes Secret volume with fsGroup: root:fsGroup, 0440.
  EXPECT_TRUE(CheckSecretFileMode("key", 0440, kRoot).ok());
  EXPECT_TRUE(CheckSecretFileMode("key", 0640, kRoot).ok());
  const Status refused = CheckSecretFileMode("issuer key '/k'", 0640, kService);
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.message().find("issuer key '/k' has mode 0640"), std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("chmod 600"), std::string::npos) << refused.message();
}

TEST(SecretFileModeTest, GroupWriteAndAnyOtherBitAreRefusedEvenForRoot) {
  for (uint32_t mode : {0660u, 0620u, 0610u, 0604u, 0602u, 0601u, 0644u, 0666u}) {
    EXPECT_EQ(CheckSecretFileMode("key", mode, kRoot).code(), StatusCode::kPermissionDenied)
        << std::oct << mode;
  }
  EXPECT_NE(CheckSecretFileMode("key", 0644, kRoot).message().find("0644 (owner root)"),
            std::string::npos);
}

TEST(SecretFileModeTest, FileTypeBitsDoNotMatter) {
  EXPECT_TRUE(CheckSecretFileMode("key", 0100600, kService).ok());  // S_IFREG | 0600
}

}  // namespace
}  // namespace kvgov
