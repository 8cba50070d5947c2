#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "kvgov/core/status.h"
#include "kvgov/simfleet/live_engine.h"

namespace kvgov::simfleet {

/// The model the demo's engines serve.
inline constexpr char kDemoModel[] = "sim-llama-3-8b";

/// The demo's engine number `index` (id sim-<index>) of the workload with
/// `seed`: the full workload's pool, Llama-3-8B's modeled prefill, 4x
/// faster than the GPU. `kvgov engines` starts the same ones.
LiveEngineOptions DemoEngineOptions(size_t index, uint64_t seed);

struct DemoOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8787;  // 0 picks a free port
  // The OpenAI-compatible gateway, on `host` (0 picks a free port).
  uint16_t gateway_port = 8788;
  // The demo keeps its state in a fresh directory under this root
  // (demo-<UTC time>), so a rerun starts clean and never touches older data.
  std::string data_root = "./kvgov-data";
  bool quick = false;  // a smaller trace, faster: for CI
  uint64_t seed = 1;
  FILE* out = stdout;  // the report and progress
};

/// What the demo saw, for its report and for tests.
struct DemoResult {
  std::string kvgov_url;
  std::string gateway_url;  // the OpenAI base URL: http://HOST:PORT/v1
  std::string data_dir;
  // One agent session's two chat turns through the gateway, as the engine
  // reported them: the second re-sends the first, so its prefix is cached.
  int64_t gateway_turn1_prompt_tokens = 0;
  int64_t gateway_turn2_prompt_tokens = 0;
  int64_t gateway_turn2_cached_tokens = 0;
  uint64_t requests = 0;
  // What the gateway saw of the workload (every request went through it):
  // its predictions against the engines' reports, prompt-token parity, and
  // the ride_engine saving by tenant, as kvgov accounted them.
  uint64_t gateway_predictions_scored = 0;
  uint64_t gateway_predictions_exact = 0;
  int64_t gateway_predicted_tokens = 0;
  int64_t gateway_engine_cached_tokens = 0;
  double gateway_tokenize_mismatches = 0;
  std::map<std::string, double> gateway_saved_tokens_by_tenant;
  double live_hit_rate = 0;    // kvgov routing the live fleet
  double live_ttft_p50_s = 0;  // modeled
  double live_ttft_p90_s = 0;
  double round_robin_hit_rate = 0;  // the same trace and engines, round-robin (simulated)
  double round_robin_ttft_p90_s = 0;
  // The last tenant's system prompt carries a timestamp at token 40, new
  // on every request: what kvgov's prefix diagnostics said of it.
  std::string breaker_tenant;
  std::string breaker_kind;  // "breaker" when it was found
  int64_t breaker_position_tokens = -1;
  int64_t breaker_avoidable_tokens = 0;  // per request
  uint64_t breaker_occurrences = 0;
  uint64_t quarantined_blocks = 0;
  std::string quarantine_verdict;  // the route verdict reason for the quarantined span
  std::string invalidation_state;  // "certified" when it all went through
  std::string certificate_id;
  std::string certificate_file;  // the certificate as served, saved for offline checks
  // A /v1/route body that hits (tenant-1's first transcript), saved for the
  // curl line the demo prints when it keeps running.
  std::string route_example_file;
  std::string issuer_public_key;      // hex, as GET /v1/issuer serves it
  bool certificate_verified = false;  // signature, issuer and journal anchor
  bool lease_credited_while_active = false;
  std::string lease_verdict_after;  // "expired_ttl" once the lease lapsed
  int64_t lease_expired_after_ms = 0;
};

/// `kvgov demo`: a simulated vLLM fleet, kvgov serving it in this process,
/// and a multi-tenant agent workload sent through kvgov's gateway as an
/// OpenAI client sends it (the tenant in X-Kvgov-Tenant); then
/// one quarantine with its invalidation certified and verified, and one
/// NIXL lease lapsing. The fleet and kvgov keep running until Stop.
///
/// Thread-safety: Run and Stop from one thread.
class Demo {
 public:
  Demo();
  ~Demo();
  Demo(const Demo&) = delete;
  Demo& operator=(const Demo&) = delete;

  /// Runs the whole script and prints its report. A step that fails stops
  /// the script with its error; what started keeps running until Stop.
  Result<DemoResult> Run(const DemoOptions& options);

  /// Stops kvgov and the fleet. Idempotent.
  void Stop();

 private:
  // Two chat turns of one agent session through the gateway; their usage
  // goes into `result` and the report.
  Status RunGatewaySession(FILE* out, DemoResult& result);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgov::simfleet
