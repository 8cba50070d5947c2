#pragma once

// How often the router's predicted overlap came true: the gateway holds each
// decision's credited tokens against the cached tokens the engine reports
// for the same request (docs/formats/gateway.md, "Accounting").

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "kvgov/core/mutex.h"

namespace kvgov::router {

/// One prediction against the engine's report, compared in whole blocks:
/// an engine reports cached tokens in blocks, and the last partial block of
/// a prompt is never credited by either side.
enum class PredictionOutcome { kExact, kOver, kUnder };

std::string_view ToString(PredictionOutcome outcome);

/// What a routed request's engine is expected to report, to hold its usage
/// against (services::UsageAccounting).
struct Prediction {
  std::string model;
  std::string tenant;
  int64_t routed_tokens = 0;
  int64_t predicted_tokens = 0;  // the decision's credited overlap, in tokens
  int64_t block_size = 1;
  // False when the engine prepends what kvgov never tokenized (a Responses
  // request's previous_response_id): its prompt count is not held against
  // the routed tokens.
  bool whole_prompt = true;
};

/// `block_size` <= 0 is taken as 1.
PredictionOutcome ScorePrediction(int64_t predicted_tokens, int64_t cached_tokens,
                                  int64_t block_size);

/// One worker's scored predictions.
struct PredictionScore {
  uint64_t exact = 0;
  uint64_t over = 0;   // kvgov credited blocks the engine did not reuse
  uint64_t under = 0;  // the engine reused blocks kvgov did not credit
  int64_t predicted_tokens = 0;
  int64_t engine_cached_tokens = 0;

  uint64_t scored() const { return exact + over + under; }
  /// exact / scored; nullopt before the first scored prediction.
  std::optional<double> accuracy() const;
};

/// Every worker's score. Thread-safe: one mutex; each method takes it
/// briefly.
class PredictionScores {
 public:
  /// Scores one answered request on `worker`; returns the outcome.
  PredictionOutcome Record(std::string_view worker, int64_t predicted_tokens, int64_t cached_tokens,
                           int64_t block_size);
  /// The worker's score; nullopt when nothing was scored on it.
  std::optional<PredictionScore> Of(std::string_view worker) const;

 private:
  mutable Mutex mu_;
  std::map<std::string, PredictionScore, std::less<>> scores_ KVGOV_GUARDED_BY(mu_);
};

}  // namespace kvgov::router
