#pragma once

// Request traces in Mooncake's format (docs/formats/simulator.md, "Request
// traces"): what Mooncake's FAST'25 traces, Dynamo's router benchmarks and
// aiperf's `mooncake_trace` input replay.

#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "kvgov/core/status.h"
#include "kvgov/sim/workload.h"

namespace kvgov::sim {

struct MooncakeTraceOptions {
  // Tokens each hash id stands for (the trace's block size).
  int64_t block_tokens = 512;
  // Arrival times are divided by it: 2 replays the trace twice as fast.
  double speedup = 1.0;
  // Only requests arriving in [window_start_s, window_end_s) of the trace's
  // own time (before the speed-up) are kept; times then count from the
  // window's start.
  double window_start_s = 0;
  double window_end_s = std::numeric_limits<double>::infinity();
  // The synthesized tokens: equal hash ids get equal tokens, under a seed.
  uint64_t seed = 1;
  int64_t vocabulary = 32000;
};

/// The limits a trace is read under, each checked before what it bounds is
/// built.
inline constexpr size_t kMaxTraceLineBytes = size_t{1} << 20;
inline constexpr size_t kMaxTraceRequests = size_t{1} << 22;
inline constexpr int64_t kMaxTraceInputTokens = int64_t{1} << 21;

/// One request a line: `timestamp` (ms from the trace's start, not
/// decreasing), `input_length` (prompt tokens, at least 1), `output_length`
/// (tokens generated, at least 0) and `hash_ids` (ceil(input_length /
/// block_tokens) non-negative integers; equal ids are equal block
/// contents); other fields are ignored, empty lines skipped. The prompt's
/// tokens are synthesized per hash id (the last block cut to the prompt's
/// length), so a shared prefix in the trace is a shared prefix of tokens,
/// and the engines' event streams and hashes are real. Deterministic under
/// the options. InvalidArgument naming the line and the field: a line that
/// is not such an object, a trace not sorted by time (refused, never
/// reordered), a line or trace over the limits, or bad options.
Result<std::vector<SimRequest>> ParseMooncakeTrace(std::string_view text,
                                                   const MooncakeTraceOptions& options);

}  // namespace kvgov::sim
