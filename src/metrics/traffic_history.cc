#include "kvgov/metrics/traffic_history.h"

namespace kvgov::metrics {
namespace {

template <typename T>
T Increase(T now, T before) {
  return now > before ? now - before : T{};
}

}  // namespace

TrafficHistory::TrafficHistory(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

void TrafficHistory::Sample(int64_t now_ms, const TrafficTotals& totals) {
  MutexLock lock(mu_);
  if (sampled_) {
    TrafficPoint point;
    point.end_ms = now_ms;
    point.change.routes = Increase(totals.routes, last_.routes);
    point.change.prompt_blocks = Increase(totals.prompt_blocks, last_.prompt_blocks);
    point.change.credited_blocks = Increase(totals.credited_blocks, last_.credited_blocks);
    for (size_t i = 0; i < kSourceCount; ++i) {
      point.change.saved_tokens[i] = Increase(totals.saved_tokens[i], last_.saved_tokens[i]);
    }
    points_.push_back(point);
    while (points_.size() > capacity_) points_.pop_front();
  }
  sampled_ = true;
  last_ = totals;
}

std::vector<TrafficPoint> TrafficHistory::Points() const {
  MutexLock lock(mu_);
  return {points_.begin(), points_.end()};
}

}  // namespace kvgov::metrics
