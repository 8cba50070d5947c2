#include "kvgov/sim/trace.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace kvgov::sim {
namespace {

std::string ReadTestTrace() {
  std::ifstream file(std::string(KVGOV_SIM_TESTDATA) + "/mooncake_trace_1000.jsonl");
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// The file's own figures (src/sim/testdata/README.md), read back exactly.
TEST(MooncakeTraceTest, ReadsTheThousandRequestTrace) {
  Result<std::vector<SimRequest>> trace = ParseMooncakeTrace(ReadTestTrace(), {});
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  ASSERT_EQ(trace->size(), 1000u);
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  for (const SimRequest& request : *trace) {
    prompt_tokens += static_cast<int64_t>(request.tokens.size());
    output_tokens += request.output_tokens;
  }
  EXPECT_EQ(prompt_tokens, 9792030);
  EXPECT_EQ(output_tokens, 199084);
  EXPECT_DOUBLE_EQ(trace->back().arrival_s, 177.098);
  EXPECT_EQ(trace->front().tokens.size(), 6755u);
  EXPECT_EQ(trace->front().output_tokens, 500);
  // Lines 1 and 2 share hash id 0, their first block: equal tokens there,
  // different after.
  const std::vector<int64_t>& a = (*trace)[0].tokens;
  const std::vector<int64_t>& b = (*trace)[1].tokens;
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 512, b.begin()));
  EXPECT_FALSE(std::equal(a.begin() + 512, a.begin() + 1024, b.begin() + 512));
}

TEST(MooncakeTraceTest, DeterministicUnderTheSeedAndTheSeedMatters) {
  const std::string text =
      R"({"timestamp": 5, "input_length": 3, "output_length": 1, "hash_ids": [7]})";
  MooncakeTraceOptions options;
  options.block_tokens = 4;
  Result<std::vector<SimRequest>> once = ParseMooncakeTrace(text, options);
  Result<std::vector<SimRequest>> again = ParseMooncakeTrace(text, options);
  ASSERT_TRUE(once.ok() && again.ok());
  ASSERT_EQ((*once)[0].tokens.size(), 3u);  // the last block cut to the prompt
  EXPECT_EQ((*once)[0].tokens, (*again)[0].tokens);
  options.seed = 2;
  EXPECT_NE((*ParseMooncakeTrace(text, options))[0].tokens, (*once)[0].tokens);
  for (int64_t token : (*once)[0].tokens) {
    EXPECT_GE(token, 0);
    EXPECT_LT(token, options.vocabulary);
  }
}

TEST(MooncakeTraceTest, SpeedUpAndWindowRescaleArrivals) {
  const std::string text =
      "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 0, \"hash_ids\": [1]}\n"
      "\n"
      "{\"timestamp\": 1000, \"input_length\": 1, \"output_length\": 0, \"hash_ids\": [2]}\r\n"
      "{\"timestamp\": 3000, \"input_length\": 1, \"output_length\": 0, \"hash_ids\": [3], "
      "\"session_id\": \"ignored\"}\n"
      "{\"timestamp\": 5000, \"input_length\": 1, \"output_length\": 0, \"hash_ids\": [4]}\n";
  MooncakeTraceOptions options;
  options.speedup = 2;
  options.window_start_s = 1;
  options.window_end_s = 5;
  Result<std::vector<SimRequest>> trace = ParseMooncakeTrace(text, options);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  ASSERT_EQ(trace->size(), 2u);
  EXPECT_DOUBLE_EQ((*trace)[0].arrival_s, 0.0);
  EXPECT_DOUBLE_EQ((*trace)[1].arrival_s, 1.0);
  EXPECT_EQ((*trace)[0].id, 0u);
  EXPECT_EQ((*trace)[1].id, 1u);
}

TEST(MooncakeTraceTest, BadLinesAreRefusedWithTheirLineNumber) {
  const std::string good =
      R"({"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [0, 1]})";
  const std::pair<std::string, std::string> cases[] = {
      {"not json", "line 2: not valid JSON"},
      {"[1, 2]", "line 2: want a JSON object"},
      {R"({"input_length": 1, "output_length": 0, "hash_ids": [0]})", "line 2: timestamp: missing"},
      {R"({"timestamp": "0", "input_length": 1, "output_length": 0, "hash_ids": [0]})",
       "line 2: timestamp: want an integer"},
      {R"({"timestamp": 1.5, "input_length": 1, "output_length": 0, "hash_ids": [0]})",
       "line 2: timestamp: want an integer"},
      {R"({"timestamp": 0, "input_length": 0, "output_length": 0, "hash_ids": []})",
       "line 2: input_length: 0 is outside 1..2097152"},
      {R"({"timestamp": 0, "input_length": 1, "output_length": -1, "hash_ids": [0]})",
       "line 2: output_length: -1 is outside 0..2097152"},
      {R"({"timestamp": 0, "input_length": 600, "output_length": 0, "hash_ids": [0]})",
       "line 2: hash_ids: 1 ids for 600 tokens; want ceil(input_length / 512) = 2"},
      {R"({"timestamp": 0, "input_length": 1, "output_length": 0, "hash_ids": ["a"]})",
       "line 2: hash_ids[0]: want a non-negative integer"},
      {R"({"timestamp": 0, "input_length": 1, "output_length": 0, "hash_ids": [-3]})",
       "line 2: hash_ids[0]: want a non-negative integer"},
      {R"({"timestamp": 0, "input_length": 1, "output_length": 0, "hash_ids": 5})",
       "line 2: hash_ids: want an array"},
      {R"({"timestamp": 0, "input_length": 1, "output_length": 0, "hash_ids": [[[[[0]]]]]})",
       "line 2: nested too deeply"},
  };
  for (const auto& [line, message] : cases) {
    Result<std::vector<SimRequest>> trace = ParseMooncakeTrace(good + "\n" + line, {});
    ASSERT_FALSE(trace.ok()) << line;
    EXPECT_EQ(trace.status().code(), StatusCode::kInvalidArgument) << line;
    EXPECT_EQ(trace.status().message(), message) << line;
  }
}

TEST(MooncakeTraceTest, ATraceOutOfTimeOrderIsRefusedNotReordered) {
  const std::string text =
      "{\"timestamp\": 10, \"input_length\": 1, \"output_length\": 0, \"hash_ids\": [1]}\n"
      "{\"timestamp\": 9, \"input_length\": 1, \"output_length\": 0, \"hash_ids\": [2]}\n";
  Result<std::vector<SimRequest>> trace = ParseMooncakeTrace(text, {});
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().message(),
            "line 2: timestamp: 9 precedes the line before's 10 (the trace must be sorted by "
            "time; it is not reordered)");
}

TEST(MooncakeTraceTest, RefusesBadOptionsAndOverlongLines) {
  MooncakeTraceOptions options;
  options.block_tokens = 0;
  EXPECT_EQ(ParseMooncakeTrace("", options).status().code(), StatusCode::kInvalidArgument);
  options = {};
  options.speedup = 0;
  EXPECT_EQ(ParseMooncakeTrace("", options).status().code(), StatusCode::kInvalidArgument);
  options = {};
  options.window_end_s = 0;
  EXPECT_EQ(ParseMooncakeTrace("", options).status().code(), StatusCode::kInvalidArgument);
  const std::string long_line(kMaxTraceLineBytes + 1, ' ');
  Result<std::vector<SimRequest>> trace = ParseMooncakeTrace("{" + long_line + "}", {});
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().message(), "line 1: longer than 1048576 bytes");
}

}  // namespace
}  // namespace kvgov::sim
