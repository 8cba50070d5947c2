#include "server/relay_threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace kvgov::server {
namespace {

// Jobs that hold their thread until released, as forwarded streams do.
class Gate {
 public:
  void Enter() {
    std::unique_lock lock(mu_);
    ++inside_;
    changed_.notify_all();
    changed_.wait(lock, [this] { return open_; });
    --inside_;
    changed_.notify_all();
  }
  bool WaitInside(int n) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [&] { return inside_ == n; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    changed_.notify_all();
  }
  void Close() {
    std::lock_guard lock(mu_);
    open_ = false;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int inside_ = 0;
  bool open_ = false;
};

TEST(RelayThreadsTest, NoJobWaitsBehindAnotherAndEndedThreadsAreReused) {
  Gate gate;
  RelayThreads pool;
  for (int i = 0; i < 8; ++i) pool.Run([&] { gate.Enter(); });
  // All eight run at once: none queued behind a held thread.
  ASSERT_TRUE(gate.WaitInside(8));
  EXPECT_EQ(pool.threads(), 8u);
  gate.Open();
  ASSERT_TRUE(gate.WaitInside(0));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (pool.idle_threads() < 8 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(pool.idle_threads(), 8u);
  // The next round reuses the threads whose jobs ended.
  gate.Close();
  for (int i = 0; i < 8; ++i) pool.Run([&] { gate.Enter(); });
  ASSERT_TRUE(gate.WaitInside(8));
  EXPECT_EQ(pool.threads(), 8u);
  gate.Open();
}

TEST(RelayThreadsTest, DestroyingWaitsForRunningJobs) {
  std::atomic<int> done{0};
  {
    RelayThreads pool;
    for (int i = 0; i < 4; ++i) {
      pool.Run([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        done.fetch_add(1);
      });
    }
  }
  EXPECT_EQ(done.load(), 4);
}

}  // namespace
}  // namespace kvgov::server
