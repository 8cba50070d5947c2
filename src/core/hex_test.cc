#include "kvgov/core/hex.h"

#include <string>

#include <gtest/gtest.h>

namespace kvgov {
namespace {

TEST(HexTest, EncodesEveryByteAsTwoLowercaseDigits) {
  EXPECT_EQ(HexEncode(std::string("\x00\x01\x7f\x80\xab\xff", 6)), "00017f80abff");
  EXPECT_EQ(HexEncode(""), "");
  std::string out = "id=";
  AppendHex("\x0f", out);
  EXPECT_EQ(out, "id=0f");
}

TEST(HexTest, DecodesEitherCaseAndRoundTripsEveryByte) {
  std::string all;
  for (int byte = 0; byte < 256; ++byte) all.push_back(static_cast<char>(byte));
  Result<std::string> decoded = HexDecode(HexEncode(all), "bytes");
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(*decoded, all);
  EXPECT_EQ(*HexDecode("ABcd", "x"), "\xab\xcd");
}

TEST(HexTest, RefusesAnOddLengthAndNamesTheFirstBadDigit) {
  Result<std::string> odd = HexDecode("abc", "public key");
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(odd.status().message(), "public key: an odd number of hex digits (3)");
  Result<std::string> bad = HexDecode("00g0", "signature");
  EXPECT_EQ(bad.status().message(), "signature: not a hex digit at offset 2");
  EXPECT_EQ(HexDecode("0x", "v").status().message(), "v: not a hex digit at offset 1");
}

TEST(HexTest, SixtyFourBitValuesAreSixteenDigitsZeroPadded) {
  EXPECT_EQ(Hex64(0), "0000000000000000");
  EXPECT_EQ(Hex64(0xabc), "0000000000000abc");
  EXPECT_EQ(Hex64(~uint64_t{0}), "ffffffffffffffff");
  std::string reused = "something longer than sixteen";
  WriteHex64(0x0123456789abcdefULL, reused);
  EXPECT_EQ(reused, "0123456789abcdef");
}

TEST(HexTest, ANumberInAMessageHasNoLeadingZeros) {
  EXPECT_EQ(HexNumber(0), "0x0");
  EXPECT_EQ(HexNumber(0x5), "0x5");
  EXPECT_EQ(HexNumber(0xdeadbeef), "0xdeadbeef");
  EXPECT_EQ(HexNumber(~uint64_t{0}), "0xffffffffffffffff");
}

}  // namespace
}  // namespace kvgov
