#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "kvgov/auth/tokens.h"
#include "kvgov/cert/issuer_key.h"
#include "kvgov/governance/governance_gate.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/journal/journal.h"
#include "kvgov/metrics/registry.h"
#include "kvgov/prompts/cache_breakers.h"
#include "kvgov/router/prediction_score.h"
#include "kvgov/router/router.h"
#include "kvgov/router/worker_status.h"
#include "kvgov/services/directive_driver.h"
#include "kvgov/services/governance_recorder.h"
#include "kvgov/services/lease_service.h"
#include "kvgov/services/quarantine_service.h"
#include "kvgov/services/report_intake.h"
#include "kvgov/services/tenant_salts.h"
#include "kvgov/services/worker_drains.h"
#include "kvgov/server/server.h"
#include "kvgov/store/store.h"
#include "kvgov/transport/zmq_ingest.h"
#include "kvgov/metrics/cache_accounting.h"
#include "kvgov/metrics/traffic_history.h"
#include "server/gateway_upstream.h"
#include "server/handoff.h"
#include "server/periodic_task.h"
#include "server/token_audit.h"
#include "kvgov/ingest/stream_store.h"

namespace kvgov::connectors {
class HealthProber;
class UpstreamConnections;
}  // namespace kvgov::connectors
namespace kvgov::replication {
class Replica;
}  // namespace kvgov::replication

namespace kvgov::spool {
class SpoolDirectory;
}  // namespace kvgov::spool

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

/// The gateway's own metrics: what the engines reported against what kvgov
/// predicted.
struct GatewayMetrics {
  metrics::CounterFamily* retries = nullptr;              // tries on a second candidate
  metrics::CounterFamily* tokenize_mismatches = nullptr;  // {model}
  metrics::CounterFamily* tokenize_failures = nullptr;    // {model}: answered 502
  metrics::CounterFamily* predictions = nullptr;          // {worker,outcome}: exact, over, under
  metrics::CounterFamily* predicted_tokens = nullptr;     // {worker}
  metrics::CounterFamily* cached_tokens = nullptr;        // {worker}: as the engine reported
  metrics::CounterFamily* unaccounted = nullptr;          // answers without usage
  metrics::CounterFamily* handoffs = nullptr;             // {outcome}: HandoffOutcome
  metrics::HistogramFamily* handoff_seconds = nullptr;    // prefill answer -> decode first token
  metrics::CounterFamily* requests = nullptr;             // {endpoint}: requests admitted to a path
  metrics::CounterFamily* bytes_relayed = nullptr;        // answer bytes passed on to clients
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
  static constexpr int64_t kWholeWalkEvery = 3600 * 1000;

  Result<journal::VerifyReport> Verify(const store::Store& store, uint64_t head_seq);

 private:
  std::mutex mu_;
  std::optional<journal::VerifyCursor> cursor_;  // guarded by mu_
  int64_t whole_walk_at_ms_ = 0;                 // guarded by mu_
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
  mutable std::mutex mu_;
  std::set<std::string, std::less<>> tenants_;
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
    Prediction prediction;
  };
  void Add(std::string decision_id, Open open);
  /// The decision's prediction, forgotten here; nullopt when unknown.
  std::optional<Open> Take(std::string_view decision_id);

 private:
  std::mutex mu_;
  std::map<std::string, Open, std::less<>> open_;  // guarded by mu_
  std::deque<std::string> order_;                  // oldest first; guarded by mu_
};

/// Everything the HTTP handlers work on. Built once by BuildDaemon; each
/// member is thread-safe on its own. Members are destroyed in reverse
/// order, so the threads that feed the others (ingest, prober,
/// housekeeping) are declared last and stop first.
struct Daemon {
  explicit Daemon(size_t index_shards);
  ~Daemon();

  ServerOptions options;
  std::unique_ptr<auth::Authenticator> auth;
  std::unique_ptr<cert::IssuerKey> issuer;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<journal::Journal> journal;
  // Every governance write goes through it (a replica's through the log).
  std::unique_ptr<services::GovernanceRecorder> recorder;
  std::unique_ptr<ingest::StreamStore> stream_store;
  ingest::StreamStore::RecoveryStats recovered;  // what start-up brought back
  metrics::Registry metrics;
  index::ResidencyIndex index;
  router::WorkerStatusTable status;
  governance::GovernanceGate gate;
  std::unique_ptr<services::LeaseService> leases;
  std::unique_ptr<services::QuarantineService> quarantines;
  std::unique_ptr<services::TenantSalts> salts;  // keyed by the tenant secret
  std::unique_ptr<services::WorkerDrains> drains;
  std::unique_ptr<router::Router> router;
  std::unique_ptr<metrics::CacheAccounting> accounting;
  std::unique_ptr<services::ReportIntake> reports;  // POST /v1/events and the spool
  // With --redis: governance writes go through the replicated log.
  std::unique_ptr<replication::Replica> replica;
  RouteMetrics route_metrics;
  GatewayMetrics gateway_metrics;
  router::PredictionScores predictions;  // the gateway's, per worker
  TenantsSeen tenants_seen;              // routed for, by /v1/route and the gateway
  OpenPredictions route_predictions;     // /v1/route's, until done
  RouteTotals route_totals;              // counted by /v1/route and the gateway
  HandoffLog handoffs;                   // the gateway's newest, for GET /v1/handoffs
  // Cache breakers in routed prompts; null with --prefix-diagnostics=false.
  std::unique_ptr<prompts::CacheBreakerDetector> breakers;
  metrics::CounterFamily* prefix_avoidable_tokens = nullptr;  // {model,tenant,cause}
  ChainCheck chain_check;                            // /v1/journal/verify and certificate checks
  std::unique_ptr<metrics::TrafficHistory> traffic;  // sampled by `traffic_samples`
  std::unique_ptr<connectors::UpstreamConnections> upstreams;  // the gateway's, to the engines
  std::unique_ptr<services::DirectiveDriver> invalidations;    // outlives ingest: streams call it
  std::optional<TokenAudit> token_audit;  // a single node's; housekeeping's alone after start
  std::unique_ptr<transport::ZmqIngest> ingest;
  std::unique_ptr<connectors::HealthProber> prober;
  std::unique_ptr<PeriodicTask> housekeeping;
  std::unique_ptr<PeriodicTask> group_commit;
  std::unique_ptr<PeriodicTask> traffic_samples;
  std::unique_ptr<spool::SpoolDirectory> spool;  // --spool-dir; feeds the others, so stops first
  std::unique_ptr<PeriodicTask> spool_scans;     // scans `spool`; before it in Stop

  /// True for one of several replicas (serve --redis), from the start:
  /// recovery runs before `replica` exists and must already act as one.
  bool replicated() const { return !options.redis_url.empty(); }

  /// Stops the threads that write (ingest, prober, commits) and snapshots
  /// the streams, so the next start replays nothing. Idempotent.
  void Stop();
};

using services::kDaemonActor;
/// The actor for reports read from the spool directory (kvgov-report).
inline constexpr std::string_view kSpoolActor = "spool";

/// Tells the index that the gateway is sending a salted request to the
/// decision's worker, so that an engine dropping the salt from its events
/// is found out by that request's blocks (ResidencyIndex::ExpectSaltedRoot,
/// ADR 0019). Nothing for an unsalted route, a first block already
/// resident there, or an engine known to report salts. Only for requests
/// kvgov itself sends: a /v1/route decision may never be sent.
void ExpectSaltedBlocks(Daemon& daemon, const router::RouteRequest& request,
                        std::string_view cache_salt, const router::RouteDecision& decision);

/// The HTTP status for a failed governance write: 413 when its record is
/// over the journal's row limit, 503 when the store or the log cannot take
/// it now, 500 otherwise.
int GovernanceWriteHttpStatus(const Status& status);

/// Server::CheckOptions: the checks BuildDaemon makes first.
Status CheckServerOptions(const ServerOptions& options);

/// Builds the daemon: the tenant secret, metric families, accounting,
/// engines registered and their subscribers, prober and housekeeping
/// started.
Result<std::unique_ptr<Daemon>> BuildDaemon(const ServerOptions& options);

}  // namespace kvgov::server
