#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvgov/core/status.h"
#include "kvgov/router/worker_status.h"

namespace kvgov::connectors {

/// Reads an engine's load from its /metrics body (Prometheus text exposition
/// format 0.0.4). Pure: no I/O, no clock; `now_ms` becomes `scraped_at_ms`.
///
/// Known gauges, each taken across all its series (vLLM's data-parallel
/// engines report one series per engine, told apart by the `engine` label):
///   running   vllm:num_requests_running, else sglang:num_running_reqs (summed)
///   waiting   vllm:num_requests_waiting, else sglang:num_queue_reqs (summed)
///   kv_usage  vllm:kv_cache_usage_perc, else vllm:gpu_cache_usage_perc (the
///             name before vLLM 0.10), else sglang:token_usage. Averaged over
///             the series, not summed: each series is one engine's fraction
///             of its own, equally sized cache, so the mean is the fraction of
///             the whole and stays in 0..1.
/// A gauge with no series reads as 0. Every other metric is ignored.
///
/// Lines are `name{label="value",...} value [timestamp]`; `#` lines and
/// blank lines are skipped; label values may hold the escapes \\ \" \n and
/// any other byte, commas and braces included. Names in the quoted UTF-8
/// form (`{"name",...}`) are not recognised: kvgov does not ask for them.
///
/// Returns:
///   ResourceExhausted  the text is longer than `max_bytes`.
///   InvalidArgument    "line N: ..." for a malformed line of a known gauge
///                      (bad labels, a repeated label, a repeated series, a
///                      value that is not a number, NaN, infinite or
///                      negative, a bad timestamp, trailing text). A
///                      malformed line of any other metric is skipped.
///   NotFound           none of the known gauges has a series.
Result<router::ScrapedLoad> ParseEngineMetrics(std::string_view prometheus_text, int64_t now_ms,
                                               size_t max_bytes = 4 << 20);

/// The same, split over an engine's `ranks` data-parallel ranks (element r
/// is rank r's load), as one /metrics page reports them: a series labelled
/// with its rank (vLLM's `engine="r"`, SGLang's `dp_rank="r"`, r < ranks) is
/// that rank's; a series with no such label is the engine's as a whole and
/// is shared evenly, each rank taking 1/ranks of its counts and its cache
/// fraction as is. With ranks == 1 this is ParseEngineMetrics. Errors as
/// there, and InvalidArgument for ranks == 0.
Result<std::vector<router::ScrapedLoad>> ParseEngineMetricsByRank(std::string_view prometheus_text,
                                                                  int64_t now_ms, size_t ranks,
                                                                  size_t max_bytes = 4 << 20);

}  // namespace kvgov::connectors
