// kill -9 to serving, end to end: a real `kvgov serve` process follows 8
// engines (vLLM-framed ZeroMQ publishers on loopback) until it holds
// 1,310,720 blocks of each, 10,485,760 in all, and has snapshotted; it is
// killed with SIGKILL, and the same command is started again on the same
// data dir. Timed from the spawn of the second process to its ready file
// (written once recovery is done and the HTTP server listens), and on to
// GET /v1/workers answering with every block back. Takes about 3 GiB and a
// minute or two, so `make bench` leaves it out; run it on purpose:
//   build-bench/src/server/kvgov_recovery_bench
// KVGOV_BENCH_BINARY=path/to/kvgov measures another build of kvgov (an
// older one, side by side) with the same events and the same timing.
// KVGOV_BENCH_COPY_CRASHED_DIR=path copies the data dir the kill left there.
// KVGOV_BENCH_SERVE_ARGS="--flag value ..." adds `kvgov serve` flags.

#include <httplib.h>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "testing/bench_smoke.h"
#include "kvgov/sim/event_wire.h"
#include "kvgov/simfleet/child_process.h"
#include "testing/scratch_dir.h"
#include "transport/zmq/bench_event_publisher.h"

namespace kvgov::server {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

constexpr int kWorkers = 8;
constexpr int64_t kBlockSize = 16;
// x 8 = 10,485,760; 32,768 in all in the smoke.
const uint64_t kBlocksPerWorker = bench::Sized<uint64_t>(1'310'720, 4'096);
constexpr int kChainBlocks = 16;
constexpr size_t kEventsPerBatch = 4;  // 64 blocks a batch, as the ingest benchmark
// A snapshot every 2,000 batches (128,000 blocks): what loadgen runs with;
// the crash then leaves up to that many batches to replay from the log.
constexpr const char* kSnapshotEveryBatches = "2000";

std::string WorkerId(int worker) { return "w" + std::to_string(worker); }

// One worker's engine payloads, seq 0 upwards: 16-block chains of distinct
// Llama-3-vocabulary tokens under random engine hashes (vLLM without
// PYTHONHASHSEED), so no block is shared and every pair costs its own slots.
std::vector<std::string> WorkerPayloads(int worker) {
  std::mt19937_64 rng(0x7ec0 + static_cast<uint64_t>(worker));
  std::uniform_int_distribution<int64_t> token(0, 128255);
  std::vector<std::string> payloads;
  EngineEventBatch batch;
  batch.ts = 1.79e9;
  batch.dp_rank = 0;
  for (uint64_t stored = 0; stored < kBlocksPerWorker; stored += kChainBlocks) {
    BlockStored chain;
    chain.block_size = kBlockSize;
    chain.medium = "GPU";
    for (int b = 0; b < kChainBlocks; ++b) {
      chain.block_hashes.push_back(rng());
      for (int64_t t = 0; t < kBlockSize; ++t) chain.token_ids.push_back(token(rng));
    }
    batch.events.emplace_back(std::move(chain));
    if (batch.events.size() == kEventsPerBatch) {
      batch.ts += 0.01;
      // Only extra keys can fail to encode, and these chains have none.
      payloads.push_back(sim::EncodeEventBatch(batch, sim::WireEncoding::kMap).value());
      batch.events.clear();
    }
  }
  return payloads;
}

uint64_t ResidentBlocks(httplib::Client& client) {
  httplib::Result response = client.Get("/v1/workers");
  if (!response || response->status != 200) return 0;
  const Json body = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || !body.contains("workers")) return 0;
  uint64_t blocks = 0;
  static const Json::json_pointer kHbm("/blocks/hbm");
  for (const Json& worker : body["workers"]) blocks += worker.value(kHbm, uint64_t{0});
  return blocks;
}

// kvgov_store_pending_bytes from GET /metrics: what the store's writer has
// not written yet; -1 when it cannot be read.
double PendingStoreBytes(httplib::Client& client) {
  httplib::Result response = client.Get("/metrics");
  if (!response || response->status != 200) return -1;
  constexpr std::string_view kSample = "\nkvgov_store_pending_bytes ";
  const size_t at = response->body.find(kSample);
  if (at == std::string::npos) return -1;
  return std::atof(response->body.c_str() + at + kSample.size());
}

// A numeric field of the daemon's `recovery.done` log line (logfmt), or -1.
double RecoveryField(const std::filesystem::path& log, const std::string& field) {
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("event=recovery.done") == std::string::npos) continue;
    const size_t at = line.find(" " + field + "=");
    if (at == std::string::npos) return -1;
    return std::atof(line.c_str() + at + field.size() + 2);
  }
  return -1;
}

// The port in the ready file once it is written; 0 before.
int ReadyPort(const std::filesystem::path& ready) {
  std::ifstream in(ready);
  int port = 0;
  return in >> port ? port : 0;
}

// A process's peak resident set (VmHWM) in MiB, 0 when unreadable.
double PeakRssMib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  }
  return 0;
}

void BM_KillNineToServingTenMillion(benchmark::State& state) {
  const char* binary_override = std::getenv("KVGOV_BENCH_BINARY");
  const std::string binary = binary_override != nullptr ? binary_override : KVGOV_BINARY;
  test_support::ScratchDir dir("kvgov_recovery_bench");
  zmq::context_t context(1);
  std::vector<std::unique_ptr<bench::EventPublisher>> publishers;
  const std::filesystem::path ready = dir.path() / "ready";
  std::vector<std::string> args = {binary,
                                   "serve",
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--data-dir",
                                   (dir.path() / "data").string(),
                                   "--ready-file",
                                   ready.string(),
                                   "--snapshot-every-batches",
                                   kSnapshotEveryBatches};
  // More `kvgov serve` flags, space-separated (e.g. --snapshot-log-ratio 0),
  // to compare settings on the same fill.
  if (const char* extra = std::getenv("KVGOV_BENCH_SERVE_ARGS"); extra != nullptr) {
    std::istringstream words(extra);
    for (std::string word; words >> word;) args.push_back(word);
  }
  for (int w = 0; w < kWorkers; ++w) {
    publishers.push_back(std::make_unique<bench::EventPublisher>(context));
    args.push_back("--engine");
    args.push_back("id=" + WorkerId(w) + ",events=" + publishers.back()->endpoint() +
                   ",model=llama,block-size=" + std::to_string(kBlockSize) +
                   ",pool-blocks=" + std::to_string(kBlocksPerWorker));
  }
  // Starts the daemon and waits for its ready file; the port, or 0.
  auto start = [&](simfleet::ChildProcess& child, const std::string& log) {
    std::filesystem::remove(ready);
    Result<simfleet::ChildProcess> spawned = simfleet::ChildProcess::Spawn(args, log);
    if (!spawned.ok()) return 0;
    child = std::move(*spawned);
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (Clock::now() < deadline && child.Running()) {
      if (const int port = ReadyPort(ready); port > 0) return port;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return 0;
  };

  for (auto _ : state) {
    simfleet::ChildProcess first;
    const int first_port = start(first, (dir.path() / "first.log").string());
    if (first_port == 0) {
      state.SkipWithError("the first kvgov did not become ready (first.log)");
      return;
    }
    for (auto& publisher : publishers) {
      if (!publisher->WaitForSubscriber(std::chrono::seconds(20))) {
        state.SkipWithError("a worker's stream never subscribed");
        return;
      }
    }
    std::vector<std::vector<std::string>> payloads;
    for (int w = 0; w < kWorkers; ++w) payloads.push_back(WorkerPayloads(w));
    // The daemon's whole ingest path, durability included: from the first
    // batch published to every block resident.
    const auto fill_started = Clock::now();
    for (size_t seq = 0; seq < payloads[0].size(); ++seq) {
      for (int w = 0; w < kWorkers; ++w) publishers[w]->Publish(seq, payloads[w][seq]);
    }
    httplib::Client client("127.0.0.1", first_port);
    client.set_read_timeout(30, 0);
    const auto fill_deadline = Clock::now() + std::chrono::seconds(600);
    // Every block resident, and every batch handed to the store written
    // (docs/adr/0038): until then a kill -9 leaves the rest to the
    // engines' replay, which these publishers do not serve.
    // A kvgov from before the metric reads as having nothing pending.
    while (ResidentBlocks(client) != kWorkers * kBlocksPerWorker || PendingStoreBytes(client) > 0) {
      if (Clock::now() > fill_deadline || !first.Running()) {
        state.SkipWithError("the first kvgov did not hold and store every block within 600 s");
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const double fill_s = std::chrono::duration<double>(Clock::now() - fill_started).count();
    // Every batch is logged as it is applied, and the snapshots before the
    // last are on disk: what a crash leaves. No clean shutdown.
    first.Kill();
    if (const char* copy = std::getenv("KVGOV_BENCH_COPY_CRASHED_DIR"); copy != nullptr && *copy) {
      // The crashed state, to restart by hand (under a profiler) as often
      // as needed: copy the copy, then `kvgov serve` with the same flags.
      std::filesystem::copy(dir.path() / "data", copy, std::filesystem::copy_options::recursive);
    }

    simfleet::ChildProcess second;
    const auto restarted = Clock::now();
    const int port = start(second, (dir.path() / "second.log").string());
    const auto serving = Clock::now();
    if (port == 0) {
      state.SkipWithError("the restarted kvgov did not become ready (second.log)");
      return;
    }
    httplib::Client again("127.0.0.1", port);
    again.set_read_timeout(30, 0);
    const uint64_t blocks = ResidentBlocks(again);
    const auto answered = Clock::now();
    // The restart's peak: recovery's buffers and the rebuilt index.
    const double peak_rss_mib = PeakRssMib(second.pid());
    second.Terminate(std::chrono::seconds(10));
    if (blocks != kWorkers * kBlocksPerWorker) {
      state.SkipWithError(("restarted with " + std::to_string(blocks) + " blocks").c_str());
      return;
    }
    state.SetIterationTime(std::chrono::duration<double>(serving - restarted).count());
    state.counters["kill9_to_ready_s"] = std::chrono::duration<double>(serving - restarted).count();
    state.counters["kill9_to_all_blocks_s"] =
        std::chrono::duration<double>(answered - restarted).count();
    state.counters["blocks"] = static_cast<double>(blocks);
    state.counters["restart_peak_rss_mib"] = peak_rss_mib;
    state.counters["ingest_with_store_blocks_per_s"] = static_cast<double>(blocks) / fill_s;
    // The daemon's own account: the part of the restart that is recovery,
    // what came from the snapshots and how many logged batches it replayed.
    const std::filesystem::path log = dir.path() / "second.log";
    state.counters["recovery_ms"] = RecoveryField(log, "ms");
    state.counters["snapshot_blocks"] = RecoveryField(log, "snapshot_blocks");
    state.counters["logged_batches"] = RecoveryField(log, "logged_batches");
  }
}
BENCHMARK(BM_KillNineToServingTenMillion)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvgov::server
