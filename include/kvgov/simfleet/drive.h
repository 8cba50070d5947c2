#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>

#include "kvgov/core/status.h"
#include "kvgov/sim/fleet.h"
#include "kvgov/sim/workload.h"

namespace kvgov::simfleet {

/// How far a drive has got, for a progress line.
struct DriveProgress {
  uint64_t done = 0;
  uint64_t total = 0;
  uint64_t prompt_blocks = 0;
  uint64_t hit_blocks = 0;
  uint64_t errors = 0;
};

struct DriveOptions {
  std::string kvgov_url = "http://127.0.0.1:8787";
  // kvgov's gateway ("http://HOST:PORT"): when set, every request goes
  // through it as an OpenAI client sends one (its tenant in
  // X-Kvgov-Tenant), instead of /v1/route and then the engine.
  std::string gateway_url;
  std::string model = "sim-model";
  // Arrivals are compressed by this factor (match the engines' speedup).
  double speedup = 1.0;
  int concurrency = 16;  // requests in flight at once, at most
  // Called about every 200 ms from the driving thread, and once at the end.
  std::function<void(const DriveProgress&)> on_progress;
};

/// Drives a trace through a live fleet: for each request, at its
/// (compressed) arrival time, either POST it to kvgov's gateway
/// (`gateway_url`) or do what a front end of its own would: POST
/// /v1/route to kvgov, send the prompt with the returned cache_salt to the
/// chosen engine's /v1/completions, then POST /v1/route/{id}/done.
/// `engines` maps worker ids to control URLs. The report's TTFTs are the
/// engines' modeled ones.
/// Fails (Unavailable, naming the call) when no request got through; a
/// request that fails is counted in `errors` and left out of the report.
struct DriveReport {
  sim::PolicyReport report;
  uint64_t errors = 0;
  std::string first_error;
};
Result<DriveReport> DriveThroughKvgov(std::span<const sim::SimRequest> trace,
                                      const std::map<std::string, std::string>& engines,
                                      const DriveOptions& options);

}  // namespace kvgov::simfleet
