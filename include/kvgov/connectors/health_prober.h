#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvgov/core/mutex.h"
#include "kvgov/core/status.h"
#include "kvgov/ingest/engine_spec.h"
#include "kvgov/router/worker_status.h"

namespace kvgov::connectors {

struct HealthProberOptions {
  int64_t probe_interval_ms = 1000;    // pause between the end of one round and the next
  int64_t timeout_ms = 1000;           // connect, read and write timeout of each request
  size_t max_metrics_bytes = 4 << 20;  // a longer /metrics body is dropped unparsed
};

/// Probes the control API of every engine that has one and feeds the
/// outcome into a WorkerStatusTable.
///
/// One background thread runs rounds: a round starts at once on Start and
/// then `probe_interval_ms` after the previous round ended. In a round, for
/// each engine with a control URL, in order:
///   GET <control>/health: a 2xx answer is a success; any other status, a
///     connection error or a timeout is a failure with a short error text.
///     The outcome is recorded for every worker of the engine (all its
///     data-parallel ranks share the engine's health).
///   GET <control>/metrics, only after a successful /health: when the body
///     parses (router::ParseEngineMetrics), its load is recorded for every
///     worker of the engine. A failed scrape records nothing, so the last
///     load stays, with its scraped_at_ms telling its age.
/// Engines without a control URL are not probed at all.
///
/// The workers must be registered in the table (probed = true) by whoever
/// owns it; outcomes for unregistered workers are dropped. Nothing thrown
/// inside the thread escapes it.
///
/// Ownership: borrows `table`, which must outlive the prober.
/// Thread-safety: Start and Stop may be called from any thread; Stop is
/// idempotent and the destructor calls it. Only the prober's own thread
/// issues requests; Stop also aborts the one in flight.
class HealthProber {
 public:
  HealthProber(router::WorkerStatusTable* table, std::vector<ingest::EngineSpec> engines,
               HealthProberOptions options = {});
  ~HealthProber();
  HealthProber(const HealthProber&) = delete;
  HealthProber& operator=(const HealthProber&) = delete;

  /// Checks every engine that has a control URL: the URL must be
  /// http://HOST[:PORT][/] (https is not supported yet), and the engine's
  /// workers must expand (ingest::StreamsFor). InvalidArgument naming the
  /// engine otherwise. Engines without a control URL always pass.
  static Status Validate(const std::vector<ingest::EngineSpec>& engines);

  /// Parses the control URLs and starts the thread (none when no engine has
  /// a control URL). Returns InvalidArgument as Validate does, or for an
  /// interval or timeout that is not positive; FailedPrecondition when
  /// called a second time or after Stop; Internal when the thread cannot be
  /// started.
  Status Start();

  /// Wakes the thread at once, aborts its request in flight and joins it.
  /// When two threads call Stop at the same time, only the first one waits
  /// for the prober's thread to end.
  void Stop();

 private:
  struct Target;  // one engine with a control URL: its HTTP client and workers

  void Run();
  void ProbeEngine(Target& target);
  bool Stopping() const;

  router::WorkerStatusTable* const table_;
  const std::vector<ingest::EngineSpec> engines_;
  const HealthProberOptions options_;
  // Built by Start before the thread exists and never changed after, so the
  // thread reads it without the lock.
  std::vector<std::unique_ptr<Target>> targets_;

  mutable Mutex mu_;
  std::condition_variable_any wake_;
  bool started_ KVGOV_GUARDED_BY(mu_) = false;
  bool stopping_ KVGOV_GUARDED_BY(mu_) = false;
  std::thread thread_ KVGOV_GUARDED_BY(mu_);  // moved out by Stop
};

}  // namespace kvgov::connectors
