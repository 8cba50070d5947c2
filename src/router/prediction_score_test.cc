#include "kvgov/router/prediction_score.h"

#include <gtest/gtest.h>

namespace kvgov::router {
namespace {

TEST(ScorePredictionTest, ComparesWholeBlocks) {
  EXPECT_EQ(ScorePrediction(64, 64, 16), PredictionOutcome::kExact);
  // A partial block is never credited, by the router or by the engine.
  EXPECT_EQ(ScorePrediction(64, 70, 16), PredictionOutcome::kExact);
  EXPECT_EQ(ScorePrediction(64, 48, 16), PredictionOutcome::kOver);
  EXPECT_EQ(ScorePrediction(0, 16, 16), PredictionOutcome::kUnder);
  EXPECT_EQ(ScorePrediction(3, 2, 0), PredictionOutcome::kOver);  // block size 0 taken as 1
}

TEST(PredictionScoresTest, KeepsEachWorkersTallyAndAccuracy) {
  PredictionScores scores;
  EXPECT_FALSE(scores.Of("w1").has_value());
  EXPECT_EQ(scores.Record("w1", 64, 64, 16), PredictionOutcome::kExact);
  EXPECT_EQ(scores.Record("w1", 64, 32, 16), PredictionOutcome::kOver);
  EXPECT_EQ(scores.Record("w1", 0, 0, 16), PredictionOutcome::kExact);
  EXPECT_EQ(scores.Record("w2", 0, 32, 16), PredictionOutcome::kUnder);

  const std::optional<PredictionScore> w1 = scores.Of("w1");
  ASSERT_TRUE(w1.has_value());
  EXPECT_EQ(w1->exact, 2u);
  EXPECT_EQ(w1->over, 1u);
  EXPECT_EQ(w1->under, 0u);
  EXPECT_EQ(w1->predicted_tokens, 128);
  EXPECT_EQ(w1->engine_cached_tokens, 96);
  ASSERT_TRUE(w1->accuracy().has_value());
  EXPECT_DOUBLE_EQ(*w1->accuracy(), 2.0 / 3.0);

  const std::optional<PredictionScore> w2 = scores.Of("w2");
  ASSERT_TRUE(w2.has_value());
  EXPECT_EQ(w2->scored(), 1u);
  EXPECT_DOUBLE_EQ(*w2->accuracy(), 0.0);
  EXPECT_FALSE(PredictionScore{}.accuracy().has_value());
}

}  // namespace
}  // namespace kvgov::router
