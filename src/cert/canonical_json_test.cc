#include "cert/canonical_json.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace kvgov::cert_internal {
namespace {

std::string Canon(const Json& value) {
  Result<std::string> out = CanonicalJson(value);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? *out : std::string();
}

Json FromText(std::string_view text) {
  Result<Json> parsed = ParseJson(text, ParseLimits{});
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  return parsed.ok() ? *parsed : Json();
}

TEST(CanonicalJsonTest, SortsKeysByByteOrderAtEveryLevelWithoutWhitespace) {
  const Json value = FromText(
      R"( { "b" : 1, "a" : { "z": [3, 2, 1], "A": true, "_": false }, "aa": [], "B": {} } )");
  // 'B' (0x42) < '_' (0x5f) < 'a' (0x61): UTF-16 order is byte order for ASCII.
  EXPECT_EQ(Canon(value), R"({"B":{},"a":{"A":true,"_":false,"z":[3,2,1]},"aa":[],"b":1})");
}

TEST(CanonicalJsonTest, PrefixKeySortsBeforeLongerKey) {
  EXPECT_EQ(Canon(FromText(R"({"ab":1,"a":2,"a_":3,"aB":4})")), R"({"a":2,"aB":4,"a_":3,"ab":1})");
}

TEST(CanonicalJsonTest, EscapesOnlyWhatJcsEscapes) {
  // Quote, backslash, the five short escapes, other controls as \u00xx in
  // lowercase hex; DEL, '/', and non-ASCII are written as they are.
  const std::string raw = std::string("\"\\\b\f\n\r\t") + '\0' + "\x01\x1f\x7f/" +
                          "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xe2\x80\xa8";
  std::string out;
  ASSERT_TRUE(AppendCanonicalString(raw, out).ok());
  EXPECT_EQ(out, std::string(R"("\"\\\b\f\n\r\t\u0000\u0001\u001f)") + "\x7f/" +
                     "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xe2\x80\xa8\"");
}

TEST(CanonicalJsonTest, Rfc8785StringExample) {
  // RFC 8785 section 3.2.2's string, parsed from its escaped source form.
  const Json value = FromText(R"({"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/"})");
  EXPECT_EQ(Canon(value), "{\"string\":\"\xe2\x82\xac$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}");
}

TEST(CanonicalJsonTest, IntegersUpToTwoToTheFiftyThreeMinusOne) {
  constexpr uint64_t kMax = (uint64_t{1} << 53) - 1;
  EXPECT_EQ(Canon(Json::array({0, kMax, -static_cast<int64_t>(kMax), 17})),
            "[0,9007199254740991,-9007199254740991,17]");

  Result<std::string> over = CanonicalJson(Json{{"n", kMax + 1}});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(over.status().message(), "$.n: integer 9007199254740992 is over 2^53-1");

  Result<std::string> under = CanonicalJson(Json{{"n", {1, -static_cast<int64_t>(kMax) - 1}}});
  ASSERT_FALSE(under.ok());
  EXPECT_EQ(under.status().message(), "$.n[1]: integer -9007199254740992 is outside +-(2^53-1)");

  EXPECT_FALSE(CanonicalJson(Json(std::numeric_limits<int64_t>::min())).ok());
  EXPECT_FALSE(CanonicalJson(Json(std::numeric_limits<uint64_t>::max())).ok());
}

TEST(CanonicalJsonTest, RefusesFloatsNullsAndNonAsciiKeys) {
  Result<std::string> float_value = CanonicalJson(FromText(R"({"a":[1, 2.0]})"));
  ASSERT_FALSE(float_value.ok());
  EXPECT_EQ(float_value.status().message(),
            "$.a[1]: floats have no canonical form here; want an integer");

  Result<std::string> null_value = CanonicalJson(FromText(R"({"a":null})"));
  ASSERT_FALSE(null_value.ok());
  EXPECT_EQ(null_value.status().message(), "$.a: null is not part of the signed value space");

  Result<std::string> key = CanonicalJson(FromText("{\"ok\":{\"caf\xc3\xa9\":1}}"));
  ASSERT_FALSE(key.ok());
  EXPECT_EQ(key.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(key.status().message().find("$.ok[\"caf??\"]: key is not ASCII"), std::string::npos)
      << key.status().message();
}

TEST(CanonicalJsonTest, RefusesInvalidUtf8) {
  for (const std::string& bad : {std::string("\x80"), std::string("\xc0\x80"),  // overlong NUL
                                 std::string("\xc1\xbf"), std::string("\xe0\x9f\xbf"),
                                 std::string("\xed\xa0\x80"),      // a surrogate
                                 std::string("\xf4\x90\x80\x80"),  // past U+10FFFF
                                 std::string("\xf5\x80\x80\x80"), std::string("\xe2\x82"),
                                 std::string("a\xff"), std::string("\xf0\x9f\x98")}) {
    std::string out;
    EXPECT_EQ(AppendCanonicalString(bad, out).code(), StatusCode::kInvalidArgument)
        << "accepted " << Json(bad).dump(-1, ' ', true, Json::error_handler_t::replace);
    Result<std::string> nested = CanonicalJson(Json{{"k", {bad}}});
    ASSERT_FALSE(nested.ok());
    EXPECT_EQ(nested.status().message().rfind("$.k[0]: invalid UTF-8 at byte", 0), 0u)
        << nested.status().message();
  }
  // The largest and smallest valid sequences of each length pass.
  for (const std::string& good :
       {std::string("\xc2\x80"), std::string("\xdf\xbf"), std::string("\xe0\xa0\x80"),
        std::string("\xef\xbf\xbf"), std::string("\xf0\x90\x80\x80"),
        std::string("\xf4\x8f\xbf\xbf")}) {
    std::string out;
    EXPECT_TRUE(AppendCanonicalString(good, out).ok());
    EXPECT_EQ(out, "\"" + good + "\"");
  }
}

TEST(CanonicalJsonTest, ParseRefusesDuplicatesDepthSizeAndTrailingContent) {
  Result<Json> duplicate = ParseJson(R"({"a":{"b":1,"b":2}})", ParseLimits{});
  ASSERT_FALSE(duplicate.ok());
  EXPECT_EQ(duplicate.status().message(), "$.a.b: duplicate key");

  Result<Json> deep = ParseJson("[[[[1]]]]", ParseLimits{1024, 3});
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), StatusCode::kResourceExhausted);

  Result<Json> big = ParseJson(std::string(33, ' ') + "{}", ParseLimits{32, 8});
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);

  Result<Json> trailing = ParseJson("{} {}", ParseLimits{});
  ASSERT_FALSE(trailing.ok());
  EXPECT_EQ(trailing.status().code(), StatusCode::kInvalidArgument);

  Result<Json> bad_utf8 = ParseJson("{\"a\":\"\xc0\x80\"}", ParseLimits{});
  ASSERT_FALSE(bad_utf8.ok());
  EXPECT_EQ(bad_utf8.status().code(), StatusCode::kInvalidArgument);
  const Status status = bad_utf8.status();
  for (const char c : status.message()) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "unprintable byte in the error message";
  }
}

TEST(CanonicalJsonTest, CanonicalFormIsAFixedPointOfParsing) {
  const std::string canonical =
      Canon(FromText(R"({"z":{"y":[1,{"b":"\u0007","a":"\ud83d\ude00"}]},"x":true})"));
  EXPECT_EQ(canonical,
            "{\"x\":true,\"z\":{\"y\":[1,{\"a\":\"\xf0\x9f\x98\x80\",\"b\":\"\\u0007\"}]}}");
  EXPECT_EQ(Canon(FromText(canonical)), canonical);
}

}  // namespace
}  // namespace kvgov::cert_internal
