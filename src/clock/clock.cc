#include "kvgov/clock/clock.h"

#include <chrono>
#include <utility>

namespace kvgov::clock {
namespace {

template <typename Clock>
int64_t MillisOf() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace

SteadyWallClock::SteadyWallClock(MillisSource wall_ms, MillisSource steady_ms)
    : wall_ms_(std::move(wall_ms)),
      steady_ms_(std::move(steady_ms)),
      anchor_wall_ms_(wall_ms_()),
      anchor_steady_ms_(steady_ms_()) {}

int64_t SteadyWallClock::NowMillis() const {
  return anchor_wall_ms_ + (steady_ms_() - anchor_steady_ms_);
}

int64_t SteadyWallClock::WallSkewMillis() const { return wall_ms_() - NowMillis(); }

const SteadyWallClock& ProcessClock() {
  static const SteadyWallClock clock(MillisOf<std::chrono::system_clock>,
                                     MillisOf<std::chrono::steady_clock>);
  return clock;
}

int64_t NowMillis() { return ProcessClock().NowMillis(); }

}  // namespace kvgov::clock
