#pragma once

#include <httplib.h>

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "e2e/daemon_process.h"
#include "e2e/fake_engine_publisher.h"
#include "e2e/wait.h"

namespace kvgov::testing {

/// A fixture for tests of one engine stream: `kvgov serve` following one
/// FakeEnginePublisher as worker w1 (model llama, block size 4), and an HTTP
/// client to its API. Thread-compatible, like any gtest fixture.
class OneEngineTest : public ::testing::Test {
 public:
  static constexpr int64_t kBlockSize = 4;

 protected:
  /// Starts (or restarts, on its data dir) kvgov; `engine_keys` are added to
  /// the --engine spec (",control=..."), `args` to the command line.
  void StartKvgov(const std::vector<std::string>& args = {}, const std::string& kind = "vllm",
                  const std::string& engine_keys = "") {
    std::vector<std::string> all = {
        "--engine", "id=w1,kind=" + kind + ",events=" + publisher_.events_endpoint() +
                        ",replay=" + publisher_.replay_endpoint() +
                        ",model=llama,block-size=" + std::to_string(kBlockSize) + engine_keys};
    all.insert(all.end(), args.begin(), args.end());
    Status started = daemon_.Start(all);
    ASSERT_TRUE(started.ok()) << started.ToString();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", daemon_.port());
  }

  /// w1's row of GET /v1/workers; null when it cannot be had.
  nlohmann::json Worker() {
    httplib::Result response = client_->Get("/v1/workers");
    if (!response || response->status != 200) return nlohmann::json();
    nlohmann::json workers = nlohmann::json::parse(response->body)["workers"];
    return workers.size() == 1 ? workers[0] : nlohmann::json();
  }

  /// Waits until kvgov has made `n` catch-ups: 2 after a connection (at the
  /// handshake and the settling one 300 ms later, made only while nothing
  /// live has come), so a test's counts do not depend on which came first.
  bool WaitForCatchUps(int n) {
    return WaitFor([&] {
      const nlohmann::json worker = Worker();
      return !worker.is_null() && worker["catch_ups"] >= n;
    });
  }

  std::string Metrics() {
    httplib::Result response = client_->Get("/metrics");
    return response ? response->body : "";
  }

  FakeEnginePublisher publisher_{kBlockSize};
  DaemonProcess daemon_;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace kvgov::testing
