#pragma once

// Benchmark support, never linked into kvgov: the percentile every
// latency benchmark reports its p50 and p99 with.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace kvgov::bench {

/// The nearest-rank percentile `p` (0 < p <= 1) of `samples`; 0 for none.
inline double Percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(samples.size())));
  return samples[std::clamp<size_t>(rank, 1, samples.size()) - 1];
}

}  // namespace kvgov::bench
