#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "e2e/fake_engine_publisher.h"
#include "e2e/tokens.h"

namespace kvgov::testing {

/// An engine's control API on loopback (GET /health and one reset route),
/// counting the reset calls it gets. `on_reset` runs, one call at a time,
/// when a reset is accepted; the first `busy_answers` resets are refused
/// with 400 (SGLang while requests run). DelayFirstReset makes the first
/// reset answer only after a pause, as an engine busy resetting does.
/// Thread-safe: several kvgov processes may call it at once.
class FakeControl {
 public:
  FakeControl(const std::string& reset_path, std::function<void()> on_reset, int busy_answers = 0)
      : busy_left_(busy_answers), on_reset_(std::move(on_reset)) {
    // Several kvgovs' probers and dispatches share this server; a delayed
    // answer must not starve the others.
    server_.new_task_queue = [] { return new httplib::ThreadPool(16); };
    server_.Get("/health", [](const httplib::Request&, httplib::Response& r) { r.status = 200; });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
      std::lock_guard lock(metrics_mu_);
      r.status = metrics_.empty() ? 404 : 200;
      r.set_content(metrics_, "text/plain; version=0.0.4");
    });
    server_.Post(reset_path, [this](const httplib::Request&, httplib::Response& r) {
      const int call = ++calls_;
      int busy = busy_left_.load();
      while (busy > 0 && !busy_left_.compare_exchange_weak(busy, busy - 1)) {
      }
      if (busy > 0) {
        r.status = 400;
        return;
      }
      if (call == 1 && first_delay_ms_ > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(first_delay_ms_.load()));
      }
      {
        std::lock_guard lock(reset_mu_);
        on_reset_();
      }
      r.status = 200;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeControl() {
    server_.stop();
    thread_.join();
  }
  FakeControl(const FakeControl&) = delete;
  FakeControl& operator=(const FakeControl&) = delete;

  void DelayFirstReset(std::chrono::milliseconds delay) {
    first_delay_ms_ = static_cast<int>(delay.count());
  }
  /// What GET /metrics serves (Prometheus text); 404 while empty.
  void SetMetrics(std::string text) {
    std::lock_guard lock(metrics_mu_);
    metrics_ = std::move(text);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int calls() const { return calls_; }

 private:
  httplib::Server server_;
  std::atomic<int> busy_left_;
  std::atomic<int> calls_{0};
  std::atomic<int> first_delay_ms_{0};
  std::mutex reset_mu_;    // the publisher is driven by one thread at a time
  std::mutex metrics_mu_;  // guards metrics_
  std::string metrics_;
  std::function<void()> on_reset_;
  int port_ = 0;
  std::thread thread_;
};

/// The --engine spec of a model "llama" engine with this publisher and
/// control API.
inline std::string EngineArg(const std::string& id, const std::string& kind,
                             const FakeEnginePublisher& publisher, const FakeControl& control,
                             int64_t block_size) {
  return "id=" + id + ",kind=" + kind + ",events=" + publisher.events_endpoint() +
         ",replay=" + publisher.replay_endpoint() +
         ",model=llama,block-size=" + std::to_string(block_size) + ",control=" + control.url();
}

}  // namespace kvgov::testing
