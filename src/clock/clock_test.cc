#include "kvgov/clock/clock.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace kvgov::clock {
namespace {

constexpr int64_t kDay = 24 * 3600 * 1000;

// A wall clock and a steady clock the test moves by hand.
struct FakeTime {
  int64_t wall_ms = 1'700'000'000'000;
  int64_t steady_ms = 5'000;
  SteadyWallClock Clock() {
    return SteadyWallClock([this] { return wall_ms; }, [this] { return steady_ms; });
  }
};

TEST(SteadyWallClockTest, StartsAtTheWallClockAndAdvancesWithTheSteadyOne) {
  FakeTime time;
  const SteadyWallClock clock = time.Clock();
  EXPECT_EQ(clock.NowMillis(), time.wall_ms);
  time.steady_ms += 1500;
  time.wall_ms += 1500;
  EXPECT_EQ(clock.NowMillis(), 1'700'000'001'500);
  EXPECT_EQ(clock.WallSkewMillis(), 0);
}

TEST(SteadyWallClockTest, AWallClockStepMovesNeitherNowNorTheOrder) {
  FakeTime time;
  const SteadyWallClock clock = time.Clock();
  const int64_t start = clock.NowMillis();

  time.wall_ms += kDay;  // stepped forward a day
  time.steady_ms += 10;
  EXPECT_EQ(clock.NowMillis(), start + 10);
  EXPECT_EQ(clock.WallSkewMillis(), kDay - 10);  // the wall clock did not move with it

  time.wall_ms -= 2 * kDay;  // and back two
  time.steady_ms += 10;
  EXPECT_EQ(clock.NowMillis(), start + 20);
  EXPECT_EQ(clock.WallSkewMillis(), -kDay - 20);
}

TEST(SteadyWallClockTest, TheProcessClockNeverGoesBack) {
  int64_t last = NowMillis();
  for (int i = 0; i < 10000; ++i) {
    const int64_t now = NowMillis();
    ASSERT_GE(now, last);
    last = now;
  }
}

}  // namespace
}  // namespace kvgov::clock
