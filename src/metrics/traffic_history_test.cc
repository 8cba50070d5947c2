#include "kvgov/metrics/traffic_history.h"

#include <gtest/gtest.h>

namespace kvgov::metrics {
namespace {

TrafficTotals Totals(uint64_t routes, uint64_t asked, uint64_t credited, double ride_engine) {
  TrafficTotals totals;
  totals.routes = routes;
  totals.prompt_blocks = asked;
  totals.credited_blocks = credited;
  totals.saved_tokens[static_cast<size_t>(Source::kRideEngine)] = ride_engine;
  return totals;
}

TEST(TrafficHistoryTest, EachPointIsTheChangeOverItsInterval) {
  TrafficHistory history(3);
  history.Sample(1000, Totals(5, 50, 10, 160));  // the baseline: no point
  EXPECT_TRUE(history.Points().empty());
  history.Sample(6000, Totals(8, 80, 25, 400));
  history.Sample(11000, Totals(8, 80, 25, 400));
  const std::vector<TrafficPoint> points = history.Points();
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].end_ms, 6000);
  EXPECT_EQ(points[0].change.routes, 3u);
  EXPECT_EQ(points[0].change.prompt_blocks, 30u);
  EXPECT_EQ(points[0].change.credited_blocks, 15u);
  EXPECT_DOUBLE_EQ(points[0].change.saved_tokens[static_cast<size_t>(Source::kRideEngine)], 240);
  EXPECT_DOUBLE_EQ(points[0].change.saved_tokens[static_cast<size_t>(Source::kProvider)], 0);
  EXPECT_EQ(points[1].change.routes, 0u);
}

TEST(TrafficHistoryTest, KeepsTheLastIntervalsAndIgnoresResets) {
  TrafficHistory history(2);
  history.Sample(0, Totals(0, 0, 0, 0));
  history.Sample(1, Totals(1, 1, 1, 1));
  history.Sample(2, Totals(3, 3, 3, 3));
  history.Sample(3, Totals(0, 0, 0, 0));  // went down: no negative change
  const std::vector<TrafficPoint> points = history.Points();
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].end_ms, 2);
  EXPECT_EQ(points[0].change.routes, 2u);
  EXPECT_EQ(points[1].change.routes, 0u);
}

}  // namespace
}  // namespace kvgov::metrics
