#pragma once

// Benchmark support, never linked into kvgov: time to first byte of one
// streamed completion, as the gateway benchmarks measure it.

#include <httplib.h>

#include <benchmark/benchmark.h>

#include <chrono>
#include <string>
#include <vector>

#include "testing/percentile.h"

namespace kvgov::bench {

/// Microseconds from sending `body` to `path` to the first byte of the
/// answer's body; the rest is read to the end. Negative on failure.
inline double TimeToFirstByte(httplib::Client& client, const std::string& path,
                              const std::string& body) {
  using Clock = std::chrono::steady_clock;
  httplib::Request request;
  request.method = "POST";
  request.path = path;
  request.body = body;
  request.set_header("Content-Type", "application/json");
  Clock::time_point first{};
  request.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    if (first == Clock::time_point{}) first = Clock::now();
    return true;
  };
  const auto sent = Clock::now();
  httplib::Result result = client.send(request);
  if (!result || result->status != 200 || first == Clock::time_point{}) return -1;
  return std::chrono::duration<double, std::micro>(first - sent).count();
}

/// The counters of a side-by-side run, the engine called directly and
/// through the gateway: each side's p50 and p99 and what the gateway adds.
inline void ReportTtfbPair(benchmark::State& state, const std::vector<double>& direct_us,
                           const std::vector<double>& gateway_us) {
  const double direct_p50 = Percentile(direct_us, 0.50);
  const double direct_p99 = Percentile(direct_us, 0.99);
  const double gateway_p50 = Percentile(gateway_us, 0.50);
  const double gateway_p99 = Percentile(gateway_us, 0.99);
  state.counters["direct_ttfb_p50_us"] = direct_p50;
  state.counters["direct_ttfb_p99_us"] = direct_p99;
  state.counters["gateway_ttfb_p50_us"] = gateway_p50;
  state.counters["gateway_ttfb_p99_us"] = gateway_p99;
  state.counters["added_ttfb_p50_us"] = gateway_p50 - direct_p50;
  state.counters["added_ttfb_p99_us"] = gateway_p99 - direct_p99;
}

}  // namespace kvgov::bench
