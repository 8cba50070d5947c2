#pragma once

// The daemon's time: milliseconds since the Unix epoch that move only with
// the monotonic clock. Read from the wall clock once, then advanced by
// steady_clock: a step of the wall clock (`date -s`, a VM restored from a
// snapshot, NTP stepping after a boot without an RTC) moves no lease or
// directive deadline and does not reorder what one process writes. NTP's
// slewing, which CLOCK_MONOTONIC follows as well, keeps it near wall time;
// a step is picked up at the next start, and WallSkewMillis says how far
// the wall clock has moved away meanwhile (the metric
// kvgov_clock_wall_skew_seconds). docs/adr/0033.

#include <cstdint>
#include <functional>

namespace kvgov::clock {

/// Thread-safe: immutable after construction (the sources must be too).
class SteadyWallClock {
 public:
  using MillisSource = std::function<int64_t()>;

  /// Anchors at `wall_ms()` and `steady_ms()` as read now.
  SteadyWallClock(MillisSource wall_ms, MillisSource steady_ms);

  /// The anchor's wall time plus the steady time since.
  int64_t NowMillis() const;

  /// The wall clock minus NowMillis(): positive when the wall clock has
  /// stepped forward since the anchor, negative when back.
  int64_t WallSkewMillis() const;

 private:
  MillisSource wall_ms_;
  MillisSource steady_ms_;
  int64_t anchor_wall_ms_;
  int64_t anchor_steady_ms_;
};

/// The process's clock: system_clock anchored at first use, steady_clock
/// after. Every deadline and timestamp the daemon records reads it.
const SteadyWallClock& ProcessClock();

/// ProcessClock().NowMillis().
int64_t NowMillis();

}  // namespace kvgov::clock
