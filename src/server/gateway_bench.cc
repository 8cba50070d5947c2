// The gateway against calling the engine directly, side by side in one run:
// two simulated vLLM engines (simfleet::LiveEngine, their prefill wait
// divided away so the engine answers at once), the real daemon in process
// with its gateway on port 0, and the same httplib client sending the same
// token-id completion straight to the engine and through the gateway.
//   cmake --build build-bench --target kvgov_gateway_bench
//   build-bench/src/server/kvgov_gateway_bench
//
// - TTFB: request sent to first body byte of a streamed completion, the
//   direct and gateway calls alternating; the tokenize call (a text prompt
//   on the engine's /tokenize) timed on its own, since a token-id prompt
//   skips it.
// - Throughput: 8 client threads, each with a kept-alive connection,
//   sending non-streamed completions for a fixed time, direct and gateway
//   alternating rounds.
// - Memory: heap (mallinfo2) and resident set growth while 24 long streams
//   are open, through the gateway minus the same streams direct, per
//   stream.
// - Handoff: TTFB through the gateway of a 1P1D fleet (prefill leg, the
//   lease journaled, decode leg, the pull) against a colocated fleet of
//   two, alternating, each engine's modeled work divided away.

#include <malloc.h>
#include <unistd.h>

#include <httplib.h>

#include <benchmark/benchmark.h>

#include <array>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "testing/bench_smoke.h"
#include "testing/scratch_dir.h"
#include "connectors/control_url.h"
#include "kvgov/ingest/engine_spec.h"
#include "kvgov/server/server.h"
#include "kvgov/simfleet/live_engine.h"
#include "testing/percentile.h"
#include "testing/ttfb_probe.h"

namespace kvgov::server {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

constexpr int kPromptTokens = 512;

double Micros(Clock::duration elapsed) {
  return std::chrono::duration<double, std::micro>(elapsed).count();
}

// Two engines, kvgov following and fronting them, a data dir removed at
// the end.
class GatewayFleet {
 public:
  // `token_interval` paces every generated token (0: as fast as it can).
  // Once started, `warm_body` is sent through the gateway and the engine
  // it went to is the one direct calls go to: both paths then find the
  // prefix cached.
  // `roles` are the two engines': both, or a prefill and a decode engine.
  Status Start(std::chrono::milliseconds token_interval, const std::string& warm_body,
               std::array<ingest::EngineRole, 2> roles = {ingest::EngineRole::kBoth,
                                                          ingest::EngineRole::kBoth},
               bool prefix_diagnostics = true) {
    dir_.emplace("kvgov_gateway_bench_" + std::to_string(next_fleet_++));
    ServerOptions options;
    options.port = 0;
    options.data_dir = (*dir_ / "data").string();
    options.gateway_host = "127.0.0.1";
    options.gateway_port = 0;
    options.prefix_diagnostics = prefix_diagnostics;
    for (int i = 0; i < 2; ++i) {
      simfleet::LiveEngineOptions engine_options;
      engine_options.id = i == 0 ? "w1" : "w2";
      engine_options.role = roles[i];
      engine_options.model = "llama";
      engine_options.pool.capacity_blocks = 4096;
      engine_options.pool.block_size = 16;
      engine_options.speedup = 1e9;
      engine_options.token_interval = token_interval;
      engine_options.http_threads = 32;
      KVGOV_ASSIGN_OR_RETURN(std::unique_ptr<simfleet::LiveEngine> engine,
                             simfleet::LiveEngine::Start(engine_options));
      KVGOV_ASSIGN_OR_RETURN(ingest::EngineSpec spec,
                             ingest::ParseEngineSpec(engine->EngineSpec()));
      options.engines.push_back(std::move(spec));
      engines_.push_back(std::move(engine));
    }
    KVGOV_ASSIGN_OR_RETURN(server_, Server::Start(options));
    KVGOV_RETURN_IF_ERROR(AwaitServing());
    KVGOV_ASSIGN_OR_RETURN(const size_t holder, Warm(warm_body));
    KVGOV_ASSIGN_OR_RETURN(direct_, connectors::ParseControlUrl(engines_[holder]->control_url()));
    return Status::Ok();
  }
  ~GatewayFleet() {
    // The daemon first: an engine stopping waits for the gateway's kept
    // connections to it.
    if (server_) server_->Shutdown();
    server_.reset();
    for (auto& engine : engines_) engine->Stop();
  }

  int gateway_port() const { return server_->gateway_port(); }
  // The engine that holds the warm-up prefix, for direct calls.
  const std::string& direct_host() const { return direct_.host; }
  int direct_port() const { return direct_.port; }

 private:
  // Until the gateway lists the model: its workers are live once their
  // event streams are followed, shortly after the start.
  Status AwaitServing() {
    httplib::Client gateway("127.0.0.1", gateway_port());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      httplib::Result models = gateway.Get("/v1/models");
      if (models && models->status == 200 && models->body.find("\"llama\"") != std::string::npos) {
        return Status::Ok();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return Status::Unavailable("the gateway listed no live worker of 'llama' within 10 s");
  }

  // The engine the gateway sends `body` to, once a first request has
  // stored it there and kvgov has seen the blocks.
  Result<size_t> Warm(const std::string& body) {
    httplib::Client gateway("127.0.0.1", gateway_port());
    // The model is listed once one of its workers is live; a handoff also
    // needs the decode worker, whose stream may be followed a moment later:
    // 503 until then.
    const auto live_deadline = Clock::now() + std::chrono::seconds(10);
    httplib::Result first = gateway.Post("/v1/completions", body, "application/json");
    while (first && first->status == 503 && Clock::now() < live_deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      first = gateway.Post("/v1/completions", body, "application/json");
    }
    if (!first || first->status != 200) {
      return Status::Unavailable("warm-up request failed: " +
                                 (first
                                      ? "HTTP " + std::to_string(first->status) + " " + first->body
                                      : httplib::to_string(first.error())));
    }
    const size_t holder = engines_[0]->received_salts().empty() ? 1 : 0;
    httplib::Client control("127.0.0.1", server_->port());
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline) {
      httplib::Result workers = control.Get("/v1/workers");
      if (workers && workers->status == 200) {
        const Json rows = Json::parse(workers->body, nullptr, /*allow_exceptions=*/false);
        uint64_t blocks = 0;
        if (rows.is_object()) {
          for (const Json& row : rows["workers"])
            blocks += row.value(Json::json_pointer("/blocks/hbm"), uint64_t{0});
        }
        if (blocks >= kPromptTokens / 16) return holder;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return Status::DeadlineExceeded("kvgov never saw the warm-up prompt's blocks");
  }

  static inline int next_fleet_ = 0;             // two fleets may run side by side
  std::optional<test_support::ScratchDir> dir_;  // removed after the daemon stops
  std::vector<std::unique_ptr<simfleet::LiveEngine>> engines_;
  std::unique_ptr<Server> server_;
  connectors::ControlEndpoint direct_;
};

// `stamp`, when set, replaces token 40: a timestamp in a system prompt.
std::string CompletionBody(bool stream, int max_tokens, int64_t first_token = 1000,
                           std::optional<int64_t> stamp = std::nullopt) {
  std::vector<int64_t> prompt(kPromptTokens);
  for (int i = 0; i < kPromptTokens; ++i) prompt[i] = first_token + i;
  if (stamp) prompt[40] = *stamp;
  return Json{
      {"model", "llama"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"stream", stream}}
      .dump();
}

using bench::TimeToFirstByte;

std::unique_ptr<httplib::Client> KeptAlive(const std::string& host, int port) {
  auto client = std::make_unique<httplib::Client>(host, port);
  client->set_keep_alive(true);
  client->set_tcp_nodelay(true);
  client->set_read_timeout(30, 0);
  return client;
}

void BM_GatewayTtfbVsDirect(benchmark::State& state) {
  const std::string body = CompletionBody(/*stream=*/true, /*max_tokens=*/4);
  GatewayFleet fleet;
  if (Status started = fleet.Start(std::chrono::milliseconds(0), body); !started.ok()) {
    state.SkipWithError(started.ToString().c_str());
    return;
  }
  std::unique_ptr<httplib::Client> direct = KeptAlive(fleet.direct_host(), fleet.direct_port());
  std::unique_ptr<httplib::Client> gateway = KeptAlive("127.0.0.1", fleet.gateway_port());

  std::string text;
  for (int i = 0; i < kPromptTokens; ++i) text += "word" + std::to_string(i) + " ";
  const std::string tokenize = Json{{"model", "llama"}, {"prompt", text}}.dump();

  std::vector<double> direct_us, gateway_us, tokenize_us;
  for (int i = 0; i < 50; ++i) {
    (void)TimeToFirstByte(*direct, "/v1/completions", body);
    (void)TimeToFirstByte(*gateway, "/v1/completions", body);
  }
  bool gateway_first = false;
  for (auto _ : state) {
    double via_direct = 0, via_gateway = 0;
    // Alternating which goes first, so neither always runs on warmer caches.
    if (gateway_first) via_gateway = TimeToFirstByte(*gateway, "/v1/completions", body);
    via_direct = TimeToFirstByte(*direct, "/v1/completions", body);
    if (!gateway_first) via_gateway = TimeToFirstByte(*gateway, "/v1/completions", body);
    gateway_first = !gateway_first;
    const auto tokenize_started = Clock::now();
    httplib::Result tokenized = direct->Post("/tokenize", tokenize, "application/json");
    const double via_tokenize = Micros(Clock::now() - tokenize_started);
    if (via_direct < 0 || via_gateway < 0 || !tokenized || tokenized->status != 200) {
      state.SkipWithError("a request failed");
      break;
    }
    direct_us.push_back(via_direct);
    gateway_us.push_back(via_gateway);
    tokenize_us.push_back(via_tokenize);
    state.SetIterationTime(via_gateway / 1e6);
  }
  if (state.error_occurred()) return;
  bench::ReportTtfbPair(state, direct_us, gateway_us);
  state.counters["tokenize_p50_us"] = bench::Percentile(tokenize_us, 0.50);
  state.counters["tokenize_p99_us"] = bench::Percentile(tokenize_us, 0.99);
}
BENCHMARK(BM_GatewayTtfbVsDirect)
    ->Iterations(bench::Sized(2000, 20))
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// What cache-breaker detection adds to a request: the same gateway with
// --prefix-diagnostics on and off, side by side, sent the same prompts, each
// with a new timestamp at token 40 (so the detector finds, and counts, a
// breaker on every request: its busiest path).
void BM_GatewayTtfbDetectionOnVsOff(benchmark::State& state) {
  GatewayFleet on, off;
  const std::string warm = CompletionBody(/*stream=*/true, /*max_tokens=*/1, 1000, 0);
  const std::array<ingest::EngineRole, 2> both = {ingest::EngineRole::kBoth,
                                                  ingest::EngineRole::kBoth};
  for (auto [fleet, detecting] : {std::pair{&on, true}, std::pair{&off, false}}) {
    if (Status started = fleet->Start(std::chrono::milliseconds(0), warm, both, detecting);
        !started.ok()) {
      state.SkipWithError(started.ToString().c_str());
      return;
    }
  }
  std::unique_ptr<httplib::Client> with = KeptAlive("127.0.0.1", on.gateway_port());
  std::unique_ptr<httplib::Client> without = KeptAlive("127.0.0.1", off.gateway_port());
  std::vector<double> on_us, off_us;
  int64_t stamp = 1;
  bool on_first = false;
  for (auto _ : state) {
    const std::string body = CompletionBody(/*stream=*/true, /*max_tokens=*/1, 1000, ++stamp);
    double via_on = 0, via_off = 0;
    if (on_first) via_on = TimeToFirstByte(*with, "/v1/completions", body);
    via_off = TimeToFirstByte(*without, "/v1/completions", body);
    if (!on_first) via_on = TimeToFirstByte(*with, "/v1/completions", body);
    on_first = !on_first;
    if (via_on < 0 || via_off < 0) {
      state.SkipWithError("a request failed");
      break;
    }
    on_us.push_back(via_on);
    off_us.push_back(via_off);
    state.SetIterationTime(via_on / 1e6);
  }
  if (state.error_occurred()) return;
  state.counters["on_ttfb_p50_us"] = bench::Percentile(on_us, 0.50);
  state.counters["off_ttfb_p50_us"] = bench::Percentile(off_us, 0.50);
  state.counters["on_ttfb_p99_us"] = bench::Percentile(on_us, 0.99);
  state.counters["off_ttfb_p99_us"] = bench::Percentile(off_us, 0.99);
  state.counters["added_p50_us"] = bench::Percentile(on_us, 0.50) - bench::Percentile(off_us, 0.50);
}
BENCHMARK(BM_GatewayTtfbDetectionOnVsOff)
    ->Iterations(bench::Sized(1000, 20))
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Completed requests in `duration` from `clients` threads, each on its own
// kept-alive connection to host:port.
double RequestsPerSecond(const std::string& host, int port, const std::string& body, int clients,
                         std::chrono::milliseconds duration, std::atomic<bool>* failed) {
  std::atomic<uint64_t> done{0};
  std::vector<std::thread> threads;
  const auto until = Clock::now() + duration;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      std::unique_ptr<httplib::Client> client = KeptAlive(host, port);
      while (Clock::now() < until) {
        httplib::Result result = client->Post("/v1/completions", body, "application/json");
        if (!result || result->status != 200) {
          failed->store(true);
          return;
        }
        done.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return static_cast<double>(done.load()) / std::chrono::duration<double>(duration).count();
}

void BM_GatewayThroughputVsDirect(benchmark::State& state) {
  constexpr int kClients = 8;
  constexpr auto kRound = std::chrono::milliseconds(2000);
  const std::string body = CompletionBody(/*stream=*/false, /*max_tokens=*/4);
  GatewayFleet fleet;
  if (Status started = fleet.Start(std::chrono::milliseconds(0), body); !started.ok()) {
    state.SkipWithError(started.ToString().c_str());
    return;
  }
  std::atomic<bool> failed{false};
  double direct = 0, gateway = 0;
  for (auto _ : state) {
    direct += RequestsPerSecond(fleet.direct_host(), fleet.direct_port(), body, kClients, kRound,
                                &failed);
    gateway +=
        RequestsPerSecond("127.0.0.1", fleet.gateway_port(), body, kClients, kRound, &failed);
  }
  if (failed.load()) {
    state.SkipWithError("a request failed");
    return;
  }
  const double rounds = static_cast<double>(state.iterations());
  state.counters["direct_req_per_s"] = direct / rounds;
  state.counters["gateway_req_per_s"] = gateway / rounds;
  state.counters["ratio_gateway_vs_direct_throughput"] = gateway / direct;
}
BENCHMARK(BM_GatewayThroughputVsDirect)
    ->Iterations(bench::Sized(3, 1))
    ->Unit(benchmark::kMillisecond);

void BM_HandoffTtfbVsColocated(benchmark::State& state) {
  const std::string body = CompletionBody(/*stream=*/true, /*max_tokens=*/4);
  GatewayFleet colocated;
  GatewayFleet disaggregated;
  Status started = colocated.Start(std::chrono::milliseconds(0), body);
  if (started.ok()) {
    started = disaggregated.Start(std::chrono::milliseconds(0), body,
                                  {ingest::EngineRole::kPrefill, ingest::EngineRole::kDecode});
  }
  if (!started.ok()) {
    state.SkipWithError(started.ToString().c_str());
    return;
  }
  std::unique_ptr<httplib::Client> one = KeptAlive("127.0.0.1", colocated.gateway_port());
  std::unique_ptr<httplib::Client> two = KeptAlive("127.0.0.1", disaggregated.gateway_port());
  for (int i = 0; i < 20; ++i) {
    (void)TimeToFirstByte(*one, "/v1/completions", body);
    (void)TimeToFirstByte(*two, "/v1/completions", body);
  }
  std::vector<double> colocated_us, handoff_us;
  bool handoff_first = false;
  for (auto _ : state) {
    double via_colocated = 0, via_handoff = 0;
    if (handoff_first) via_handoff = TimeToFirstByte(*two, "/v1/completions", body);
    via_colocated = TimeToFirstByte(*one, "/v1/completions", body);
    if (!handoff_first) via_handoff = TimeToFirstByte(*two, "/v1/completions", body);
    handoff_first = !handoff_first;
    if (via_colocated < 0 || via_handoff < 0) {
      state.SkipWithError("a request failed");
      break;
    }
    colocated_us.push_back(via_colocated);
    handoff_us.push_back(via_handoff);
    state.SetIterationTime(via_handoff / 1e6);
  }
  if (state.error_occurred()) return;
  state.counters["colocated_ttfb_p50_us"] = bench::Percentile(colocated_us, 0.50);
  state.counters["colocated_ttfb_p99_us"] = bench::Percentile(colocated_us, 0.99);
  state.counters["handoff_ttfb_p50_us"] = bench::Percentile(handoff_us, 0.50);
  state.counters["handoff_ttfb_p99_us"] = bench::Percentile(handoff_us, 0.99);
  state.counters["ratio_handoff_vs_colocated_p50"] =
      bench::Percentile(handoff_us, 0.50) / bench::Percentile(colocated_us, 0.50);
}
BENCHMARK(BM_HandoffTtfbVsColocated)
    ->Iterations(bench::Sized(500, 20))
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

size_t HeapBytes() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// Heap and resident growth while `streams` long streams are open on
// host:port, measured once every stream has its first chunk.
struct StreamsFootprint {
  double heap = 0;
  double resident = 0;
};
Result<StreamsFootprint> OpenStreams(const std::string& host, int port, int streams) {
  const size_t heap_before = HeapBytes();
  const size_t resident_before = ResidentBytes();
  std::atomic<int> started{0};
  std::atomic<bool> measured{false};
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int s = 0; s < streams; ++s) {
    threads.emplace_back([&, s] {
      httplib::Client client(host, port);
      client.set_read_timeout(30, 0);
      httplib::Request request;
      request.method = "POST";
      request.path = "/v1/completions";
      // The engine's most (4096 tokens, 20 s at 5 ms a token): far longer
      // than the measurement.
      request.body = CompletionBody(/*stream=*/true, /*max_tokens=*/4096, 100000 + s * 1000);
      request.set_header("Content-Type", "application/json");
      bool counted = false;
      request.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
        if (!counted) {
          counted = true;
          started.fetch_add(1);
        }
        return !measured.load();  // going away ends the stream
      };
      httplib::Result result = client.send(request);
      if (!counted || (result && result->status != 200)) failed.store(true);
    });
  }
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (started.load() < streams && !failed.load() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Let each stream settle into its steady state (buffers grown) first.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const StreamsFootprint footprint{
      static_cast<double>(HeapBytes()) - static_cast<double>(heap_before),
      static_cast<double>(ResidentBytes()) - static_cast<double>(resident_before)};
  measured.store(true);
  for (std::thread& thread : threads) thread.join();
  if (failed.load() || started.load() < streams) {
    return Status::Unavailable("not every stream started");
  }
  return footprint;
}

void BM_GatewayMemoryPerStream(benchmark::State& state) {
  constexpr int kStreams = 24;
  GatewayFleet fleet;
  // Streams that last: a token every 5 ms until the client goes away.
  if (Status started = fleet.Start(std::chrono::milliseconds(5),
                                   CompletionBody(/*stream=*/false, /*max_tokens=*/1));
      !started.ok()) {
    state.SkipWithError(started.ToString().c_str());
    return;
  }
  const std::string& engine_host = fleet.direct_host();
  const int engine_port = fleet.direct_port();
  // Once unmeasured, so the engines' pools and kvgov's index already hold
  // every stream's prompt when the measured rounds run.
  if (!OpenStreams(engine_host, engine_port, kStreams).ok() ||
      !OpenStreams("127.0.0.1", fleet.gateway_port(), kStreams).ok()) {
    state.SkipWithError("a stream did not start");
    return;
  }
  double heap = 0, resident = 0;
  for (auto _ : state) {
    Result<StreamsFootprint> direct = OpenStreams(engine_host, engine_port, kStreams);
    Result<StreamsFootprint> gateway = OpenStreams("127.0.0.1", fleet.gateway_port(), kStreams);
    if (!direct.ok() || !gateway.ok()) {
      state.SkipWithError("a stream did not start");
      return;
    }
    heap += (gateway->heap - direct->heap) / kStreams;
    resident += (gateway->resident - direct->resident) / kStreams;
  }
  const double rounds = static_cast<double>(state.iterations());
  state.counters["gateway_heap_bytes_per_stream"] = heap / rounds;
  state.counters["gateway_resident_bytes_per_stream"] = resident / rounds;
  state.counters["streams"] = kStreams;
}
BENCHMARK(BM_GatewayMemoryPerStream)->Iterations(bench::Sized(3, 1))->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvgov::server
