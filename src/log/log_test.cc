#include "kvgov/log/log.h"

#include <gtest/gtest.h>

#include <regex>

namespace kvgov::log {
namespace {

TEST(LogTest, ValuesAreBareOrQuotedSoALineIsOneLine) {
  EXPECT_EQ(Quoted("w1"), "w1");
  EXPECT_EQ(Quoted(""), "\"\"");
  EXPECT_EQ(Quoted("connection refused"), "\"connection refused\"");
  EXPECT_EQ(Quoted("a=b"), "\"a=b\"");
  EXPECT_EQ(Quoted("say \"hi\"\n"), "\"say \\\"hi\\\"\\n\"");
  EXPECT_EQ(Quoted(std::string("\x01", 1)), "\"\\x01\"");
}

TEST(LogTest, TimesAreIsoUtcToTheMillisecond) {
  EXPECT_EQ(IsoUtc(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(IsoUtc(1764602401123), "2025-12-01T15:20:01.123Z");
}

TEST(LogTest, ALineHasTimeLevelEventAndFieldsInOrder) {
  std::string text;
  {
    Line line(Level::kWarn, "engine.health");
    line.Field("worker", "w1")
        .Field("healthy", false)
        .Field("failures", int64_t{3})
        .Field("error", "connection refused");
    text = line.text();
  }
  EXPECT_TRUE(std::regex_match(
      text,
      std::regex(R"(ts=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z level=warn event=engine\.health )"
                 R"(worker=w1 healthy=false failures=3 error="connection refused")")))
      << text;
}

}  // namespace
}  // namespace kvgov::log
