// The gateway at fleet scale (issue 36), side by side in one run against
// the same upstream: an engine that costs nothing (simfleet::InstantEngine,
// answering /tokenize and completions on its own event loop) called
// directly, through nginx as a plain reverse proxy (Debian's nginx-light,
// keep-alive to the upstream), and through kvgov's gateway (a `kvgov
// serve` process of this build, which also tokenizes on the engine and
// routes). Two simulated engines (LiveEngine) make kvgov's workers live;
// the spec's openai= key sends their requests to the instant engine.
//   cmake --build build-bench --target kvgov_gateway_scale_bench
//   build-bench/src/server/kvgov_gateway_scale_bench
//
// - Throughput: wrk (Debian's), 1 thread, 32 connections, 3 s, a
//   non-streamed completion; the engine answering at once, and taking
//   2 ms a request.
// - Streams held: N long streams open at once through the gateway (raw
//   sockets, each until its first event); kvgov's threads and resident
//   set before and after, per stream. N is 9,000 here: kvgov holds two
//   descriptors a stream and this machine's hard limit is 20,000.
// - TTFB at 1,000 streams: with 1,000 streams open through the gateway
//   (an event every 200 ms each), request-to-first-byte of a fast streamed
//   completion, direct and through the gateway alternating.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <cctype>
#include <string>
#include <thread>
#include <vector>

#include "testing/bench_smoke.h"
#include "testing/scratch_dir.h"
#include "kvgov/simfleet/child_process.h"
#include "kvgov/simfleet/live_engine.h"
#include "testing/ttfb_probe.h"
#include "simfleet/instant_engine.h"

#ifndef KVGOV_BINARY
#error "KVGOV_BINARY: the kvgov binary this benchmark starts"
#endif

namespace kvgov::server {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;
namespace fs = std::filesystem;

// The prompt of every request: 64 words, tokenized by the instant engine.
std::string Prompt(int n) {
  std::string text;
  for (int i = 0; i < 64; ++i) text += "w" + std::to_string(n * 64 + i) + " ";
  return text;
}

std::string CompletionBody(bool stream, int max_tokens, int interval_ms, int n = 0) {
  return Json{{"model", "llama"},
              {"prompt", Prompt(n)},
              {"max_tokens", max_tokens},
              {"stream", stream},
              {"sim_token_interval_ms", interval_ms}}
      .dump();
}

Result<int> ReadPort(const fs::path& file, std::chrono::seconds wait) {
  const auto deadline = Clock::now() + wait;
  while (Clock::now() < deadline) {
    std::ifstream in(file);
    int port = 0;
    if (in >> port && port > 0) return port;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Status::DeadlineExceeded("no port in " + file.string());
}

// /proc/PID/status's `field` (VmRSS in kB, Threads).
int64_t ProcStatus(pid_t pid, std::string_view field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with(field)) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

// CPU seconds (user and system) process `pid` and its children still
// running have used: nginx's master and workers, or kvgov.
double CpuSeconds(pid_t pid) {
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  double seconds = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), {});
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));
    std::string state;
    long ppid = 0;
    fields >> state >> ppid;
    if (std::stol(name) != pid && ppid != pid) continue;
    std::string skip;
    for (int i = 0; i < 9; ++i) fields >> skip;  // pgrp .. cmajflt
    double utime = 0, stime = 0;
    fields >> utime >> stime;
    seconds += (utime + stime) / tick;
  }
  return seconds;
}

// A port free now on 127.0.0.1 (bound, read, closed).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return port;
}

// The instant engine, kvgov in front of it (a child process), nginx beside
// it; all removed at the end.
class ScaleFleet {
 public:
  Status Start(int engine_interval_ms) {
    dir_ = scratch_.emplace("kvgov_gateway_scale").path();
    simfleet::InstantEngineOptions instant;
    instant.model = "llama";
    instant.token_interval = std::chrono::milliseconds(engine_interval_ms);
    KVGOV_ASSIGN_OR_RETURN(instant_, simfleet::InstantEngine::Start(instant));
    std::vector<std::string> args = {KVGOV_BINARY,
                                     "serve",
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--ready-file",
                                     (dir_ / "ready").string(),
                                     "--data-dir",
                                     (dir_ / "data").string(),
                                     "--gateway-listen",
                                     "127.0.0.1:0",
                                     "--gateway-ready-file",
                                     (dir_ / "gateway-ready").string(),
                                     "--prefix-diagnostics",
                                     "false"};
    if (const char* loops = std::getenv("KVGOV_BENCH_GATEWAY_LOOPS")) {
      args.insert(args.end(), {"--gateway-loops", loops});
    }
    for (const char* id : {"w1", "w2"}) {
      simfleet::LiveEngineOptions options;
      options.id = id;
      options.model = "llama";
      options.speedup = 1e9;
      KVGOV_ASSIGN_OR_RETURN(std::unique_ptr<simfleet::LiveEngine> engine,
                             simfleet::LiveEngine::Start(options));
      args.push_back("--engine");
      args.push_back(engine->EngineSpec() + ",openai=" + instant_->url());
      engines_.push_back(std::move(engine));
    }
    KVGOV_ASSIGN_OR_RETURN(kvgov_,
                           simfleet::ChildProcess::Spawn(args, (dir_ / "kvgov.log").string()));
    KVGOV_ASSIGN_OR_RETURN(gateway_port_,
                           ReadPort(dir_ / "gateway-ready", std::chrono::seconds(30)));
    KVGOV_ASSIGN_OR_RETURN(const int control_port,
                           ReadPort(dir_ / "ready", std::chrono::seconds(30)));
    // Serving once a worker is live: a request answered 200.
    httplib::Client gateway("127.0.0.1", gateway_port_);
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (true) {
      httplib::Result answer =
          gateway.Post("/v1/completions", CompletionBody(false, 1, 0), "application/json");
      if (answer && answer->status == 200) break;
      if (Clock::now() > deadline) {
        return Status::Unavailable("the gateway never served: " +
                                   (answer ? answer->body : httplib::to_string(answer.error())));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    (void)control_port;
    return Status::Ok();
  }

  // nginx as a plain reverse proxy to the instant engine, one worker per
  // core, kept-alive upstream connections.
  Status StartNginx() {
    // nginx cannot listen on port 0 and tell the port: take a free one.
    nginx_port_ = FreePort();
    const fs::path conf = dir_ / "nginx.conf";
    const std::string upstream = instant_->url().substr(std::string("http://").size());
    std::ofstream(conf) << "daemon off;\nmaster_process on;\nworker_processes auto;\n"
                        << "pid " << (dir_ / "nginx.pid").string() << ";\n"
                        << "error_log " << (dir_ / "nginx-error.log").string() << " warn;\n"
                        << "events { worker_connections 20000; }\n"
                        << "http {\n  access_log off;\n"
                        << "  client_body_temp_path " << dir_.string() << ";\n"
                        << "  proxy_temp_path " << dir_.string() << ";\n"
                        << "  upstream engine { server " << upstream << "; keepalive 256; }\n"
                        << "  server {\n    listen 127.0.0.1:" << nginx_port_ << ";\n"
                        << "    location / { proxy_pass http://engine; proxy_http_version 1.1;"
                        << " proxy_set_header Connection \"\"; proxy_buffering off; }\n"
                        << "  }\n}\n";
    KVGOV_ASSIGN_OR_RETURN(
        nginx_,
        simfleet::ChildProcess::Spawn({"/usr/sbin/nginx", "-p", dir_.string(), "-c", conf.string()},
                                      (dir_ / "nginx.log").string()));
    httplib::Client client("127.0.0.1", nginx_port_);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline) {
      if (httplib::Result r = client.Get("/health"); r && r->status == 200) return Status::Ok();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::string why;
    for (const char* log : {"nginx.log", "nginx-error.log"}) {
      std::ifstream in(dir_ / log);
      why.append(std::istreambuf_iterator<char>(in), {});
    }
    return Status::Unavailable("nginx did not start: " + why);
  }

  ~ScaleFleet() {
    if (nginx_.pid() > 0) nginx_.Terminate(std::chrono::seconds(5));
    if (kvgov_.pid() > 0) kvgov_.Terminate(std::chrono::seconds(10));
    for (auto& engine : engines_) engine->Stop();
    instant_.reset();
  }

  int gateway_port() const { return gateway_port_; }
  int nginx_port() const { return nginx_port_; }
  int engine_port() const {
    return std::stoi(instant_->url().substr(instant_->url().rfind(':') + 1));
  }
  pid_t kvgov_pid() const { return kvgov_.pid(); }
  pid_t nginx_pid() const { return nginx_.pid(); }
  const simfleet::InstantEngine& instant() const { return *instant_; }
  const fs::path& dir() const { return dir_; }

 private:
  std::optional<test_support::ScratchDir> scratch_;  // removed after its processes stop
  fs::path dir_;
  std::unique_ptr<simfleet::InstantEngine> instant_;
  std::vector<std::unique_ptr<simfleet::LiveEngine>> engines_;
  simfleet::ChildProcess kvgov_;
  simfleet::ChildProcess nginx_;
  int gateway_port_ = 0;
  int nginx_port_ = 0;
};

// How long each wrk run lasts.
const int kWrkSeconds = bench::Sized(3, 1);

// Requests a second wrk measured on 127.0.0.1:port; an error when wrk is
// missing or any answer was not 2xx.
Result<double> Wrk(const fs::path& dir, int port, const std::string& body) {
  const fs::path script = dir / "post.lua";
  std::ofstream(script) << "wrk.method = \"POST\"\nwrk.body = " << Json(body).dump()
                        << "\nwrk.headers[\"Content-Type\"] = \"application/json\"\n";
  const std::string command = "wrk -t1 -c32 -d" + std::to_string(kWrkSeconds) + "s -s " +
                              script.string() + " http://127.0.0.1:" + std::to_string(port) +
                              "/v1/completions 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return Status::Unavailable("cannot run wrk");
  std::string output;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  if (::pclose(pipe) != 0)
    return Status::Unavailable("wrk failed (apt-get install wrk): " + output);
  if (output.find("Non-2xx") != std::string::npos) {
    return Status::Unavailable("answers that were not 2xx: " + output);
  }
  std::smatch rate;
  if (!std::regex_search(output, rate, std::regex("Requests/sec:\\s+([0-9.]+)"))) {
    return Status::Unavailable("no Requests/sec in wrk's output: " + output);
  }
  return std::stod(rate[1]);
}

// `ratio_suffix` names the engine's cost in the ratios' counters.
void Throughput(benchmark::State& state, int engine_interval_ms, const std::string& ratio_suffix) {
  ScaleFleet fleet;
  if (Status started = fleet.Start(engine_interval_ms); !started.ok()) {
    state.SkipWithError(started.ToString().c_str());
    return;
  }
  if (Status started = fleet.StartNginx(); !started.ok()) {
    state.SkipWithError(started.ToString().c_str());
    return;
  }
  const std::string body = CompletionBody(false, 1, engine_interval_ms);
  double direct = 0, nginx = 0, gateway = 0, nginx_cpu = 0, gateway_cpu = 0;
  for (auto _ : state) {
    Result<double> d = Wrk(fleet.dir(), fleet.engine_port(), body);
    const double nginx_before = CpuSeconds(fleet.nginx_pid());
    Result<double> n = Wrk(fleet.dir(), fleet.nginx_port(), body);
    const double nginx_used = CpuSeconds(fleet.nginx_pid()) - nginx_before;
    const double kvgov_before = CpuSeconds(fleet.kvgov_pid());
    Result<double> g = Wrk(fleet.dir(), fleet.gateway_port(), body);
    const double kvgov_used = CpuSeconds(fleet.kvgov_pid()) - kvgov_before;
    for (const Result<double>* r : {&d, &n, &g}) {
      if (!r->ok()) {
        state.SkipWithError(r->status().ToString().c_str());
        return;
      }
    }
    direct += *d;
    nginx += *n;
    gateway += *g;
    // CPU microseconds per request.
    nginx_cpu += nginx_used * 1e6 / (*n * kWrkSeconds);
    gateway_cpu += kvgov_used * 1e6 / (*g * kWrkSeconds);
  }
  const double rounds = static_cast<double>(state.iterations());
  state.counters["direct_req_per_s"] = direct / rounds;
  state.counters["nginx_req_per_s"] = nginx / rounds;
  state.counters["gateway_req_per_s"] = gateway / rounds;
  state.counters["nginx_cpu_us_per_req"] = nginx_cpu / rounds;
  state.counters["gateway_cpu_us_per_req"] = gateway_cpu / rounds;
  state.counters["ratio_gateway_vs_nginx_" + ratio_suffix] = gateway / nginx;
  state.counters["ratio_gateway_vs_direct_" + ratio_suffix] = gateway / direct;
}

void BM_FrontDoorThroughputInstantEngine(benchmark::State& state) {
  Throughput(state, 0, "instant_engine");
}
BENCHMARK(BM_FrontDoorThroughputInstantEngine)
    ->Iterations(bench::Sized(2, 1))
    ->Unit(benchmark::kMillisecond);

void BM_FrontDoorThroughputEngine2ms(benchmark::State& state) {
  Throughput(state, 2, "2ms_engine");
}
BENCHMARK(BM_FrontDoorThroughputEngine2ms)
    ->Iterations(bench::Sized(2, 1))
    ->Unit(benchmark::kMillisecond);

// A streamed request on a socket of its own, read without blocking.
class StreamClient {
 public:
  StreamClient(int port, const std::string& body) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const std::string request =
        "POST /v1/completions HTTP/1.1\r\nHost: kvgov\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    ok_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
          ::send(fd_, request.data(), request.size(), MSG_NOSIGNAL) ==
              static_cast<ssize_t>(request.size());
  }
  ~StreamClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  StreamClient(const StreamClient&) = delete;
  StreamClient& operator=(const StreamClient&) = delete;
  int fd() const { return fd_; }
  bool ok() const { return ok_; }
  bool started() const { return started_; }
  // Reads what is there; true once the first event has come.
  bool Poll() {
    char buffer[2048];
    ssize_t n;
    while ((n = ::recv(fd_, buffer, sizeof buffer, MSG_DONTWAIT)) > 0) {
      if (!started_) seen_.append(buffer, static_cast<size_t>(n));
      if (seen_.find("data: ") != std::string::npos) {
        started_ = true;
        seen_.clear();
      }
    }
    if (n == 0) ok_ = false;
    return started_;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
  bool started_ = false;
  std::string seen_;
};

// Opens `n` streams through the gateway (an event every `interval_ms`)
// and waits for each one's first event.
Result<std::vector<std::unique_ptr<StreamClient>>> OpenStreams(int port, int n, int interval_ms) {
  std::vector<std::unique_ptr<StreamClient>> streams;
  for (int i = 0; i < n; ++i) {
    streams.push_back(std::make_unique<StreamClient>(
        port, CompletionBody(true, 100000, interval_ms, 1 + i % 1000)));
    if (!streams.back()->ok()) {
      return Status::Unavailable("stream " + std::to_string(i) + " could not connect");
    }
  }
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  size_t started = 0;
  while (started < streams.size()) {
    if (Clock::now() > deadline) {
      return Status::DeadlineExceeded(std::to_string(started) + " of " + std::to_string(n) +
                                      " streams started");
    }
    std::vector<pollfd> fds;
    for (const auto& s : streams) {
      if (!s->started()) fds.push_back({s->fd(), POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 50);
    started = 0;
    for (const auto& s : streams) {
      if (s->started() || s->Poll()) ++started;
      if (!s->ok()) return Status::Unavailable("a stream was closed before its first event");
    }
  }
  return streams;
}

void BM_FrontDoorStreamsHeld(benchmark::State& state) {
  const int streams = static_cast<int>(state.range(0));
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &files);  // before kvgov starts: it inherits the limit
  ScaleFleet fleet;
  if (Status started = fleet.Start(0); !started.ok()) {
    state.SkipWithError(started.ToString().c_str());
    return;
  }
  double rss_per_stream = 0, threads_before = 0, threads_during = 0, seconds = 0;
  for (auto _ : state) {
    const int64_t rss_before = ProcStatus(fleet.kvgov_pid(), "VmRSS:");
    threads_before = static_cast<double>(ProcStatus(fleet.kvgov_pid(), "Threads:"));
    const auto start = Clock::now();
    Result<std::vector<std::unique_ptr<StreamClient>>> open =
        OpenStreams(fleet.gateway_port(), streams, 1000);
    if (!open.ok()) {
      state.SkipWithError(open.status().ToString().c_str());
      return;
    }
    seconds += std::chrono::duration<double>(Clock::now() - start).count();
    const int64_t rss_during = ProcStatus(fleet.kvgov_pid(), "VmRSS:");
    threads_during = static_cast<double>(ProcStatus(fleet.kvgov_pid(), "Threads:"));
    rss_per_stream += static_cast<double>(rss_during - rss_before) * 1024 / streams;
    open->clear();
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (fleet.instant().open_answers() > 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  const double rounds = static_cast<double>(state.iterations());
  state.counters["streams"] = streams;
  state.counters["kvgov_rss_bytes_per_stream"] = rss_per_stream / rounds;
  state.counters["kvgov_threads_before"] = threads_before;
  state.counters["kvgov_threads_with_streams"] = threads_during;
  state.counters["seconds_to_open_all"] = seconds / rounds;
}
BENCHMARK(BM_FrontDoorStreamsHeld)
    ->Arg(bench::Sized(9000, 100))
    ->Iterations(bench::Sized(2, 1))
    ->Unit(benchmark::kMillisecond);

void BM_FrontDoorTtfbAt1000Streams(benchmark::State& state) {
  ScaleFleet fleet;
  if (Status started = fleet.Start(0); !started.ok()) {
    state.SkipWithError(started.ToString().c_str());
    return;
  }
  Result<std::vector<std::unique_ptr<StreamClient>>> open =
      OpenStreams(fleet.gateway_port(), 1000, 200);
  if (!open.ok()) {
    state.SkipWithError(open.status().ToString().c_str());
    return;
  }
  // The held streams' events must be read, or kvgov's writes to them stall.
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    std::vector<pollfd> fds;
    for (const auto& s : *open) fds.push_back({s->fd(), POLLIN, 0});
    char sink[16384];
    while (!stop.load()) {
      ::poll(fds.data(), fds.size(), 50);
      for (pollfd& fd : fds) {
        if (fd.revents & POLLIN) (void)::recv(fd.fd, sink, sizeof sink, MSG_DONTWAIT);
      }
    }
  });
  httplib::Client direct("127.0.0.1", fleet.engine_port());
  httplib::Client gateway("127.0.0.1", fleet.gateway_port());
  for (httplib::Client* c : {&direct, &gateway}) {
    c->set_keep_alive(true);
    c->set_tcp_nodelay(true);
  }
  const std::string body = CompletionBody(true, 1, 0, 5000);
  for (int i = 0; i < 50; ++i) {
    (void)bench::TimeToFirstByte(direct, "/v1/completions", body);
    (void)bench::TimeToFirstByte(gateway, "/v1/completions", body);
  }
  std::vector<double> direct_us, gateway_us;
  bool gateway_first = false;
  for (auto _ : state) {
    double via_direct = 0, via_gateway = 0;
    if (gateway_first) via_gateway = bench::TimeToFirstByte(gateway, "/v1/completions", body);
    via_direct = bench::TimeToFirstByte(direct, "/v1/completions", body);
    if (!gateway_first) via_gateway = bench::TimeToFirstByte(gateway, "/v1/completions", body);
    gateway_first = !gateway_first;
    if (via_direct < 0 || via_gateway < 0) {
      state.SkipWithError("a probe failed");
      break;
    }
    direct_us.push_back(via_direct);
    gateway_us.push_back(via_gateway);
  }
  stop.store(true);
  reader.join();
  if (state.error_occurred()) return;
  state.counters["held_streams"] = 1000;
  bench::ReportTtfbPair(state, direct_us, gateway_us);
}
BENCHMARK(BM_FrontDoorTtfbAt1000Streams)
    ->Iterations(bench::Sized(1000, 20))
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvgov::server
