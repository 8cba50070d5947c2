#pragma once

// The benchmark smoke (`make bench-smoke`, run by CI): every benchmark
// binary runs each of its cases once, at its smallest size, so a change
// that breaks `make bench` (a case that no longer starts, a counter the
// summary cannot read) fails CI rather than the next person's measurement.
// Its figures judge nothing.
//
// Header-only, read at registration time (static initialisation), so a
// case's iteration count can depend on it.

#include <cstdint>
#include <cstdlib>

namespace kvgov::bench {

/// True when KVGOV_BENCH_SMOKE is set (scripts/run-benchmarks.sh --smoke).
inline bool Smoke() {
  static const bool smoke = std::getenv("KVGOV_BENCH_SMOKE") != nullptr;
  return smoke;
}

/// `full` for a measurement, `smoke` under the smoke.
template <typename T>
T Sized(T full, T smoke) {
  return Smoke() ? smoke : full;
}

}  // namespace kvgov::bench
