#pragma once

// The tail this machine adds to any computation of a given length: a loop
// of fixed work, sized so that its median matches a measured median, timed
// beside the code it stands for. On a VM whose vCPUs are interrupted now
// and then (docs/benchmarks.md measured pauses of 20-25 us here), a
// p99 target below the median plus one such pause can only be met by code
// short enough that fewer than 1 % of its calls meet a pause; this loop
// says where that line is, in the same run, for the same length.
//
// Not thread-safe: one per benchmark.

#include <chrono>
#include <cstdint>
#include <vector>

#include "testing/percentile.h"

namespace kvgov::bench {

class MachineTail {
 public:
  /// Sizes the loop so that its median takes `median_us`.
  explicit MachineTail(double median_us) {
    constexpr uint64_t kProbeSteps = 4096;
    std::vector<double> probes;
    for (int i = 0; i < 201; ++i) probes.push_back(TimeSteps(kProbeSteps));
    const double per_step_us = Percentile(probes, 0.50) / static_cast<double>(kProbeSteps);
    steps_ = per_step_us > 0 ? static_cast<uint64_t>(median_us / per_step_us) : 0;
    // Once more at full length, where a short probe can misjudge the pace.
    std::vector<double> full;
    for (int i = 0; i < 21; ++i) full.push_back(TimeSteps(steps_));
    const double measured_us = Percentile(full, 0.50);
    if (measured_us > 0) {
      steps_ = static_cast<uint64_t>(static_cast<double>(steps_) * median_us / measured_us);
    }
  }

  /// Runs the loop once and keeps its time.
  void Sample() { samples_us_.push_back(TimeSteps(steps_)); }

  double p50_us() const { return Percentile(samples_us_, 0.50); }
  double p99_us() const { return Percentile(samples_us_, 0.99); }

 private:
  // A dependent chain of multiply-adds (an LCG): no memory, no branches the
  // predictor misses, the same work every time, which the compiler cannot
  // fold because the result is kept.
  double TimeSteps(uint64_t steps) {
    using Clock = std::chrono::steady_clock;
    const auto started = Clock::now();
    uint64_t state = sink_;
    for (uint64_t i = 0; i < steps; ++i) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      asm volatile("" : "+r"(state));
    }
    sink_ = state;
    return std::chrono::duration<double, std::micro>(Clock::now() - started).count();
  }

  uint64_t steps_ = 0;
  uint64_t sink_ = 1;
  std::vector<double> samples_us_;
};

}  // namespace kvgov::bench
