#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace kvgov::server {

/// Runs a function every `interval` on its own thread until Stop, which
/// wakes the thread at once rather than waiting out the interval.
/// Thread-safe; Stop is idempotent and called by the destructor.
class PeriodicTask {
 public:
  PeriodicTask(std::chrono::milliseconds interval, std::function<void()> run)
      : interval_(interval), run_(std::move(run)), thread_([this] { Loop(); }) {}
  ~PeriodicTask() { Stop(); }
  PeriodicTask(const PeriodicTask&) = delete;
  PeriodicTask& operator=(const PeriodicTask&) = delete;

  void Stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
      lock.unlock();
      run_();
      lock.lock();
    }
  }

  const std::chrono::milliseconds interval_;
  const std::function<void()> run_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;     // last: starts after the members it reads
};

}  // namespace kvgov::server
