#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/mutex.h"
#include "kvgov/core/status.h"

namespace kvgov::router {

/// Load an engine reports on its own /metrics (vLLM's gauges).
struct ScrapedLoad {
  double running = 0;        // vllm:num_requests_running
  double waiting = 0;        // vllm:num_requests_waiting
  double kv_usage = 0;       // vllm:kv_cache_usage_perc, 0..1
  int64_t scraped_at_ms = 0;
  friend bool operator==(const ScrapedLoad&, const ScrapedLoad&) = default;
};

/// The requests `scraped` showed running; none when never scraped.
inline std::optional<double> RunningRequests(const std::optional<ScrapedLoad>& scraped) {
  return scraped ? std::optional<double>(scraped->running) : std::nullopt;
}

/// What the router knows of one worker besides its residency.
struct WorkerStatus {
  std::string id;
  bool probed = false;     // the engine has a control URL kvgov probes
  bool healthy = false;    // meaningful only when probed; true when not probed
  int consecutive_failures = 0;
  int64_t last_probe_ms = 0;
  std::string last_probe_error;
  bool draining = false;
  std::optional<ScrapedLoad> scraped;
};

/// The part of a worker's status a route decision reads.
struct RouteStatus {
  bool healthy = false;
  bool draining = false;
  std::optional<ScrapedLoad> scraped;
};

/// Health with hysteresis, drain flags and scraped load, per worker.
///
/// Health rules: a probed worker starts unhealthy and turns healthy after one
/// successful probe; it turns unhealthy after `kFailuresToUnhealthy`
/// consecutive failures. A worker without a control URL is not probed and
/// counts as healthy.
///
/// Thread-safe: one mutex; every method takes it briefly.
class WorkerStatusTable {
 public:
  static constexpr int kFailuresToUnhealthy = 2;

  /// Registers a worker. AlreadyExists if known.
  Status Add(std::string_view worker, bool probed);
  Status Remove(std::string_view worker);

  /// Records a probe outcome. NotFound for an unknown worker.
  Status RecordProbe(std::string_view worker, bool ok, int64_t now_ms, std::string error = "");
  Status RecordScrape(std::string_view worker, const ScrapedLoad& load);
  Status SetDraining(std::string_view worker, bool draining);

  std::optional<WorkerStatus> Get(std::string_view worker) const;
  /// The route status of each of `workers`, in their order (nullopt for one
  /// not registered), under one lock and without copying strings: a route
  /// reads every worker's. Fastest when `workers` is sorted by id.
  std::vector<std::optional<RouteStatus>> RouteStatuses(
      std::span<const std::string_view> workers) const;
  std::vector<WorkerStatus> All() const;

 private:
  mutable Mutex mu_;
  std::map<std::string, WorkerStatus, std::less<>> workers_ KVGOV_GUARDED_BY(mu_);
};

}  // namespace kvgov::router
