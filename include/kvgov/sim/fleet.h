#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvgov/core/status.h"
#include "kvgov/router/router.h"
#include "kvgov/sim/block_pool.h"
#include "kvgov/sim/event_wire.h"
#include "kvgov/sim/prefill_cost.h"
#include "kvgov/sim/workload.h"

namespace kvgov::sim {

/// One simulated engine in virtual time: its block pool and a FIFO prefill
/// queue. Prefills run one at a time (prefill is compute-bound, so batching
/// them does not raise an engine's token throughput); decode is not
/// modeled, so TTFT is the queueing wait plus the prefill itself.
///
/// Not thread-safe: one owner drives it.
class EngineModel {
 public:
  EngineModel(BlockPoolOptions pool, ModelShape shape);

  struct Served {
    PrefillOutcome prefill;
    double start_s = 0;
    double finish_s = 0;
    double ttft_s = 0;
  };
  /// Serves a request arriving at `arrival_s` (which must not precede an
  /// earlier call's): it waits for the queue, then prefills what the pool
  /// misses. The pool changes at once; FIFO order makes that exact, as a
  /// later request on this engine starts only after this one finished.
  Served Serve(uint64_t request_id, double arrival_s, std::span<const int64_t> tokens,
               std::string_view cache_salt);

  /// Requests finished by `now_s` as (finish_s, id), in finishing order;
  /// they stop counting as outstanding.
  std::vector<std::pair<double, uint64_t>> PopFinished(double now_s);
  /// Requests queued or prefilling (after PopFinished for the same time).
  size_t outstanding() const { return queue_.size(); }
  double busy_until_s() const { return busy_until_s_; }

  const BlockPool& pool() const { return pool_; }
  BlockPool& mutable_pool() { return pool_; }
  const PrefillCostModel& cost() const { return cost_; }

 private:
  BlockPool pool_;
  PrefillCostModel cost_;
  std::deque<std::pair<double, uint64_t>> queue_;  // (finish_s, id), finishing order
  double busy_until_s_ = 0;
};

struct FleetOptions {
  int engines = 4;
  size_t capacity_blocks = 4096;  // per engine
  int64_t block_size = 16;
  ModelShape shape = ModelShape::kLlama3_8B;
  std::string model = "sim-model";
  WireEncoding encoding = WireEncoding::kMap;
  uint64_t seed = 1;  // each engine's hash seed derives from it
  // Tenants' cache salts are router::TenantCacheSalt(secret, tenant), the
  // same salts kvgov hands out, whichever policy routes.
  std::string tenant_secret = "kvgov-simulator";
};

/// The engines of one simulated run. Not thread-safe.
class Fleet {
 public:
  explicit Fleet(const FleetOptions& options);

  const FleetOptions& options() const { return options_; }
  size_t size() const { return engines_.size(); }
  const EngineModel& engine(size_t i) const { return engines_[i]; }
  EngineModel& mutable_engine(size_t i) { return engines_[i]; }
  /// "sim-0", "sim-1", ...: the worker ids kvgov knows the engines by.
  static std::string WorkerId(size_t engine);
  /// The tenant's cache salt; "" for no tenant.
  std::string CacheSalt(std::string_view tenant) const;

 private:
  FleetOptions options_;
  std::vector<EngineModel> engines_;
};

/// How requests are placed. A policy sees the fleet as it chooses; policies
/// that follow the engines' event streams get every payload published.
class RoutingPolicy {
 public:
  virtual ~RoutingPolicy() = default;
  virtual std::string_view name() const = 0;
  /// The engine for `request`, arriving now (its arrival_s).
  virtual Result<size_t> Choose(const SimRequest& request, std::string_view cache_salt,
                                const Fleet& fleet) = 0;
  /// An engine published this payload (an encoded EventBatch).
  virtual Status Observe(size_t /*engine*/, std::string_view /*payload*/) {
    return Status::Ok();
  }
  /// The request's prefill finished.
  virtual void Finished(uint64_t /*request_id*/) {}
};

std::unique_ptr<RoutingPolicy> MakeRoundRobinPolicy();
std::unique_ptr<RoutingPolicy> MakeRandomPolicy(uint64_t seed);
/// Fewest outstanding requests; ties rotate.
std::unique_ptr<RoutingPolicy> MakeLeastLoadPolicy();
/// kvgov's cost computed from perfect knowledge: every pool's exact
/// contents and every queue's exact remaining work. It picks the lowest
/// queueing wait + `overlap_weight` x the prefill time of what the engine
/// misses, so kvgov's distance from it is what kvgov loses by seeing the
/// fleet only through event streams and its own decisions. (With weight 1
/// it is the greedy lowest-TTFT choice, which scatters hot prefixes.)
std::unique_ptr<RoutingPolicy> MakeOraclePolicy(double overlap_weight);
/// kvgov's own router in process: a residency index fed only by the
/// engines' encoded event streams (decoded by kvgov's adapter, as the
/// daemon does), routed by router::Router with `weights`; decisions are
/// released when their prefill finishes.
std::unique_ptr<RoutingPolicy> MakeKvgovPolicy(const FleetOptions& fleet,
                                               router::RouteWeights weights);

/// Names accepted by MakePolicy: kvgov (routing with `weights`),
/// round-robin, random (seeded with `seed`), least-load, oracle (with the
/// weights' overlap_weight).
Result<std::unique_ptr<RoutingPolicy>> MakePolicy(std::string_view name,
                                                  const FleetOptions& fleet, uint64_t seed,
                                                  const router::RouteWeights& weights = {});

/// What one policy did with one trace.
struct PolicyReport {
  std::string policy;
  uint64_t requests = 0;
  uint64_t prompt_blocks = 0;
  uint64_t hit_blocks = 0;
  int64_t prompt_tokens = 0;
  int64_t computed_tokens = 0;  // prefill tokens computed
  double ttft_p50_s = 0;
  double ttft_p90_s = 0;
  double ttft_p99_s = 0;
  double ttft_mean_s = 0;
  std::vector<double> busy_s_per_engine;  // prefill seconds each engine served
  // Busiest engine's prefill time over the mean: 1.0 is perfectly even.
  double load_spread = 0;

  double hit_rate() const {
    return prompt_blocks == 0 ? 0 : static_cast<double>(hit_blocks) / static_cast<double>(prompt_blocks);
  }
};

/// What happened to one request.
struct RequestOutcome {
  size_t engine = 0;
  uint64_t prompt_blocks = 0;
  uint64_t hit_blocks = 0;
  int64_t prompt_tokens = 0;
  int64_t computed_tokens = 0;
  double prefill_s = 0;  // modeled
  double ttft_s = 0;     // modeled: queueing wait + prefill
};

/// Totals, TTFT percentiles (nearest rank) and load spread of outcomes on
/// a fleet of `engines`.
PolicyReport Summarize(std::string policy, std::span<const RequestOutcome> outcomes,
                       size_t engines);

/// Runs the trace through a fresh fleet with the policy choosing. Fails
/// when the policy fails or names an engine the fleet does not have.
Result<PolicyReport> RunTrace(std::span<const SimRequest> trace, const FleetOptions& fleet,
                              RoutingPolicy& policy);

/// A fixed-width table of reports, one row per policy, for people.
std::string FormatReports(std::span<const PolicyReport> reports);

}  // namespace kvgov::sim
