#include "kvgov/simfleet/loadgen.h"

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "kvgov/core/mutex.h"
#include "kvgov/simfleet/child_process.h"
#include "kvgov/simfleet/live_engine.h"
#include "simfleet/http_json.h"

namespace kvgov::simfleet {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

constexpr const char* kModel = "loadgen-model";
constexpr int kGroups = 64;
constexpr int64_t kGroupTokens = 1024;
constexpr int64_t kQuestionTokens = 256;
constexpr int kQuarantinedGroups = 8;  // bounded, so quarantine state stays bounded

int64_t RssKib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return 0;
}

// Latencies from several threads.
class Latencies {
 public:
  void Add(Clock::duration latency) {
    MutexLock lock(mu_);
    ms_.push_back(std::chrono::duration<double, std::milli>(latency).count());
  }
  double Percentile(double q) {
    MutexLock lock(mu_);
    if (ms_.empty()) return 0;
    std::sort(ms_.begin(), ms_.end());
    const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(ms_.size())));
    return ms_[std::clamp<size_t>(rank, 1, ms_.size()) - 1];
  }

 private:
  Mutex mu_;
  std::vector<double> ms_ KVGOV_GUARDED_BY(mu_);
};

std::vector<int64_t> RandomTokens(std::mt19937_64& random, int64_t count) {
  std::vector<int64_t> tokens(static_cast<size_t>(count));
  for (int64_t& token : tokens) token = static_cast<int64_t>(random() % 32000);
  return tokens;
}

}  // namespace

Result<LoadgenReport> RunLoadgen(const LoadgenOptions& options) {
  if (options.engines <= 0 || !(options.duration_s > 0) || options.route_threads < 0 ||
      options.batches_per_s_per_engine < 0 || options.governance_every_ms <= 0) {
    return Status::InvalidArgument(
        "loadgen: engines, duration and governance interval must be positive");
  }
  std::string binary = options.kvgov_binary;
  if (binary.empty()) {
    std::error_code error;
    binary = std::filesystem::read_symlink("/proc/self/exe", error).string();
    if (error) return Status::IOError("loadgen: cannot find its own executable");
  }
  std::error_code made;
  std::filesystem::create_directories(options.data_dir, made);
  if (made) return Status::IOError("loadgen: cannot create " + options.data_dir);

  // The engines, then the daemon following them.
  std::vector<std::unique_ptr<LiveEngine>> engines;
  for (int i = 0; i < options.engines; ++i) {
    LiveEngineOptions engine;
    engine.id = "load-" + std::to_string(i);
    engine.model = kModel;
    engine.pool.capacity_blocks = 4096;
    engine.pool.hash_seed = options.seed * 7919 + static_cast<uint64_t>(i);
    KVGOV_ASSIGN_OR_RETURN(std::unique_ptr<LiveEngine> live, LiveEngine::Start(engine));
    engines.push_back(std::move(live));
  }
  const std::string ready = options.data_dir + ".ready";
  std::filesystem::remove(ready, made);
  std::vector<std::string> args = {binary,
                                   "serve",
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--data-dir",
                                   options.data_dir,
                                   "--ready-file",
                                   ready,
                                   "--probe-interval-ms",
                                   "200",
                                   "--snapshot-every-batches",
                                   "2000"};
  for (const auto& engine : engines) {
    args.emplace_back("--engine");
    args.push_back(engine->EngineSpec());
  }
  const std::string log = options.data_dir + ".log";
  // The daemon under load, in its own process; killed if still running when
  // this returns.
  KVGOV_ASSIGN_OR_RETURN(ChildProcess daemon, ChildProcess::Spawn(args, log));
  int port = 0;
  const Clock::time_point ready_deadline = Clock::now() + std::chrono::seconds(30);
  while (port <= 0 && Clock::now() < ready_deadline) {
    if (!daemon.Running()) return Status::Unavailable("loadgen: kvgov exited at start; see " + log);
    std::ifstream(ready) >> port;
    if (port <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (port <= 0) return Status::Unavailable("loadgen: kvgov did not become ready; see " + log);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  std::fprintf(options.out, "loadgen: kvgov (pid %d) at %s, %d engines, %.0f s\n",
               static_cast<int>(daemon.pid()), url.c_str(), options.engines, options.duration_s);

  // Shared group prompts: routes hit what the engines hold.
  std::mt19937_64 seeding(options.seed);
  std::vector<std::vector<int64_t>> groups;
  groups.reserve(kGroups);
  for (int g = 0; g < kGroups; ++g) groups.push_back(RandomTokens(seeding, kGroupTokens));

  LoadgenReport report;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> batches{0}, stored{0}, removed{0}, routes{0}, route_errors{0};
  std::atomic<uint64_t> governance_ok{0}, governance_errors{0}, quarantines_ok{0};
  Latencies route_latency;
  Latencies governance_latency;
  std::vector<std::thread> threads;

  for (size_t e = 0; e < engines.size(); ++e) {
    threads.emplace_back([&, e] {
      std::mt19937_64 random(options.seed * 1000 + e);
      const double rate = options.batches_per_s_per_engine;
      const auto period = rate > 0 ? std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(1.0 / rate))
                                   : Clock::duration::zero();
      Clock::time_point next = Clock::now();
      while (!stop.load()) {
        std::vector<int64_t> prompt = groups[random() % groups.size()];
        std::vector<int64_t> question = RandomTokens(random, kQuestionTokens);
        prompt.insert(prompt.end(), question.begin(), question.end());
        const sim::PrefillOutcome outcome = engines[e]->Prefill(prompt, "");
        if (!outcome.events.empty()) batches.fetch_add(1);
        for (const EngineEvent& event : outcome.events) {
          if (const auto* blocks = std::get_if<BlockStored>(&event)) {
            stored.fetch_add(blocks->block_hashes.size());
          } else if (const auto* gone = std::get_if<BlockRemoved>(&event)) {
            removed.fetch_add(gone->block_hashes.size());
          }
        }
        if (period != Clock::duration::zero()) {
          next += period;
          std::this_thread::sleep_until(next);
        }
      }
    });
  }
  for (int r = 0; r < options.route_threads; ++r) {
    threads.emplace_back([&, r] {
      httplib::Client client(url);
      TuneForRequests(client);
      std::mt19937_64 random(options.seed * 2000 + static_cast<uint64_t>(r));
      while (!stop.load()) {
        std::vector<int64_t> prompt = groups[random() % groups.size()];
        prompt.resize(prompt.size() + 32, 1);
        const Clock::time_point start = Clock::now();
        Result<Json> decision = PostJson(client, "POST /v1/route", "/v1/route",
                                         {{"model", kModel}, {"token_ids", prompt}});
        route_latency.Add(Clock::now() - start);
        if (!decision.ok()) {
          route_errors.fetch_add(1);
          continue;
        }
        routes.fetch_add(1);
        (void)client.Post("/v1/route/" + decision->value("decision_id", "") + "/done", "",
                          "application/json");
      }
    });
  }
  threads.emplace_back([&] {
    httplib::Client client(url);
    TuneForRequests(client);
    std::mt19937_64 random(options.seed * 3000);
    for (uint64_t i = 0; !stop.load(); ++i) {
      const bool quarantine = i % 2 == 0;
      // A lease is granted and completed in two calls, so lease state stays
      // bounded; quarantines reuse a few spans for the same reason.
      const Json body = quarantine ? Json{{"model", kModel},
                                          {"token_ids", groups[random() % kQuarantinedGroups]},
                                          {"reason", "loadgen"}}
                                   : Json{{"events",
                                           {{{"type", "nixl_lease"},
                                             {"lease_id", "lease-" + std::to_string(i / 4)},
                                             {"event", i % 4 == 1 ? "create" : "transfer_complete"},
                                             {"role", "prefill_pin"},
                                             {"remote_engine", "load-0"},
                                             {"ttl_ms", 60000}}}}};
      const Clock::time_point start = Clock::now();
      Result<Json> answer = quarantine
                                ? PostJson(client, "POST /v1/quarantine", "/v1/quarantine", body)
                                : PostJson(client, "POST /v1/events", "/v1/events", body);
      governance_latency.Add(Clock::now() - start);
      if (answer.ok()) {
        governance_ok.fetch_add(1);
        if (quarantine) quarantines_ok.fetch_add(1);
      } else {
        governance_errors.fetch_add(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(options.governance_every_ms));
    }
  });

  // Sample the daemon's memory while the load runs.
  const Clock::time_point started = Clock::now();
  const auto duration = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options.duration_s));
  bool warm_taken = false;
  while (Clock::now() - started < duration) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const int64_t rss = RssKib(daemon.pid());
    report.rss_peak_kib = std::max(report.rss_peak_kib, rss);
    if (!warm_taken && Clock::now() - started >= duration / 3) {
      report.rss_warm_kib = rss;
      warm_taken = true;
    }
  }
  stop = true;
  for (std::thread& thread : threads) thread.join();
  report.duration_s = std::chrono::duration<double>(Clock::now() - started).count();
  report.rss_end_kib = RssKib(daemon.pid());

  // Checks.
  httplib::Client client(url);
  if (!daemon.Running()) report.failures.push_back("the daemon died under load; see " + log);
  // Every engine's pool, exactly, once kvgov has caught up.
  std::string residency_error;
  const Clock::time_point catch_up = Clock::now() + std::chrono::seconds(20);
  do {
    residency_error.clear();
    Result<Json> workers = GetJson(client, "/v1/workers");
    if (!workers.ok()) {
      residency_error = workers.status().message();
    } else {
      for (const Json& worker : (*workers)["workers"]) {
        const std::string id = worker.value("id", "");
        auto engine = std::find_if(engines.begin(), engines.end(),
                                   [&](const auto& e) { return e->id() == id; });
        if (engine == engines.end()) continue;
        const uint64_t held = worker["blocks"].value("hbm", uint64_t{0});
        const int64_t last_seq = worker.value("last_seq", int64_t{-1});
        const uint64_t expected = (*engine)->resident_blocks();
        const int64_t expected_seq = static_cast<int64_t>((*engine)->next_seq()) - 1;
        if (held != expected || last_seq != expected_seq) {
          residency_error = id + " holds " + std::to_string(held) + " blocks at seq " +
                            std::to_string(last_seq) + "; its engine holds " +
                            std::to_string(expected) + " at seq " + std::to_string(expected_seq);
        }
      }
    }
    if (residency_error.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (Clock::now() < catch_up);
  if (!residency_error.empty()) report.failures.push_back("residency: " + residency_error);
  // Every acknowledged quarantine is in the journal.
  uint64_t journaled = 0;
  for (uint64_t since = 1;;) {
    Result<Json> page =
        GetJson(client, "/v1/journal?since=" + std::to_string(since) + "&limit=1000");
    if (!page.ok()) {
      report.failures.push_back("journal: " + page.status().message());
      break;
    }
    for (const Json& row : (*page)["rows"]) journaled += row.value("kind", "") == "quarantine";
    if (!page->contains("next_since")) break;
    since = (*page)["next_since"].get<uint64_t>();
  }
  if (journaled != quarantines_ok.load()) {
    report.failures.push_back("journal: " + std::to_string(quarantines_ok.load()) +
                              " quarantines acknowledged, " + std::to_string(journaled) +
                              " journaled");
  }
  const int64_t allowed = std::max<int64_t>(report.rss_warm_kib / 5, int64_t{32} * 1024);
  if (report.rss_end_kib - report.rss_warm_kib > allowed) {
    report.failures.push_back("memory: RSS grew from " + std::to_string(report.rss_warm_kib) +
                              " KiB after warm-up to " + std::to_string(report.rss_end_kib) +
                              " KiB at the end");
  }
  const int code = daemon.Terminate(std::chrono::seconds(15));
  if (code != 0) {
    report.failures.push_back("the daemon exited with " + std::to_string(code) +
                              " on SIGTERM; see " + log);
  }
  for (auto& engine : engines) engine->Stop();

  report.batches_published = batches.load();
  report.blocks_stored = stored.load();
  report.blocks_removed = removed.load();
  report.blocks_per_s =
      static_cast<double>(report.blocks_stored + report.blocks_removed) / report.duration_s;
  report.routes = routes.load();
  report.route_errors = route_errors.load();
  report.route_p50_ms = route_latency.Percentile(0.50);
  report.route_p99_ms = route_latency.Percentile(0.99);
  report.governance_writes = governance_ok.load();
  report.governance_errors = governance_errors.load();
  report.governance_p50_ms = governance_latency.Percentile(0.50);
  report.governance_p99_ms = governance_latency.Percentile(0.99);
  return report;
}

}  // namespace kvgov::simfleet
