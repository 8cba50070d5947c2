#include "kvgov/services/usage_accounting.h"

#include <gtest/gtest.h>

#include <string>

#include "kvgov/metrics/registry.h"

namespace kvgov::services {
namespace {

class UsageAccountingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<metrics::CacheAccounting>> accounting =
        metrics::CacheAccounting::Create(&registry_);
    ASSERT_TRUE(accounting.ok()) << accounting.status().ToString();
    accounting_ = *std::move(accounting);
    Result<std::unique_ptr<UsageAccounting>> usage =
        UsageAccounting::Create(accounting_.get(), &scores_, &registry_);
    ASSERT_TRUE(usage.ok()) << usage.status().ToString();
    usage_ = *std::move(usage);
  }

  // The rendered sample line that starts with `series`, or "".
  std::string Sample(const std::string& series) {
    const std::string text = registry_.Render();
    const size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return "";
    return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  }

  metrics::Registry registry_;
  router::PredictionScores scores_;
  std::unique_ptr<metrics::CacheAccounting> accounting_;
  std::unique_ptr<UsageAccounting> usage_;
};

router::Prediction Predicted(int64_t routed_tokens, int64_t predicted_tokens) {
  return {.model = "m",
          .tenant = "acme",
          .routed_tokens = routed_tokens,
          .predicted_tokens = predicted_tokens,
          .block_size = 16,
          .whole_prompt = true};
}

TEST_F(UsageAccountingTest, TheEngineCachedTokensAreTheSavingAndThePredictionIsScored) {
  usage_->Account("w0", "d1", Predicted(100, 64), EngineUsage{100, 64, false});
  usage_->Account("w0", "d2", Predicted(100, 64), EngineUsage{100, 32, false});
  usage_->Account("w0", "d3", Predicted(100, 0), EngineUsage{100, 48, false});

  EXPECT_EQ(accounting_->SavedTokens(Source::kRideEngine), 64 + 32 + 48);
  const std::optional<router::PredictionScore> score = scores_.Of("w0");
  ASSERT_TRUE(score.has_value());
  EXPECT_EQ(score->exact, 1u);
  EXPECT_EQ(score->over, 1u);
  EXPECT_EQ(score->under, 1u);
  EXPECT_EQ(Sample("kvgov_gateway_predicted_tokens_total{worker=\"w0\"}"),
            "kvgov_gateway_predicted_tokens_total{worker=\"w0\"} 128");
  EXPECT_EQ(Sample("kvgov_gateway_engine_cached_tokens_total{worker=\"w0\"}"),
            "kvgov_gateway_engine_cached_tokens_total{worker=\"w0\"} 144");
  EXPECT_EQ(Sample("kvgov_gateway_unaccounted_total"), "kvgov_gateway_unaccounted_total 0");
}

TEST_F(UsageAccountingTest, AnAnswerWithoutUsageIsUnaccountedAndSavesNothing) {
  usage_->Account("w0", "d1", Predicted(100, 64), std::nullopt);
  EXPECT_EQ(accounting_->SavedTokens(Source::kRideEngine), 0);
  EXPECT_FALSE(scores_.Of("w0").has_value());
  EXPECT_EQ(Sample("kvgov_gateway_unaccounted_total"), "kvgov_gateway_unaccounted_total 1");
}

TEST_F(UsageAccountingTest, APromptCountOtherThanTheRoutedTokensIsAMismatchUnlessPartial) {
  usage_->Account("w0", "d1", Predicted(100, 0), EngineUsage{101, 0, false});
  router::Prediction partial = Predicted(100, 0);
  partial.whole_prompt = false;  // a follow-up the engine prepends to
  usage_->Account("w0", "d2", partial, EngineUsage{180, 0, false});
  EXPECT_EQ(Sample("kvgov_gateway_tokenize_mismatch_total{model=\"m\"}"),
            "kvgov_gateway_tokenize_mismatch_total{model=\"m\"} 1");
}

TEST(RouteSavingEntryTest, ARouteSpanRidesTheEngineAndCarriesItsDecision) {
  const Entry saved = RouteSavingEntry("d1", "w0", 48);
  EXPECT_EQ(saved.source, Source::kRideEngine);
  EXPECT_EQ(saved.metrics.prefill_tokens_saved, 48);
  EXPECT_EQ(saved.labels.at("decision_id"), "d1");
  const Entry missed = RouteSavingEntry("d2", "w0", 0);
  EXPECT_EQ(missed.metrics.prefill_tokens_saved, 0);
  EXPECT_EQ(missed.labels.at("decision_id"), "d2");
}

}  // namespace
}  // namespace kvgov::services
