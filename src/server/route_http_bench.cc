// POST /v1/route over HTTP against the real daemon (kvgov::server::Server,
// in process, port 0, a temporary data dir), its index filled the way
// engines fill it: 64 vLLM-framed publishers on loopback, one per worker,
// publishing the fleet of route_bench_fleet.h (1 M resident blocks) through
// the daemon's own ZeroMQ ingest, durability and accounting. Then an 8k-token
// prompt is routed over one kept-alive connection, each call timed next to
// hashing the same prompt alone and to the HTTP floor: the same body posted
// on the same connection to a path the daemon does not route, which it reads
// and answers 404 at once. p50 / p99 come from the per-call latencies; the
// daemon's own time in the handler from its kvgov_route_latency_seconds.
//   cmake --build build-bench --target kvgov_server_bench
//   build-bench/src/server/kvgov_server_bench

#include <httplib.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "testing/bench_smoke.h"
#include "kvgov/codec/route_api.h"
#include "kvgov/index/block_key.h"
#include "kvgov/server/server.h"
#include "kvgov/sim/event_wire.h"
#include "testing/metric_value.h"
#include "testing/percentile.h"
#include "testing/route_bench_fleet.h"
#include "testing/scratch_dir.h"
#include "transport/zmq/bench_event_publisher.h"

namespace kvgov::server {
namespace {

using Clock = std::chrono::steady_clock;
using Fleet = bench::RouteFleet;
using Json = nlohmann::json;

constexpr size_t kEventsPerBatch = 4;

double Micros(Clock::duration elapsed) {
  return std::chrono::duration<double, std::micro>(elapsed).count();
}

// Each worker's events as the payloads its engine publishes, seq 0 upwards.
std::vector<std::vector<std::string>> EncodeFleet() {
  std::vector<std::vector<std::string>> payloads(Fleet::kWorkers);
  for (int w = 0; w < Fleet::kWorkers; ++w) {
    const std::vector<BlockStored> stored = Fleet::WorkerEvents(w);
    EngineEventBatch batch;
    batch.ts = 1.79e9;
    batch.dp_rank = 0;
    for (size_t i = 0; i < stored.size(); i += kEventsPerBatch) {
      const size_t count = std::min(kEventsPerBatch, stored.size() - i);
      batch.ts += 0.01;
      batch.events.assign(stored.begin() + static_cast<std::ptrdiff_t>(i),
                          stored.begin() + static_cast<std::ptrdiff_t>(i + count));
      // Only extra keys can fail to encode, and the fleet stores none.
      payloads[w].push_back(sim::EncodeEventBatch(batch, sim::WireEncoding::kMap).value());
    }
  }
  return payloads;
}

// True once GET /v1/workers shows every worker holding its share in hbm.
bool FleetResident(httplib::Client& client) {
  httplib::Result response = client.Get("/v1/workers");
  if (!response || response->status != 200) return false;
  const Json body = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || !body.contains("workers")) return false;
  int full = 0;
  static const Json::json_pointer kHbm("/blocks/hbm");
  for (const Json& worker : body["workers"]) {
    if (worker.value(kHbm, uint64_t{0}) == Fleet::kBlocksPerWorker) ++full;
  }
  return full == Fleet::kWorkers;
}

// The daemon's route histogram, as /metrics serves it: {sum, count}.
std::pair<double, double> RouteLatencySumCount(httplib::Client& client) {
  httplib::Result metrics = client.Get("/metrics");
  if (!metrics || metrics->status != 200) return {0, 0};
  return {test_support::MetricValue(metrics->body, "kvgov_route_latency_seconds_sum"),
          test_support::MetricValue(metrics->body, "kvgov_route_latency_seconds_count")};
}

void BM_HttpRouteVsHash(benchmark::State& state) {
  test_support::ScratchDir dir("kvgov_route_http_bench");
  zmq::context_t publisher_context(1);
  std::vector<std::unique_ptr<bench::EventPublisher>> publishers;
  ServerOptions options;
  options.port = 0;
  options.data_dir = (dir.path() / "data").string();
  for (int w = 0; w < Fleet::kWorkers; ++w) {
    publishers.push_back(std::make_unique<bench::EventPublisher>(publisher_context));
    ingest::EngineSpec engine;
    engine.id = Fleet::WorkerId(w);
    engine.events = publishers.back()->endpoint();
    engine.model = "llama";
    engine.block_size = Fleet::kBlockSize;
    options.engines.push_back(std::move(engine));
  }
  Result<std::unique_ptr<Server>> server = Server::Start(options);
  if (!server.ok()) {
    state.SkipWithError(server.status().ToString().c_str());
    return;
  }
  for (auto& publisher : publishers) {
    if (!publisher->WaitForSubscriber(std::chrono::seconds(10))) {
      state.SkipWithError("a worker's stream never subscribed");
      return;
    }
  }

  // Fill: every engine publishes its share; the daemon ingests it (decode,
  // index, durability log, accounting) on its stream threads.
  const std::vector<std::vector<std::string>> payloads = EncodeFleet();
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_keep_alive(true);
  client.set_tcp_nodelay(true);
  client.set_read_timeout(30, 0);
  const auto fill_started = Clock::now();
  for (int w = 0; w < Fleet::kWorkers; ++w) {
    for (size_t seq = 0; seq < payloads[w].size(); ++seq) {
      publishers[w]->Publish(seq, payloads[w][seq]);
    }
  }
  const auto fill_deadline = fill_started + std::chrono::seconds(300);
  while (!FleetResident(client)) {
    if (Clock::now() > fill_deadline) {
      state.SkipWithError("the daemon did not hold the whole fleet within 300 s");
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double fill_s = std::chrono::duration<double>(Clock::now() - fill_started).count();

  const std::vector<int64_t> prompt = Fleet::Prompt();
  // The token ids as JSON numbers and, on alternate calls, in the compact
  // form (route-api.md): base64 of little-endian uint32.
  const std::string body = Json({{"model", "llama"}, {"token_ids", prompt}}).dump();
  const std::string compact_body =
      Json({{"model", "llama"}, {"token_ids_b64", EncodeTokenIdsBase64(prompt)}}).dump();
  const index::BlockKeyHasher hasher;
  const index::ChainNamespace ns{"llama", "", 0};
  std::vector<double> route_us;
  std::vector<double> compact_us;
  std::vector<double> floor_us;
  std::vector<double> hash_us;
  std::string failure;
  bool compact = false;
  auto route_once = [&](bool record) -> bool {
    compact = !compact;
    // Hashed twice and the second pass timed: the client thread has just
    // woken from a blocking read, and its first pass runs on cold caches
    // (about twice the warm time here). The warm pass is the floor the
    // in-process benchmark measures too.
    benchmark::DoNotOptimize(index::RequestChain(hasher, ns, "", prompt, Fleet::kBlockSize).data());
    const auto started = Clock::now();
    std::vector<index::BlockKey> chain =
        index::RequestChain(hasher, ns, "", prompt, Fleet::kBlockSize);
    benchmark::DoNotOptimize(chain.data());
    const auto hashed = Clock::now();
    httplib::Result response =
        client.Post("/v1/route", compact ? compact_body : body, "application/json");
    const auto routed = Clock::now();
    if (!response || response->status != 200) {
      failure = response ? "POST /v1/route: " + std::to_string(response->status) + " " +
                               response->body.substr(0, 200)
                         : "POST /v1/route: " + httplib::to_string(response.error());
      return false;
    }
    const Json decision = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    if (!decision.is_object() ||
        decision.value("worker", "") != Fleet::WorkerId(Fleet::kDeepHolders - 1) ||
        decision.value("overlap_blocks", 0) != Fleet::kBestOverlap) {
      failure = "unexpected decision: " + response->body.substr(0, 200);
      return false;
    }
    // Released at once, so every call sees the same (idle) load.
    const std::string done = "/v1/route/" + decision.value("decision_id", "") + "/done";
    if (httplib::Result released = client.Post(done); !released || released->status != 200) {
      failure = "POST " + done + " failed";
      return false;
    }
    // The floor: what the HTTP stack alone costs this body, both ends.
    const auto posted = Clock::now();
    httplib::Result unrouted = client.Post("/v1/not-routed", body, "application/json");
    const auto answered = Clock::now();
    if (!unrouted || unrouted->status != 404) {
      failure = "POST /v1/not-routed: expected 404";
      return false;
    }
    if (record) {
      floor_us.push_back(Micros(answered - posted));
      hash_us.push_back(Micros(hashed - started));
      (compact ? compact_us : route_us).push_back(Micros(routed - hashed));
      state.SetIterationTime(std::chrono::duration<double>(routed - hashed).count());
    }
    return true;
  };

  for (int i = 0; i < 50 && failure.empty(); ++i) (void)route_once(false);
  // The handler's time over the recorded calls only, warm-up left out.
  const auto [warm_sum, warm_count] = RouteLatencySumCount(client);
  for (auto _ : state) {
    if (!failure.empty() || !route_once(true)) {
      state.SkipWithError(failure.c_str());
      break;
    }
  }
  // The daemon's own time in the route handler, from its start to the
  // decision (kvgov_route_latency_seconds), over the recorded calls.
  const auto [sum, count] = RouteLatencySumCount(client);
  const double handler_mean_us =
      count > warm_count ? 1e6 * (sum - warm_sum) / (count - warm_count) : 0;
  (*server)->Shutdown();
  if (state.error_occurred()) return;

  const double hash_p50 = bench::Percentile(hash_us, 0.50);
  const double route_p99 = bench::Percentile(route_us, 0.99);
  state.counters["http_p50_us"] = bench::Percentile(route_us, 0.50);
  state.counters["http_p99_us"] = route_p99;
  state.counters["hash_p50_us"] = hash_p50;
  state.counters["ratio_http_p99_vs_hash"] = route_p99 / hash_p50;
  state.counters["request_bytes"] = static_cast<double>(body.size());
  state.counters["compact_p50_us"] = bench::Percentile(compact_us, 0.50);
  state.counters["compact_p99_us"] = bench::Percentile(compact_us, 0.99);
  state.counters["compact_request_bytes"] = static_cast<double>(compact_body.size());
  state.counters["floor_p50_us"] = bench::Percentile(floor_us, 0.50);
  state.counters["floor_p99_us"] = bench::Percentile(floor_us, 0.99);
  state.counters["handler_mean_us"] = handler_mean_us;
  state.counters["fill_blocks_per_s"] =
      static_cast<double>(Fleet::kWorkers * Fleet::kBlocksPerWorker) / fill_s;
}
BENCHMARK(BM_HttpRouteVsHash)
    ->Iterations(bench::Sized(4000, 20))
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvgov::server
