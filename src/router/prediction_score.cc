#include "kvgov/router/prediction_score.h"

#include <algorithm>

namespace kvgov::router {

std::string_view ToString(PredictionOutcome outcome) {
  switch (outcome) {
    case PredictionOutcome::kExact:
      return "exact";
    case PredictionOutcome::kOver:
      return "over";
    case PredictionOutcome::kUnder:
      return "under";
  }
  return "unknown";
}

PredictionOutcome ScorePrediction(int64_t predicted_tokens, int64_t cached_tokens,
                                  int64_t block_size) {
  const int64_t block = std::max<int64_t>(1, block_size);
  const int64_t predicted_blocks = predicted_tokens / block;
  const int64_t cached_blocks = cached_tokens / block;
  if (predicted_blocks == cached_blocks) return PredictionOutcome::kExact;
  return predicted_blocks > cached_blocks ? PredictionOutcome::kOver : PredictionOutcome::kUnder;
}

std::optional<double> PredictionScore::accuracy() const {
  if (scored() == 0) return std::nullopt;
  return static_cast<double>(exact) / static_cast<double>(scored());
}

PredictionOutcome PredictionScores::Record(std::string_view worker, int64_t predicted_tokens,
                                           int64_t cached_tokens, int64_t block_size) {
  const PredictionOutcome outcome = ScorePrediction(predicted_tokens, cached_tokens, block_size);
  MutexLock lock(mu_);
  auto it = scores_.find(worker);
  if (it == scores_.end()) it = scores_.emplace(std::string(worker), PredictionScore{}).first;
  PredictionScore& score = it->second;
  switch (outcome) {
    case PredictionOutcome::kExact:
      ++score.exact;
      break;
    case PredictionOutcome::kOver:
      ++score.over;
      break;
    case PredictionOutcome::kUnder:
      ++score.under;
      break;
  }
  score.predicted_tokens += predicted_tokens;
  score.engine_cached_tokens += cached_tokens;
  return outcome;
}

std::optional<PredictionScore> PredictionScores::Of(std::string_view worker) const {
  MutexLock lock(mu_);
  auto it = scores_.find(worker);
  if (it == scores_.end()) return std::nullopt;
  return it->second;
}

}  // namespace kvgov::router
