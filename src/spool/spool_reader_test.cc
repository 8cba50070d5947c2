#include "kvgov/spool/spool_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testing/scratch_dir.h"

namespace kvgov::spool {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr std::string_view kGood =
    R"({"type":"kv_transfer","direction":"store","span_digest":"s","to_tier":"hbm","worker":"w1","token_ids":[1,2,3,4]})";

class SpoolReaderTest : public ::testing::Test {
 protected:
  void SetUp() override { path_ = scratch_ / "spool.ndjson"; }

  void Write(const std::string& contents) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << contents;
  }

  // Every non-blank line: its number and its error ("" when it decoded).
  std::vector<std::pair<uint64_t, std::string>> ReadAll() {
    std::vector<std::pair<uint64_t, std::string>> lines;
    Result<std::unique_ptr<SpoolReader>> reader = SpoolReader::Open(path_.string());
    EXPECT_TRUE(reader.ok()) << reader.status().ToString();
    for (;;) {
      Result<std::optional<SpoolLine>> line = (*reader)->Next();
      EXPECT_TRUE(line.ok());
      if (!line.ok() || !line->has_value()) break;
      lines.emplace_back((*line)->number,
                         (*line)->event.ok() ? "" : (*line)->event.status().message());
    }
    return lines;
  }

  const test_support::ScratchDir scratch_{"kvgov_spool_reader_test"};
  fs::path path_;
};

TEST(DecodeSpoolLineTest, DecodesOneElementAsPostWould) {
  Result<IngestEvent> event = DecodeSpoolLine(kGood);
  ASSERT_TRUE(event.ok()) << event.status().ToString();
  EXPECT_EQ(std::get<KVTransfer>(event->record).span.span_digest, "s");
  EXPECT_EQ(event->residency->token_ids, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_TRUE(DecodeSpoolLine(" \t{\"type\":\"nixl_lease\",\"lease_id\":\"l\",\"event\":\"create\","
                              "\"role\":\"prefill_pin\"}\r")
                  .ok());
}

TEST(DecodeSpoolLineTest, ErrorsArePathedFromTheLine) {
  EXPECT_EQ(DecodeSpoolLine(R"({"type":"kv_transfer","direction":"sideways","span_digest":"s"})")
                .status()
                .message(),
            "$.direction: unknown kv transfer direction 'sideways' (want one of: offload, "
            "restore, route, migrate, store, evict)");
  EXPECT_EQ(DecodeSpoolLine(R"({"direction":"store"})").status().message(), "$.type: required");
  EXPECT_EQ(DecodeSpoolLine("42").status().message(), "$: want an object, got number");
  // The column counts from the line's own first byte.
  EXPECT_THAT(DecodeSpoolLine(R"({"type":)").status().message(),
              HasSubstr("$: malformed JSON: parse error at line 1, column 9"));
}

TEST(DecodeSpoolLineTest, ALineIsExactlyOneElement) {
  const std::string two = std::string(kGood) + "," + std::string(kGood);
  EXPECT_EQ(DecodeSpoolLine(two).status().message(),
            "$: want one JSON object per line, got 2 values");
  // Attempts to break out of the wrapping are malformed or rejected, never
  // read as something else.
  EXPECT_FALSE(DecodeSpoolLine(R"({"type":"kv_transfer"}]})").ok());
  EXPECT_FALSE(DecodeSpoolLine(R"(], "events":[{"type":"kv_transfer"})").ok());
  EXPECT_FALSE(DecodeSpoolLine(R"(],"x":[)").ok());
  EXPECT_FALSE(DecodeSpoolLine("").ok());
}

TEST_F(SpoolReaderTest, NumbersEveryLineAndSkipsBlankOnes) {
  Write(std::string(kGood) + "\n\n   \n" + R"({"type":"bogus"})" + "\n" + std::string(kGood));
  auto lines = ReadAll();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], std::make_pair(uint64_t{1}, std::string()));
  EXPECT_EQ(lines[1].first, 4u);
  EXPECT_THAT(lines[1].second, HasSubstr("$.type: unknown event type 'bogus'"));
  // The last line needs no newline.
  EXPECT_EQ(lines[2], std::make_pair(uint64_t{5}, std::string()));
}

TEST_F(SpoolReaderTest, ACutLastLineIsRejectedAlone) {
  Write(std::string(kGood) + "\n" + std::string(kGood).substr(0, 40));
  auto lines = ReadAll();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].second, "");
  EXPECT_THAT(lines[1].second, HasSubstr("malformed JSON"));
}

TEST_F(SpoolReaderTest, AnOverLongLineIsSkippedNotRead) {
  std::string contents(kGood);
  contents += "\n{\"type\":\"kv_transfer\",\"span_digest\":\"";
  contents += std::string(kMaxLineBytes + 10, 'x');
  contents += "\"}\n";
  contents += kGood;
  contents += "\n";
  contents += std::string(kMaxLineBytes + 1, ' ');  // over-long and unterminated
  Write(contents);
  auto lines = ReadAll();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].second, "");
  EXPECT_EQ(lines[1].first, 2u);
  EXPECT_THAT(lines[1].second, HasSubstr("$: line is 1048625 bytes, over the limit of 1048576"));
  EXPECT_EQ(lines[2], std::make_pair(uint64_t{3}, std::string()));
  EXPECT_EQ(lines[3].first, 4u);
  EXPECT_THAT(lines[3].second, HasSubstr("over the limit"));
}

TEST_F(SpoolReaderTest, ALineExactlyAtTheLimitIsRead) {
  std::string line = R"({"type":"kv_transfer","direction":"route","span_digest":")";
  line += std::string(kMaxLineBytes - line.size() - 2, 'a');
  line += "\"}";
  ASSERT_EQ(line.size(), kMaxLineBytes);
  Write(line + "\n");
  auto lines = ReadAll();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].second, "");
}

TEST_F(SpoolReaderTest, OpenRefusesWhatIsNotAFile) {
  EXPECT_EQ(SpoolReader::Open((path_.string() + ".missing")).status().code(), StatusCode::kIOError);
  EXPECT_EQ(SpoolReader::Open(scratch_.string()).status().code(), StatusCode::kIOError);
}

}  // namespace
}  // namespace kvgov::spool
