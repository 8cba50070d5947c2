// The C++ SDK as a user meets it: installed with `cmake --install`, found
// with find_package(kvgov) by the example bridges, which are configured and
// built against the install and then run against a real `kvgov serve`. And
// the HttpSink's throughput to that daemon.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "e2e/daemon_process.h"
#include "kvgov/client/http_sink.h"
#include "testing/metric_value.h"
#include "testing/scratch_dir.h"

#ifndef KVGOV_CMAKE_COMMAND
#error "the build defines KVGOV_CMAKE_COMMAND, KVGOV_BUILD_DIR and the rest"
#endif

namespace kvgov::testing {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using test_support::MetricValue;

// Runs argv to completion with stdout and stderr in `output`; returns the
// exit code, or -1 when it could not run.
int RunCommand(const std::vector<std::string>& args, std::string* output, const fs::path& log) {
  std::vector<char*> argv;
  std::vector<std::string> copies = args;
  for (std::string& arg : copies) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::close(fd);
    }
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  *output = text.str();
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class ClientSdkE2ETest : public ::testing::Test {
 protected:
  // Where this test installs and builds: inside the build tree and the same
  // at every run, so a repeat reconfigures and rebuilds only what changed
  // (and compiles through ccache at stable paths); one directory per test,
  // so tests running in parallel never share one.
  static fs::path Work() {
    return fs::path(KVGOV_BUILD_DIR) / "tests" / "sdk_e2e" /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  std::string Prefix() const { return (Work() / "prefix").string(); }

  // cmake --install of this build tree, the SDK component only.
  ::testing::AssertionResult Install() {
    std::string output;
    if (RunCommand({KVGOV_CMAKE_COMMAND, "--install", KVGOV_BUILD_DIR, "--prefix", Prefix(),
                    "--component", "sdk"},
                   &output, dir_ / "install.log") != 0) {
      return ::testing::AssertionFailure() << "install failed:\n" << output;
    }
    return ::testing::AssertionSuccess();
  }

  // Configures and builds examples/<name> against the install, with its
  // warnings as errors, and returns the built binary.
  ::testing::AssertionResult BuildExample(const std::string& name, std::string* binary) {
    const fs::path build = Work() / ("build-" + name);
    std::vector<std::string> configure = {KVGOV_CMAKE_COMMAND,
                                          "-S",
                                          std::string(KVGOV_SOURCE_DIR) + "/examples/" + name,
                                          "-B",
                                          build.string(),
                                          "-G",
                                          KVGOV_CMAKE_GENERATOR,
                                          "-DCMAKE_BUILD_TYPE=Release",
                                          "-DCMAKE_PREFIX_PATH=" + Prefix(),
                                          "-DCMAKE_CXX_COMPILER=" KVGOV_CXX_COMPILER,
                                          "-DCMAKE_COMPILE_WARNING_AS_ERROR=ON"};
    if (std::string(KVGOV_MAKE_PROGRAM).size() > 0) {
      configure.push_back("-DCMAKE_MAKE_PROGRAM=" KVGOV_MAKE_PROGRAM);
    }
    // The compiler cache makes a repeat of this build take a second or two.
    if (std::string(KVGOV_CCACHE).size() > 0) {
      configure.push_back("-DCMAKE_CXX_COMPILER_LAUNCHER=" KVGOV_CCACHE);
    }
    // A sanitized tree installs sanitized libraries; the example must link
    // the same runtimes.
    if (std::string(KVGOV_EXAMPLE_SANITIZE).size() > 0) {
      configure.push_back("-DCMAKE_CXX_FLAGS=" KVGOV_EXAMPLE_SANITIZE);
      configure.push_back("-DCMAKE_EXE_LINKER_FLAGS=" KVGOV_EXAMPLE_SANITIZE);
    }
    std::string output;
    if (RunCommand(configure, &output, dir_ / (name + "-configure.log")) != 0) {
      return ::testing::AssertionFailure() << "configure failed:\n" << output;
    }
    if (RunCommand({KVGOV_CMAKE_COMMAND, "--build", build.string()}, &output,
                   dir_ / (name + "-build.log")) != 0) {
      return ::testing::AssertionFailure() << "build failed:\n" << output;
    }
    *binary = (build / name).string();
    return ::testing::AssertionSuccess();
  }

  // kvgov with two registered workers whose engines never publish (ZeroMQ
  // connects lazily), admitting `owner`'s reports.
  void StartKvgov(const std::string& owner) {
    const std::string engine = ",events=tcp://127.0.0.1:1,model=llama,block-size=4";
    Status started = daemon_.Start(
        {"--engine", "id=w1" + engine, "--engine", "id=w2" + engine, "--admit", owner + "=fleet"});
    ASSERT_TRUE(started.ok()) << started.ToString();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", daemon_.port());
  }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(daemon_.port()); }
  std::string Metrics() { return client_->Get("/metrics")->body; }
  Json Worker(const std::string& id) {
    httplib::Result response = client_->Get("/v1/workers");
    if (!response || response->status != 200) return Json();
    const Json body = Json::parse(response->body);
    for (const Json& worker : body["workers"]) {
      if (worker["id"] == id) return worker;
    }
    return Json();
  }

  const test_support::ScratchDir dir_{"kvgov_sdk_e2e"};
  DaemonProcess daemon_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(ClientSdkE2ETest, InstallHoldsThePackage) {
  fs::remove_all(Prefix());  // what a fresh install holds, nothing left from before
  ASSERT_TRUE(Install());
  const fs::path prefix = Prefix();
  EXPECT_TRUE(fs::exists(prefix / "include/kvgov/client/http_sink.h"));
  EXPECT_TRUE(fs::exists(prefix / "include/kvgov/core/kv_transfer.h"));
  EXPECT_FALSE(fs::exists(prefix / "include/kvgov/server"));  // internal to the daemon
  bool client = false, core = false, config = false;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(prefix)) {
    const std::string name = entry.path().filename().string();
    client |= name == "libkvgov_client.a";
    core |= name == "libkvgov_core.a";
    config |= name == "kvgov-config.cmake" &&
              entry.path().parent_path().string().ends_with("cmake/kvgov");
  }
  EXPECT_TRUE(client && core && config);
}

TEST_F(ClientSdkE2ETest, NixlBridgeBuiltAgainstTheInstallReportsToKvgov) {
  ASSERT_TRUE(Install());
  std::string bridge;
  ASSERT_TRUE(BuildExample("nixl_bridge", &bridge));
  StartKvgov("vllm+nixl");

  std::string output;
  ASSERT_EQ(
      RunCommand({bridge, "--kvgov", Url(), "--prefill-worker", "w1", "--decode-worker", "w2"},
                 &output, dir_ / "bridge.log"),
      0)
      << output << daemon_.Stderr();
  // 8 requests: a lease create, heartbeat and release each, and a transfer.
  EXPECT_NE(output.find("queued 32, sent 32, rejected 0, failed 0"), std::string::npos) << output;

  const std::string metrics = Metrics();
  const std::string events =
      R"(kvgov_cache_events_total{source="ride_engine",plane="kv_transfer",direction="migrate",)";
  EXPECT_EQ(MetricValue(metrics, events + R"(outcome="ok"})"), 7) << metrics;
  EXPECT_EQ(MetricValue(metrics, events + R"(outcome="fault"})"), 1);
  EXPECT_EQ(
      MetricValue(metrics,
                  R"(kvgov_bytes_moved_total{source="ride_engine",from_tier="hbm",to_tier="hbm"})"),
      7 * 32 * 131072);
  EXPECT_EQ(MetricValue(metrics, R"(kvgov_lease_transitions_total{from="none",to="active"})"), 8);
  EXPECT_EQ(MetricValue(metrics, R"(kvgov_lease_transitions_total{from="active",to="completed"})"),
            7);
  EXPECT_EQ(MetricValue(metrics, R"(kvgov_lease_transitions_total{from="active",to="failed"})"), 1);
  // The seven completed transfers put their spans in the decode worker's
  // HBM: 32 tokens in blocks of 4, the first 4 blocks shared by all.
  EXPECT_EQ(Worker("w2")["blocks"]["hbm"], 4 + 7 * 4) << Worker("w2").dump();
  EXPECT_EQ(Worker("w1")["blocks"]["hbm"], 0);
  EXPECT_EQ(daemon_.Stop(), 0) << daemon_.Stderr();
}

TEST_F(ClientSdkE2ETest, MooncakeBridgeBuiltAgainstTheInstallReportsToKvgov) {
  ASSERT_TRUE(Install());
  std::string bridge;
  ASSERT_TRUE(BuildExample("mooncake_bridge", &bridge));
  StartKvgov("mooncake");

  std::string output;
  ASSERT_EQ(RunCommand({bridge, "--kvgov", Url(), "--requests", "4"}, &output, dir_ / "bridge.log"),
            0)
      << output << daemon_.Stderr();
  // Requests 0 and 2 go through the store (put, get, remove), 1 and 3
  // through the transfer engine.
  EXPECT_NE(output.find("queued 8, sent 8, rejected 0"), std::string::npos) << output;
  const std::string metrics = Metrics();
  const std::string events =
      R"(kvgov_cache_events_total{source="ride_engine",plane="kv_transfer",direction=)";
  EXPECT_EQ(MetricValue(metrics, events + R"("store",outcome="ok"})"), 2) << metrics;
  EXPECT_EQ(MetricValue(metrics, events + R"("restore",outcome="ok"})"), 2);
  EXPECT_EQ(MetricValue(metrics, events + R"("evict",outcome="ok"})"), 2);
  EXPECT_EQ(MetricValue(metrics, events + R"("migrate",outcome="ok"})"), 2);
  // Every object ends in the decode worker's HBM; the store's DRAM replicas
  // on the prefill worker were removed.
  EXPECT_EQ(Worker("w2")["blocks"]["hbm"], 4 + 4 * 4) << Worker("w2").dump();
  EXPECT_EQ(Worker("w1")["blocks"]["dram"], 0) << Worker("w1").dump();
}

TEST_F(ClientSdkE2ETest, HttpSinkThroughputToARealDaemon) {
  StartKvgov("sdk");
  client::HttpSinkOptions options;
  options.url = Url();
  options.max_queue_events = 1 << 20;
  Result<std::unique_ptr<client::HttpSink>> sink = client::HttpSink::Create(options);
  ASSERT_TRUE(sink.ok()) << sink.status().ToString();

  // Transfers that each place a 32-token span on w1: the index moves for
  // every one, as for a real transport.
  constexpr int kEvents = 100000;
  std::vector<client::Event> events;
  events.reserve(kEvents);
  for (int i = 0; i < kEvents; ++i) {
    KVTransfer transfer;
    transfer.direction = KVTransferDirection::kStore;
    transfer.span.span_digest = "span-" + std::to_string(i);
    transfer.span.tokens = 32;
    transfer.span.to_tier = ResidencyTier::kHBM;
    transfer.span.owner = "sdk";
    transfer.span.bytes_moved = 32 * 131072;
    client::SpanLocation where;
    where.worker = "w1";
    for (int64_t t = 0; t < 32; ++t) where.token_ids.push_back(int64_t{i} * 32 + t);
    events.push_back(client::TransferEvent(std::move(transfer), std::move(where)));
  }
  const auto start = std::chrono::steady_clock::now();
  for (const client::Event& event : events) ASSERT_TRUE((*sink)->Emit(event).ok());
  const auto emitted = std::chrono::steady_clock::now();
  ASSERT_TRUE((*sink)->Flush(std::chrono::seconds(120)).ok());
  const auto flushed = std::chrono::steady_clock::now();

  const client::SinkStats stats = (*sink)->stats();
  EXPECT_EQ(stats.sent, static_cast<uint64_t>(kEvents)) << stats.last_error;
  EXPECT_EQ(stats.rejected + stats.failed + stats.dropped, 0u);
  const double seconds = std::chrono::duration<double>(flushed - start).count();
  std::printf(
      "HttpSink to kvgov on loopback: %d events (32-token placements) in %.2f s = "
      "%.0f events/s; Emit %.2f us each on the caller; %llu batches\n",
      kEvents, seconds, kEvents / seconds,
      std::chrono::duration<double, std::micro>(emitted - start).count() / kEvents,
      static_cast<unsigned long long>(stats.batches));
  EXPECT_EQ(Worker("w1")["blocks"]["hbm"], kEvents * 32 / 4);
}

}  // namespace
}  // namespace kvgov::testing
