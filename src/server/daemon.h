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
#include "kvgov/router/prediction_score.h"
#include "kvgov/router/router.h"
#include "kvgov/router/worker_status.h"
#include "kvgov/services/directive_driver.h"
#include "kvgov/services/engines.h"
#include "kvgov/services/governance_recorder.h"
#include "kvgov/services/handoffs.h"
#include "kvgov/services/lease_service.h"
#include "kvgov/services/prefix_watch.h"
#include "kvgov/services/quarantine_service.h"
#include "kvgov/services/report_intake.h"
#include "kvgov/services/route_salting.h"
#include "kvgov/services/tenant_salts.h"
#include "kvgov/services/token_audit.h"
#include "kvgov/services/worker_drains.h"
#include "kvgov/server/server.h"
#include "kvgov/store/store.h"
#include "kvgov/transport/zmq_ingest.h"
#include "kvgov/metrics/cache_accounting.h"
#include "kvgov/metrics/traffic_history.h"
#include "server/periodic_task.h"
#include "kvgov/ingest/stream_store.h"
#include "kvgov/services/usage_accounting.h"
#include "server/route_state.h"

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

/// The composition root: every service, table and thread of a running
/// kvgov, built once by BuildDaemon and wired by it and by server.cc, which
/// hand each route file, timer and stream only the members it uses. Each
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
  router::PredictionScores predictions;              // the gateway's and /v1/route's, per worker
  std::unique_ptr<services::UsageAccounting> usage;  // engines' usage against predictions
  std::unique_ptr<services::ReportIntake> reports;   // POST /v1/events and the spool
  // With --redis: governance writes go through the replicated log.
  std::unique_ptr<replication::Replica> replica;
  RouteMetrics route_metrics;
  GatewayMetrics gateway_metrics;
  std::unique_ptr<services::RouteSalting> salting;   // /v1/route's and the gateway's
  TenantsSeen tenants_seen;                          // routed for, by /v1/route and the gateway
  OpenPredictions route_predictions;                 // /v1/route's, until done
  RouteTotals route_totals;                          // counted by /v1/route and the gateway
  std::unique_ptr<services::PrefixWatch> prefixes;   // cache breakers in routed prompts
  ChainCheck chain_check;                            // /v1/journal/verify and certificate checks
  std::unique_ptr<metrics::TrafficHistory> traffic;  // sampled by `traffic_samples`
  int64_t traffic_interval_ms = 0;                   // every this often
  // The gateway's connections to the engines, and their tokenizers'.
  std::unique_ptr<connectors::UpstreamConnections> upstreams;
  std::unique_ptr<services::Engines> engines;    // --engine, looked up
  std::unique_ptr<services::Handoffs> handoffs;  // the gateway's prefill/decode handoffs
  std::unique_ptr<services::DirectiveDriver> invalidations;  // outlives ingest: streams call it
  std::optional<services::TokenAudit>
      token_audit;  // a single node's; housekeeping's alone after start
  std::unique_ptr<transport::ZmqIngest> ingest;
  std::unique_ptr<connectors::HealthProber> prober;
  std::unique_ptr<PeriodicTask> housekeeping;
  std::unique_ptr<PeriodicTask> group_commit;
  std::unique_ptr<PeriodicTask> traffic_samples;
  std::unique_ptr<spool::SpoolDirectory> spool;  // --spool-dir; feeds the others, so stops first
  std::unique_ptr<PeriodicTask> spool_scans;     // scans `spool`; before it in Stop

  /// Stops the threads that write (ingest, prober, commits) and snapshots
  /// the streams, so the next start replays nothing. Idempotent.
  void Stop();
};

using services::kDaemonActor;
/// The actor for reports read from the spool directory (kvgov-report).
inline constexpr std::string_view kSpoolActor = "spool";

/// The settings in effect (GET /v1/config's body), as JSON text; the
/// journal records it at every start.
std::string DescribeConfig(const Daemon& daemon);

/// Server::CheckOptions: the checks BuildDaemon makes first.
Status CheckServerOptions(const ServerOptions& options);

/// Builds the daemon: the tenant secret, metric families, accounting,
/// engines registered and their subscribers, prober and housekeeping
/// started.
Result<std::unique_ptr<Daemon>> BuildDaemon(const ServerOptions& options);

}  // namespace kvgov::server
