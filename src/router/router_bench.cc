// Route latency for an 8k-token prompt against 64 workers holding 1 M
// resident blocks (route_bench_fleet.h), next to the cost of hashing the
// same prompt alone: every route must at least compute the prompt's block
// keys, so the hash is the floor. Each iteration times both, back to back,
// and the p50 / p99 come from the recorded per-call latencies. Beside them,
// what this machine's pauses make of code as long as the route
// (testing/machine_tail.h): a route's p99 is judged against that.
//   cmake --build build-bench --target kvgov_router_bench
//   build-bench/src/router/kvgov_router_bench

#include <benchmark/benchmark.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "testing/bench_smoke.h"
#include "kvgov/governance/governance_gate.h"
#include "kvgov/index/block_key.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/router/router.h"
#include "kvgov/router/worker_status.h"
#include "testing/machine_tail.h"
#include "testing/percentile.h"
#include "testing/route_bench_fleet.h"

namespace kvgov::router {
namespace {

using Clock = std::chrono::steady_clock;
using Fleet = bench::RouteFleet;

// Built once per process and shard count: filling 1 M blocks takes about a
// second.
struct FleetState {
  explicit FleetState(size_t shards) : index(index::BlockKeyHasher(), shards) {}
  index::ResidencyIndex index;
  WorkerStatusTable status;
  // As the daemon routes: through the governance gate, here with nothing
  // quarantined, leased or pending, so it refuses nothing but is consulted.
  governance::GovernanceGate gate;
  std::vector<int64_t> prompt = Fleet::Prompt();
  Status built = Status::Ok();
};

const FleetState& SharedFleet(size_t shards) {
  static std::map<size_t, std::unique_ptr<FleetState>> fleets;
  std::unique_ptr<FleetState>& fleet = fleets[shards];
  if (fleet) return *fleet;
  fleet = [shards] {
    auto state = std::make_unique<FleetState>(shards);
    for (int w = 0; w < Fleet::kWorkers && state->built.ok(); ++w) {
      const std::string id = Fleet::WorkerId(w);
      state->built = state->index.AddWorker(id, "llama", Fleet::kBlockSize);
      if (state->built.ok()) state->built = state->status.Add(id, /*probed=*/false);
      for (const BlockStored& event : Fleet::WorkerEvents(w)) {
        if (!state->built.ok()) break;
        state->built = state->index.Apply(id, event).status();
      }
    }
    if (state->built.ok() &&
        state->index.ResidentPairs() != Fleet::kWorkers * Fleet::kBlocksPerWorker) {
      state->built = Status::Internal("the fleet's index does not hold 1,048,576 blocks");
    }
    return state;
  }();
  return *fleet;
}

double Micros(Clock::duration elapsed) {
  return std::chrono::duration<double, std::micro>(elapsed).count();
}

// Args: gate (0 = the router alone; 1 = through the governance gate, as the
// daemon routes), the index's shards (docs/adr/0027; the fleet's 64
// workers alternate between two), and decisions of the same prompt held in
// flight, still prefilling, that each route compares its chain with
// (docs/adr/0037; 128 is as many as a route compares), and the cost model
// (0: as before issue 42, without cache pressure or prefilling credit; 1:
// the defaults). Manual time is the route's.
void BM_RouteVsHash(benchmark::State& state) {
  const FleetState& fleet = SharedFleet(static_cast<size_t>(state.range(1)));
  if (!fleet.built.ok()) {
    state.SkipWithError(fleet.built.ToString().c_str());
    return;
  }
  RouteWeights weights;
  if (state.range(3) == 0) {
    weights.cache_pressure_weight = 0;
    weights.max_prefilling_blocks = 0;
  }
  Router router(&fleet.index, &fleet.status, weights, state.range(0) != 0 ? &fleet.gate : nullptr);
  RouteRequest request;
  request.model = "llama";
  request.token_ids = fleet.prompt;
  const index::ChainNamespace ns{"llama", "", 0};
  const int64_t held = state.range(2);
  for (int64_t i = 0; i < held; ++i) {
    if (!router.Route(request, "", "held-" + std::to_string(i), 0).ok()) {
      state.SkipWithError("a held decision was refused");
      return;
    }
  }

  std::vector<double> route_us;
  std::vector<double> hash_us;
  std::vector<double> warm_route_us;
  uint64_t next_id = 0;
  auto route_once = [&](bool record) -> bool {
    std::string id = "d" + std::to_string(next_id++);
    const auto started = Clock::now();
    std::vector<index::BlockKey> chain =
        index::RequestChain(fleet.index.hasher(), ns, "", fleet.prompt, Fleet::kBlockSize);
    benchmark::DoNotOptimize(chain.data());
    const auto hashed = Clock::now();
    Result<RouteDecision> decision = router.Route(request, "", std::move(id), 0);
    const auto routed = Clock::now();
    if (!decision.ok() || decision->candidates.size() != static_cast<size_t>(Fleet::kWorkers)) {
      return false;
    }
    // With none held, the deepest holder wins on what it holds.
    if (held == 0 && (decision->worker != Fleet::WorkerId(Fleet::kDeepHolders - 1) ||
                      decision->overlap_blocks != static_cast<uint64_t>(Fleet::kBestOverlap))) {
      return false;
    }
    // Released at once, so every call sees the same (idle) load.
    (void)router.Done(decision->decision_id);
    if (record) {
      hash_us.push_back(Micros(hashed - started));
      route_us.push_back(Micros(routed - hashed));
      state.SetIterationTime(std::chrono::duration<double>(routed - hashed).count());
    } else {
      warm_route_us.push_back(Micros(routed - hashed));
    }
    return true;
  };

  for (int i = 0; i < 100; ++i) (void)route_once(false);  // warm caches and allocator
  // After each route, a loop of fixed work as long as the warm route's
  // median: what this machine's own tail makes of that length, in the
  // same conditions (machine_tail.h).
  bench::MachineTail tail(bench::Percentile(warm_route_us, 0.50));
  for (auto _ : state) {
    if (!route_once(true)) {
      state.SkipWithError("the route did not pick w07 (448 blocks) among 64 candidates");
      break;
    }
    tail.Sample();
  }
  if (state.error_occurred()) return;
  const double hash_p50 = bench::Percentile(hash_us, 0.50);
  const double route_p99 = bench::Percentile(route_us, 0.99);
  state.counters["route_p50_us"] = bench::Percentile(route_us, 0.50);
  state.counters["route_p99_us"] = route_p99;
  state.counters["hash_p50_us"] = hash_p50;
  state.counters["hash_p99_us"] = bench::Percentile(hash_us, 0.99);
  state.counters["ratio_p99_vs_hash"] = route_p99 / hash_p50;
  state.counters["tail_p50_us"] = tail.p50_us();
  state.counters["tail_p99_us"] = tail.p99_us();
}
BENCHMARK(BM_RouteVsHash)
    ->ArgNames({"gate", "shards", "held", "model"})
    ->Args({0, 1, 0, 1})
    ->Args({1, 1, 0, 0})
    ->Args({1, 1, 0, 1})
    ->Args({1, 2, 0, 1})
    ->Args({1, 1, 128, 1})
    ->Iterations(bench::Sized(2000, 20))
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The machine's own tail at each length, without a route: a loop of fixed
// work whose median is the argument (in microseconds), 2,000 times. Where
// its p99 leaves the median is where a p99 target stops being a property
// of the code timed (docs/benchmarks.md).
void BM_MachineTail(benchmark::State& state) {
  bench::MachineTail tail(static_cast<double>(state.range(0)));
  for (auto _ : state) tail.Sample();
  state.counters["tail_p50_us"] = tail.p50_us();
  state.counters["tail_p99_us"] = tail.p99_us();
}
BENCHMARK(BM_MachineTail)
    ->ArgName("median_us")
    ->DenseRange(4, 20, 2)
    ->Iterations(bench::Sized(2000, 20));

}  // namespace
}  // namespace kvgov::router
