#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace kvgov::testing {

/// Polls `done` every 10 ms until it holds or `timeout` passes; returns
/// whether it held. End-to-end tests wait with this, never a fixed sleep.
inline bool WaitFor(const std::function<bool()>& done,
                    std::chrono::seconds timeout = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

}  // namespace kvgov::testing
