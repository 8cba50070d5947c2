#include "kvgov/sim/pareto.h"

#include <gtest/gtest.h>

namespace kvgov::sim {
namespace {

PolicyReport Report(std::string policy, int64_t prefill_tokens, double ttft_p90_s,
                    uint64_t hit_blocks = 50) {
  PolicyReport report;
  report.policy = std::move(policy);
  report.computed_tokens = prefill_tokens;
  report.ttft_p90_s = ttft_p90_s;
  report.prompt_blocks = 100;
  report.hit_blocks = hit_blocks;
  return report;
}

TEST(ParetoTest, JudgesEachPeerOnBothAxes) {
  const std::vector<PolicyReport> reports = {
      Report("kvgov", 1000, 1.0, 60), Report("slower", 1000, 2.0), Report("cheaper", 900, 3.0),
      Report("better", 800, 0.5),     Report("same", 1000, 1.0),   Report("oracle", 950, 1.1, 62),
  };
  Result<ParetoSummary> summary = Pareto(reports, "kvgov");
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  ASSERT_EQ(summary->against.size(), 4u);  // neither itself nor the oracle

  const ParetoComparison& slower = summary->against[0];
  EXPECT_EQ(slower.peer, "slower");
  EXPECT_DOUBLE_EQ(slower.prefill_ratio, 1.0);
  EXPECT_DOUBLE_EQ(slower.ttft_p90_ratio, 0.5);
  EXPECT_TRUE(slower.dominates());

  const ParetoComparison& cheaper = summary->against[1];
  EXPECT_FALSE(cheaper.no_worse());
  EXPECT_FALSE(cheaper.dominated());
  EXPECT_NEAR(cheaper.prefill_ratio, 1000.0 / 900.0, 1e-12);

  EXPECT_TRUE(summary->against[2].dominated());
  EXPECT_TRUE(summary->against[3].no_worse());
  EXPECT_FALSE(summary->against[3].dominates());

  EXPECT_EQ(summary->no_worse_than(), 2u);
  ASSERT_TRUE(summary->hit_rate_points_behind_oracle.has_value());
  EXPECT_NEAR(*summary->hit_rate_points_behind_oracle, 2.0, 1e-9);

  const std::string text = FormatPareto(*summary);
  EXPECT_NE(text.find("slower"), std::string::npos);
  EXPECT_NE(text.find("loses on prefill by 11.1%"), std::string::npos) << text;
  EXPECT_NE(text.find("dominated: loses on prefill by 25.0% and TTFT p90 by 100.0%"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("2.0 points behind the oracle's"), std::string::npos) << text;
  EXPECT_NE(text.find("no worse on both axes than 2 of 4"), std::string::npos) << text;
}

TEST(ParetoTest, NamesAMissingPolicy) {
  const std::vector<PolicyReport> reports = {Report("sglang", 1, 1)};
  Result<ParetoSummary> summary = Pareto(reports, "kvgov");
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), StatusCode::kNotFound);
  EXPECT_NE(summary.status().message().find("kvgov"), std::string::npos);
}

TEST(ParetoTest, VirtualClockRoundingIsNoDifference) {
  const std::vector<PolicyReport> reports = {Report("kvgov", 10, 0.012057500000000942),
                                             Report("llm-d", 10, 0.012057499999999166),
                                             Report("slower", 10, 0.0120576)};
  Result<ParetoSummary> summary = Pareto(reports, "kvgov");
  ASSERT_TRUE(summary.ok());
  EXPECT_DOUBLE_EQ(summary->against[0].ttft_p90_ratio, 1.0);
  EXPECT_TRUE(summary->against[0].no_worse());
  EXPECT_LT(summary->against[1].ttft_p90_ratio, 1.0);
}

TEST(ParetoTest, ZeroFiguresCompareAsEqualWithoutAnOracle) {
  const std::vector<PolicyReport> reports = {Report("kvgov", 0, 0), Report("least-load", 0, 0)};
  Result<ParetoSummary> summary = Pareto(reports, "kvgov");
  ASSERT_TRUE(summary.ok());
  ASSERT_EQ(summary->against.size(), 1u);
  EXPECT_DOUBLE_EQ(summary->against[0].prefill_ratio, 1.0);
  EXPECT_TRUE(summary->against[0].no_worse());
  EXPECT_FALSE(summary->hit_rate_points_behind_oracle.has_value());
}

}  // namespace
}  // namespace kvgov::sim
