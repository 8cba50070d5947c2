#pragma once

// Internal to kvgov_server: the state the routes keep between calls, and
// their metric families. The root (daemon.h) owns one of each; a route
// file is handed the ones it uses.

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "kvgov/core/mutex.h"
#include "kvgov/journal/journal.h"
#include "kvgov/metrics/cache_accounting.h"
#include "kvgov/metrics/registry.h"
#include "kvgov/metrics/traffic_history.h"
#include "kvgov/router/prediction_score.h"
#include "kvgov/router/router.h"
#include "kvgov/store/store.h"

namespace kvgov::server {

/// The route call's own metrics.
struct RouteMetrics {
  metrics::CounterFamily* decisions = nullptr;  // {outcome}
  metrics::HistogramFamily* overlap = nullptr;  // credited overlap blocks of the choice
  metrics::HistogramFamily* latency = nullptr;  // seconds spent deciding
  // {model,tenant}: requests sent under a diverted salt (they cross a
  // quarantine), by /v1/route and the gateway.
  metrics::CounterFamily* diversions = nullptr;
  // {model,tenant}: prompt tokens /v1/route predicted cached, never counted
  // as saved (only an engine's reported usage is).
  metrics::CounterFamily* predicted_tokens = nullptr;
};

/// The gateway's request path's own metrics (what engines reported against
/// kvgov's predictions is services::UsageAccounting's; the handoffs',
/// Handoffs').
struct GatewayMetrics {
  metrics::CounterFamily* retries = nullptr;            // tries on a second candidate
  metrics::CounterFamily* tokenize_failures = nullptr;  // {model}: answered 502
  metrics::CounterFamily* requests = nullptr;           // {endpoint}: requests admitted to a path
  metrics::CounterFamily* bytes_relayed = nullptr;      // answer bytes passed on to clients
};

/// What the routes that chose a worker asked and were credited, since
/// start: the console's traffic charts sample it (metrics::TrafficHistory).
///
/// Thread-safe: atomics.
class RouteTotals {
 public:
  void Count(const router::RouteDecision& decision);
  /// The totals now, with the accounting's saved tokens by source.
  metrics::TrafficTotals Read(const metrics::CacheAccounting& accounting) const;

 private:
  std::atomic<uint64_t> routes_{0};
  std::atomic<uint64_t> prompt_blocks_{0};
  std::atomic<uint64_t> credited_blocks_{0};
};

/// journal::Verify for the running daemon, resumed where it stopped: each
/// call checks only the rows appended since the last (journal::VerifyFrom),
/// however often the console or a caller asks. A row already checked is
/// read again by the whole walk this makes at most every kWholeWalkEvery
/// (and by `kvgov journal verify`), which finds a store edited under rows
/// once verified.
///
/// Thread-safe: one mutex, held for the walk, so concurrent callers wait
/// for one walk rather than each making their own.
class ChainCheck {
 public:
  static constexpr int64_t kWholeWalkEvery = int64_t{3600} * 1000;

  Result<journal::VerifyReport> Verify(const store::Store& store, uint64_t head_seq);

 private:
  Mutex mu_;
  std::optional<journal::VerifyCursor> cursor_ KVGOV_GUARDED_BY(mu_);
  int64_t whole_walk_at_ms_ KVGOV_GUARDED_BY(mu_) = 0;
};

/// The tenants routes have been made for since start, so that a governance
/// write naming a tenant kvgov has never seen can say so. Bounded: past
/// kMaxTenants it stops noting (and then warns of nothing it has not seen).
///
/// Thread-safe: one mutex.
class TenantsSeen {
 public:
  static constexpr size_t kMaxTenants = 65536;
  void Note(const std::string& tenant);
  bool Contains(std::string_view tenant) const;

 private:
  mutable Mutex mu_;
  std::set<std::string, std::less<>> tenants_ KVGOV_GUARDED_BY(mu_);
};

/// The predictions of /v1/route decisions not yet reported done, so that
/// the engine's usage a caller reports on done is held against what kvgov
/// predicted, as the gateway does for its own requests. Bounded: past
/// kMaxOpen the oldest is forgotten (a done for it then counts its usage
/// with no prediction to score).
///
/// Thread-safe: one mutex.
class OpenPredictions {
 public:
  static constexpr size_t kMaxOpen = 65536;
  struct Open {
    std::string worker;
    router::Prediction prediction;
  };
  void Add(std::string decision_id, Open open);
  /// The decision's prediction, forgotten here; nullopt when unknown.
  std::optional<Open> Take(std::string_view decision_id);

 private:
  Mutex mu_;
  std::map<std::string, Open, std::less<>> open_ KVGOV_GUARDED_BY(mu_);
  std::deque<std::string> order_ KVGOV_GUARDED_BY(mu_);  // oldest first
};

}  // namespace kvgov::server
