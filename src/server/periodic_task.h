#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <thread>

#include "kvgov/core/mutex.h"

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
      MutexLock lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    MutexLock lock(mu_);
    while (!stopping_) {
      // Until the interval is over or Stop wakes it (a loop, not a
      // predicate: the thread-safety analysis cannot see a lambda run under
      // the lock).
      const auto due = std::chrono::steady_clock::now() + interval_;
      while (!stopping_ && wake_.wait_until(lock, due) != std::cv_status::timeout) continue;
      if (stopping_) break;
      lock.unlock();
      run_();
      lock.lock();
    }
  }

  const std::chrono::milliseconds interval_;
  const std::function<void()> run_;
  Mutex mu_;
  std::condition_variable_any wake_;
  bool stopping_ KVGOV_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after the members it reads
};

}  // namespace kvgov::server
