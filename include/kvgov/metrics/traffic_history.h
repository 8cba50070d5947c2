#pragma once

// The console's traffic charts (GET /v1/traffic): what happened in each of
// the last intervals, from cumulative totals sampled at the interval's end.
// In memory only; a restart starts an empty window.

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "kvgov/core/mutex.h"
#include "kvgov/core/vocabulary.h"

namespace kvgov::metrics {

/// Source's values, indexed by the enumerator.
inline constexpr size_t kSourceCount = EnumSpelling<Source>::kValues.size();

/// Cumulative counts since start, or their change over one interval.
struct TrafficTotals {
  uint64_t routes = 0;           // decisions that chose a worker
  uint64_t prompt_blocks = 0;    // full blocks those routes asked for
  uint64_t credited_blocks = 0;  // of those, the blocks credited as resident
  // Prefill tokens saved, by Source (never summed across sources).
  std::array<double, kSourceCount> saved_tokens{};
};

/// One interval: its end (the caller's clock) and what changed in it.
struct TrafficPoint {
  int64_t end_ms = 0;
  TrafficTotals change;
};

/// Thread-safe: one mutex.
class TrafficHistory {
 public:
  /// Keeps the last `capacity` intervals (15 minutes of 5 s: 180).
  explicit TrafficHistory(size_t capacity);

  /// Closes an interval at `now_ms` with the totals then. The first sample
  /// only sets the baseline. A total that went down (a counter reset)
  /// counts as no change.
  void Sample(int64_t now_ms, const TrafficTotals& totals);

  /// Oldest first.
  std::vector<TrafficPoint> Points() const;

 private:
  const size_t capacity_;
  mutable Mutex mu_;
  bool sampled_ KVGOV_GUARDED_BY(mu_) = false;
  TrafficTotals last_ KVGOV_GUARDED_BY(mu_);
  std::deque<TrafficPoint> points_ KVGOV_GUARDED_BY(mu_);
};

}  // namespace kvgov::metrics
