#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kvgov/core/status.h"

namespace kvgov::simfleet {

struct LoadgenOptions {
  // The kvgov binary to start as the daemon under load, in its own process
  // so its memory is its own; "" means this executable.
  std::string kvgov_binary;
  std::string data_dir;  // a fresh directory for that daemon
  int engines = 4;
  double duration_s = 10;
  // Event batches each engine publishes per second; 0 publishes as fast as
  // the engine's thread can.
  double batches_per_s_per_engine = 200;
  int route_threads = 2;
  int64_t governance_every_ms = 100;  // one quarantine or lease call this often
  uint64_t seed = 1;
  FILE* out = stdout;
};

/// What one load run measured and checked.
struct LoadgenReport {
  double duration_s = 0;
  uint64_t batches_published = 0;
  uint64_t blocks_stored = 0;  // by the engines' own pools
  uint64_t blocks_removed = 0;
  double blocks_per_s = 0;  // stored + removed, all applied by kvgov
  uint64_t routes = 0;
  uint64_t route_errors = 0;
  double route_p50_ms = 0;
  double route_p99_ms = 0;
  uint64_t governance_writes = 0;  // acknowledged with 200
  uint64_t governance_errors = 0;
  double governance_p50_ms = 0;
  double governance_p99_ms = 0;
  int64_t rss_warm_kib = 0;  // the daemon's RSS a third of the way in
  int64_t rss_peak_kib = 0;
  int64_t rss_end_kib = 0;
  // The checks: every one must hold for a clean run.
  std::vector<std::string> failures;
};

/// `kvgov loadgen`: starts a kvgov daemon with `engines` simulated vLLM
/// engines attached, drives it for `duration_s` with a firehose of KV
/// events, concurrent routes and governance writes, then checks that the
/// daemon is alive, that every worker's residency equals its engine's pool
/// exactly (nothing lost, nothing applied twice), that every acknowledged
/// quarantine is in the journal, and that its resident memory stayed flat
/// after warm-up (growth from a third of the way in to the end at most
/// 20% or 32 MiB, whichever is larger). Stops the daemon with SIGTERM and
/// expects exit 0. Returns an error only when the run could not be set
/// up; failed checks are in the report.
Result<LoadgenReport> RunLoadgen(const LoadgenOptions& options);

}  // namespace kvgov::simfleet
