#include "kvgov/core/digest.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvgov {
namespace {

TEST(Sha256Test, FipsVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, EveryLengthAroundTheBlockBoundaryIsDistinct) {
  std::vector<std::string> digests;
  for (size_t n = 50; n < 140; ++n) digests.push_back(Sha256Hex(std::string(n, 'x')));
  std::sort(digests.begin(), digests.end());
  EXPECT_EQ(std::unique(digests.begin(), digests.end()), digests.end());
}

TEST(DigestFieldsTest, FramingKeepsFieldListsApart) {
  EXPECT_NE(DigestFields("d", {"a", "bc"}), DigestFields("d", {"ab", "c"}));
  EXPECT_NE(DigestFields("d", {"a", ""}), DigestFields("d", {"a"}));
  // A NUL inside a field cannot impersonate a separator.
  EXPECT_NE(DigestFields("d", {std::string_view("a\0b", 3)}), DigestFields("d", {"a", "b"}));
  EXPECT_NE(DigestFields("d1", {"x"}), DigestFields("d2", {"x"}));
  EXPECT_EQ(DigestFields("d", {"a", "bc"}), DigestFields("d", {"a", "bc"}));
}

TEST(DigestTokenIdsTest, OrderCountAndSignMatter) {
  std::vector<int64_t> a = {1, 2, 3};
  std::vector<int64_t> b = {3, 2, 1};
  std::vector<int64_t> c = {1, 2};
  std::vector<int64_t> negative = {-1};
  std::vector<int64_t> max = {INT64_MAX};
  EXPECT_NE(DigestTokenIds(a), DigestTokenIds(b));
  EXPECT_NE(DigestTokenIds(a), DigestTokenIds(c));
  EXPECT_NE(DigestTokenIds(negative), DigestTokenIds(max));
  EXPECT_EQ(DigestTokenIds(a), DigestTokenIds(std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(DigestTokenIds({}).size(), 64u);
}

}  // namespace
}  // namespace kvgov
