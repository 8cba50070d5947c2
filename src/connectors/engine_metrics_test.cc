#include "kvgov/connectors/engine_metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace kvgov::connectors {
namespace {

// What a vLLM server with two data-parallel engines serves, trimmed: HELP and
// TYPE lines, unrelated counters and histograms, one series per engine.
constexpr std::string_view kVllmTwoEngines =
    R"(# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B"} 3.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B"} 1.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.1-8B"} 4.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B"} 0.75
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B"} 1.234e+06
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B"} 17.0
python_gc_objects_collected_total{generation="0"} 1234.0
)";

TEST(EngineMetricsTest, SumsVllmGaugesAcrossEnginesAndAveragesKvUsage) {
  Result<router::ScrapedLoad> load = ParseEngineMetrics(kVllmTwoEngines, 1700);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_DOUBLE_EQ(load->running, 5.0);
  EXPECT_DOUBLE_EQ(load->waiting, 5.0);
  EXPECT_DOUBLE_EQ(load->kv_usage, 0.5);
  EXPECT_EQ(load->scraped_at_ms, 1700);
}

// A data-parallel engine behind one server: each rank's stream is its own
// worker, and each gets its own rank's load, not the engine's sum.
TEST(EngineMetricsTest, ByRankGivesEachRankItsOwnSeries) {
  Result<std::vector<router::ScrapedLoad>> loads =
      ParseEngineMetricsByRank(kVllmTwoEngines, 1700, 2);
  ASSERT_TRUE(loads.ok()) << loads.status().ToString();
  ASSERT_EQ(loads->size(), 2u);
  EXPECT_DOUBLE_EQ((*loads)[0].running, 3.0);
  EXPECT_DOUBLE_EQ((*loads)[0].waiting, 1.0);
  EXPECT_DOUBLE_EQ((*loads)[0].kv_usage, 0.25);
  EXPECT_DOUBLE_EQ((*loads)[1].running, 2.0);
  EXPECT_DOUBLE_EQ((*loads)[1].waiting, 4.0);
  EXPECT_DOUBLE_EQ((*loads)[1].kv_usage, 0.75);
  EXPECT_EQ((*loads)[1].scraped_at_ms, 1700);
  // One rank: the whole engine, as ParseEngineMetrics.
  Result<std::vector<router::ScrapedLoad>> one = ParseEngineMetricsByRank(kVllmTwoEngines, 1700, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_DOUBLE_EQ((*one)[0].running, 5.0);
}

// SGLang labels its schedulers by dp_rank; a series with no rank label is
// the engine's as a whole and is shared evenly.
TEST(EngineMetricsTest, ByRankReadsSglangDpRankAndSharesUnlabelledSeries) {
  const std::string text =
      "sglang:num_running_reqs{model_name=\"m\",dp_rank=\"0\",tp_rank=\"0\"} 6\n"
      "sglang:num_running_reqs{model_name=\"m\",dp_rank=\"1\",tp_rank=\"0\"} 2\n"
      "sglang:num_queue_reqs{model_name=\"m\"} 4\n"
      "sglang:token_usage{model_name=\"m\"} 0.5\n";
  Result<std::vector<router::ScrapedLoad>> loads = ParseEngineMetricsByRank(text, 1, 2);
  ASSERT_TRUE(loads.ok()) << loads.status().ToString();
  EXPECT_DOUBLE_EQ((*loads)[0].running, 6.0);
  EXPECT_DOUBLE_EQ((*loads)[1].running, 2.0);
  EXPECT_DOUBLE_EQ((*loads)[0].waiting, 2.0);
  EXPECT_DOUBLE_EQ((*loads)[1].waiting, 2.0);
  EXPECT_DOUBLE_EQ((*loads)[0].kv_usage, 0.5);
  EXPECT_DOUBLE_EQ((*loads)[1].kv_usage, 0.5);
  // A rank label past the engine's ranks names no rank of it.
  Result<std::vector<router::ScrapedLoad>> outside =
      ParseEngineMetricsByRank("vllm:num_requests_running{engine=\"7\"} 8\n", 1, 2);
  ASSERT_TRUE(outside.ok());
  EXPECT_DOUBLE_EQ((*outside)[0].running, 4.0);
  EXPECT_DOUBLE_EQ((*outside)[1].running, 4.0);
  EXPECT_EQ(ParseEngineMetricsByRank(text, 1, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(EngineMetricsTest, LabelValuesMayHoldEscapedQuotesCommasAndBraces) {
  const std::string text =
      "vllm:num_requests_running{model_name=\"a \\\"b\\\", c} {d=\\\"e\\\"}\",engine=\"0\"} 2\n"
      "vllm:num_requests_running{model_name=\"back\\\\slash\\nnewline\",engine=\"1\",} 3 "
      "1712345678000\n"
      "vllm:num_requests_waiting { model_name = \"x}\" , engine=\"0\" }\t7\r\n";
  Result<router::ScrapedLoad> load = ParseEngineMetrics(text, 0);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_DOUBLE_EQ(load->running, 5.0);
  EXPECT_DOUBLE_EQ(load->waiting, 7.0);
  EXPECT_DOUBLE_EQ(load->kv_usage, 0.0);
}

TEST(EngineMetricsTest, ReadsSglangNames) {
  constexpr std::string_view kText =
      R"(# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="qwen",tp_rank="0"} 6.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="qwen",tp_rank="0"} 2.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="qwen",tp_rank="0"} 0.4
sglang:gen_throughput{model_name="qwen",tp_rank="0"} 88.5
)";
  Result<router::ScrapedLoad> load = ParseEngineMetrics(kText, 5);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_DOUBLE_EQ(load->running, 6.0);
  EXPECT_DOUBLE_EQ(load->waiting, 2.0);
  EXPECT_DOUBLE_EQ(load->kv_usage, 0.4);
}

TEST(EngineMetricsTest, ReadsTheOlderGpuCacheName) {
  constexpr std::string_view kText = R"(vllm:num_requests_running{model_name="m"} 1.0
vllm:num_requests_waiting{model_name="m"} 0.0
vllm:gpu_cache_usage_perc{model_name="m"} 0.9
vllm:cpu_cache_usage_perc{model_name="m"} 0.1
)";
  Result<router::ScrapedLoad> load = ParseEngineMetrics(kText, 0);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_DOUBLE_EQ(load->kv_usage, 0.9);
}

TEST(EngineMetricsTest, NewKvCacheNameWinsOverTheOlderOne) {
  constexpr std::string_view kText = R"(vllm:gpu_cache_usage_perc{model_name="m"} 0.9
vllm:kv_cache_usage_perc{model_name="m"} 0.3
)";
  Result<router::ScrapedLoad> load = ParseEngineMetrics(kText, 0);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_DOUBLE_EQ(load->kv_usage, 0.3);
  EXPECT_DOUBLE_EQ(load->running, 0.0);
}

TEST(EngineMetricsTest, UnlabelledSeriesAndSpecialSpellingsParse) {
  Result<router::ScrapedLoad> load = ParseEngineMetrics(
      "vllm:num_requests_running 1e1\nvllm:num_requests_waiting +2.5\n"
      "  vllm:kv_cache_usage_perc{} .5 -3\n",
      0);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_DOUBLE_EQ(load->running, 10.0);
  EXPECT_DOUBLE_EQ(load->waiting, 2.5);
  EXPECT_DOUBLE_EQ(load->kv_usage, 0.5);
}

TEST(EngineMetricsTest, NoKnownGaugeIsNotFound) {
  Result<router::ScrapedLoad> load = ParseEngineMetrics(
      "# HELP x y\nprocess_cpu_seconds_total 1.5\nvllm:num_requests_running_total 3\n", 0);
  ASSERT_FALSE(load.ok());
  EXPECT_EQ(load.status().code(), StatusCode::kNotFound);

  Result<router::ScrapedLoad> empty = ParseEngineMetrics("", 0);
  EXPECT_EQ(empty.status().code(), StatusCode::kNotFound);
}

TEST(EngineMetricsTest, MalformedUnrelatedLinesAreSkipped) {
  constexpr std::string_view kText = R"(some_metric{label="unterminated} 1
other_metric not-a-number
{"utf8.name", a="b"} 1
vllm:num_requests_running{model_name="m"} 4
)";
  Result<router::ScrapedLoad> load = ParseEngineMetrics(kText, 0);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_DOUBLE_EQ(load->running, 4.0);
}

// Each case: the text, the line the error must name, a phrase it must hold.
struct MalformedCase {
  std::string text;
  std::string line;
  std::string phrase;
};

TEST(EngineMetricsTest, MalformedKnownLineIsInvalidArgumentNamingTheLine) {
  const std::vector<MalformedCase> cases = {
      {"# TYPE g gauge\nvllm:num_requests_running{model_name=\"m} 1\n", "line 2:", "not closed"},
      {"vllm:num_requests_running{model_name=\"m\"}\n", "line 1:", "missing value"},
      {"\n\nvllm:num_requests_waiting{a=\"1\"} abc\n", "line 3:", "not a number"},
      {"vllm:num_requests_waiting{a=\"1\" b=\"2\"} 1\n", "line 1:", "want ',' or '}'"},
      {"vllm:num_requests_waiting{a=\"1\",a=\"2\"} 1\n", "line 1:", "given twice"},
      {"vllm:num_requests_waiting{a=\"\\t\"} 1\n", "line 1:", "unknown escape"},
      {"vllm:num_requests_waiting{1a=\"x\"} 1\n", "line 1:", "label name"},
      {"vllm:num_requests_waiting{a} 1\n", "line 1:", "want '='"},
      {"vllm:num_requests_waiting{a=x} 1\n", "line 1:", "quoted value"},
      {"vllm:num_requests_waiting{a=\"1\"} 1 12.5\n", "line 1:", "timestamp"},
      {"vllm:num_requests_waiting{a=\"1\"} 1 12 extra\n", "line 1:", "unexpected text"},
      {"vllm:num_requests_waiting{a=\"1\"} -1\n", "line 1:", "negative"},
      {"vllm:num_requests_waiting{a=\"1\"} +-1\n", "line 1:", "not a number"},
      {"vllm:kv_cache_usage_perc{a=\"1\"} 0.1\nvllm:kv_cache_usage_perc{a=\"1\"} 0.2\n",
       "line 2:", "repeats"},
      {"vllm:num_requests_running{engine=\"0\",model=\"m\"} 1\n"
       "vllm:num_requests_running{model=\"m\",engine=\"0\"} 1\n",
       "line 2:", "repeats"},
      {"vllm:num_requests_running{a=\"0\"} 1e308\nvllm:num_requests_running{a=\"1\"} 1e308\n",
       "line 2:", "not finite"},
  };
  for (const MalformedCase& c : cases) {
    Result<router::ScrapedLoad> load = ParseEngineMetrics(c.text, 0);
    ASSERT_FALSE(load.ok()) << c.text;
    EXPECT_EQ(load.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_TRUE(load.status().message().starts_with(c.line))
        << c.text << " -> " << load.status().message();
    EXPECT_NE(load.status().message().find(c.phrase), std::string::npos)
        << c.text << " -> " << load.status().message();
  }
}

TEST(EngineMetricsTest, MalformedLineOfALowerPriorityNameIsStillAnError) {
  Result<router::ScrapedLoad> load = ParseEngineMetrics(
      "vllm:kv_cache_usage_perc 0.1\nvllm:gpu_cache_usage_perc{x=\"\"} oops\n", 0);
  ASSERT_FALSE(load.ok());
  EXPECT_EQ(load.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(load.status().message().find("line 2: vllm:gpu_cache_usage_perc"), std::string::npos)
      << load.status().message();
}

TEST(EngineMetricsTest, NanAndInfinityAreInvalid) {
  for (const char* value : {"NaN", "nan", "+Inf", "-Inf", "Inf"}) {
    const std::string text =
        "vllm:num_requests_running{model_name=\"m\"} 1\n"
        "vllm:kv_cache_usage_perc{model_name=\"m\"} " +
        std::string(value) + "\n";
    Result<router::ScrapedLoad> load = ParseEngineMetrics(text, 0);
    ASSERT_FALSE(load.ok()) << value;
    EXPECT_EQ(load.status().code(), StatusCode::kInvalidArgument) << value;
    EXPECT_NE(load.status().message().find("line 2:"), std::string::npos)
        << load.status().message();
    EXPECT_NE(load.status().message().find("not finite"), std::string::npos)
        << load.status().message();
  }
}

TEST(EngineMetricsTest, OverTheSizeLimitIsResourceExhausted) {
  const std::string text = "vllm:num_requests_running 1\n";
  Result<router::ScrapedLoad> at_limit = ParseEngineMetrics(text, 0, text.size());
  EXPECT_TRUE(at_limit.ok()) << at_limit.status().ToString();

  Result<router::ScrapedLoad> over = ParseEngineMetrics(text, 0, text.size() - 1);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);

  const std::string huge((4 << 20) + 1, '#');
  EXPECT_EQ(ParseEngineMetrics(huge, 0).status().code(), StatusCode::kResourceExhausted);
}

TEST(EngineMetricsTest, ErrorMessagesCutLongTextShort) {
  const std::string text = "vllm:num_requests_running " + std::string(10000, 'x') + "\n";
  Result<router::ScrapedLoad> load = ParseEngineMetrics(text, 0);
  ASSERT_FALSE(load.ok());
  EXPECT_LT(load.status().message().size(), 200u) << load.status().message();
}

}  // namespace
}  // namespace kvgov::connectors
