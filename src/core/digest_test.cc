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

namespace kvgov {
namespace {

TEST(HmacSha256Test, Rfc4231Vectors) {
  EXPECT_EQ(HmacSha256Hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a key longer than the block is hashed first.
  EXPECT_EQ(HmacSha256Hex(std::string(131, '\xaa'),
                          "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

}  // namespace
}  // namespace kvgov
