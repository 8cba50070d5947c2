#include "server/relay_threads.h"

namespace kvgov::server {

RelayThreads::~RelayThreads() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    wake_.notify_all();
    threads.swap(threads_);
  }
  for (std::thread& thread : threads) thread.join();
}

void RelayThreads::Run(std::function<void()> job) {
  std::lock_guard lock(mu_);
  jobs_.push_back(std::move(job));
  // Every queued job needs a thread of its own: an idle one, or a new one.
  if (jobs_.size() > idle_) {
    threads_.emplace_back([this] { Loop(); });
  } else {
    wake_.notify_one();
  }
}

size_t RelayThreads::threads() const {
  std::lock_guard lock(mu_);
  return threads_.size();
}

size_t RelayThreads::idle_threads() const {
  std::lock_guard lock(mu_);
  return idle_;
}

void RelayThreads::Loop() {
  std::unique_lock lock(mu_);
  while (true) {
    ++idle_;
    wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    --idle_;
    if (jobs_.empty()) return;  // stopping, nothing left to run
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    job = nullptr;  // what it holds goes before the thread waits again
    lock.lock();
  }
}

}  // namespace kvgov::server
