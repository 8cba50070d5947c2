#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvgov/core/status.h"
#include "kvgov/connectors/openai_upstream.h"
#include "kvgov/core/admission.h"
#include "kvgov/ingest/engine_spec.h"
#include "kvgov/router/router.h"

namespace kvgov::server {

/// How `kvgov serve` is started.
struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8787;  // 0 picks a free port; see Server::port()
  std::string data_dir = "./kvgov-data";
  // When set, the bound port is written here (atomically, by rename) once the
  // listener accepts connections, so a supervisor or test can poll for it.
  std::string ready_file;
  // The OpenAI-compatible gateway (docs/formats/gateway.md): a listener of
  // its own, on when gateway_host is set (port 0 picks a free one, written
  // to gateway_ready_file like ready_file). Same TLS and token rules as the
  // control API.
  std::string gateway_host;
  uint16_t gateway_port = 0;
  std::string gateway_ready_file;
  connectors::UpstreamTimeouts gateway_timeouts;
  // Requests the gateway keeps in flight on one worker at most; a busy
  // worker is skipped, and with every worker busy the answer is 429.
  // 0: no limit.
  uint64_t gateway_max_in_flight = 0;
  // The gateway's event loops (threads); 0: one per core.
  int gateway_loops = 0;
  // Client connections the gateway holds open at most; more are closed as
  // they are accepted.
  size_t gateway_max_connections = 100000;
  // Requests (streams included) the gateway serves at once at most; more
  // are answered 429 with Retry-After.
  uint64_t gateway_max_requests = 16384;
  // A client's request head (line and headers) must be in within this of
  // its first byte; one trickling it (slow-loris) is dropped.
  int64_t gateway_header_timeout_ms = 10000;
  // Cache-breaker detection on routed prompts
  // (docs/formats/prefix-diagnostics.md), compared in granules of this many
  // tokens.
  bool prefix_diagnostics = true;
  uint32_t breaker_granule_tokens = 16;
  // Tenants whose findings may show the few tokens around a breaker, as
  // the engine detokenizes them ("-" for untenanted traffic). Prompts are
  // the tenant's data: none by default.
  std::vector<std::string> prefix_context_tenants;
  // cpp-httplib serves a kept-alive connection on one pool thread until it
  // has been idle for 5 s, so the pool must cover the clients that keep
  // connections open (routers, gateways) or the rest wait behind them.
  int http_threads = 32;
  // PEM files: with both set, the listener speaks HTTPS only.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Engines whose KV-event streams kvgov follows.
  std::vector<ingest::EngineSpec> engines;
  // POST bodies longer than this are refused with 413.
  size_t max_body_bytes = size_t{8} << 20;
  // The route cost model.
  router::RouteWeights route;
  // How often engines with a control URL are probed (/health, /metrics).
  int64_t probe_interval_ms = 1000;
  // 32 bytes from which tenants' cache salts are derived; created (mode 0600)
  // when missing. Empty: <data_dir>/tenant-salt.key.
  std::string tenant_secret_file;
  // Shards of the residency index (docs/adr/0027): engines whose workers
  // fall in different shards apply their events in parallel. 0: one per
  // core.
  size_t index_shards = 0;
  // A worker's residency is snapshotted at most every this many engine
  // batches, and only once the blocks they changed reach the ratio times
  // the last snapshot's blocks (docs/adr/0038).
  uint64_t snapshot_every_batches = 10000;
  double snapshot_log_ratio = 0.25;
  // Unsynced engine-event writes are fsynced together this often.
  int64_t group_commit_ms = 100;
  // Owners whose transfer reports are admitted (trusted at a scope). Reports
  // from any other owner are counted but move no residency: untrusted
  // residency earns no route credit. Configured engines' own event streams
  // are admitted by their configuration.
  std::vector<AdmissionRule> admit;
  // An invalidation whose removals the engines have not shown by then fails
  // with witness_timeout.
  int64_t witness_timeout_ms = 30000;
  // A transport-reported lease that ended (completed, expired, failed) is
  // kept in memory this long, for GET /v1/leases; its journal rows and its
  // stored record stay.
  int64_t lease_retain_ms = 3600000;
  // An engine stream silent this long while the engine's scraped metrics
  // show requests running is reported silent (events off, publisher dead).
  int64_t engine_silence_ms = 30000;
  // A spool directory to ingest complete spool files from
  // (docs/formats/spool.md), looked into this often; empty: none.
  std::string spool_dir;
  int64_t spool_interval_ms = 500;
  // The console's traffic charts (GET /v1/traffic) keep 15 minutes of
  // intervals this long.
  int64_t traffic_interval_ms = 5000;
  // Replicas (docs/adr/0011-replicated-governance-log.md): with a Redis URL,
  // governance writes go through the log on Redis Streams that every
  // replica applies in order. Empty: the single-node embedded system.
  std::string redis_url;
  std::string redis_prefix = "kvgov";  // the keys' prefix, shared by the replicas
  std::string replica_id;              // this replica's name; empty: host + random suffix
  // A replica's claim on a directive (or on housekeeping) lapses this long
  // after its holder stops renewing it; another replica then takes over.
  int64_t claim_ttl_ms = 3000;
  // The history the housekeeper keeps in the stream below the slowest live
  // replica when it trims, and how often it snapshots and trims.
  int64_t log_retain_ms = 600000;
  int64_t snapshot_interval_ms = 30000;
  // Called when this process can no longer serve: another process took
  // its replica id (from a replica thread), or the store failed a write or
  // an fsync (from the writer's thread; docs/adr/0032). Must not block or
  // write to the store; may be called more than once (once per cause).
  // The caller stops the server; serve exits 1.
  std::function<void(const Status&)> on_fatal;
  // The Ed25519 issuer key; replicas share one file so their certificates
  // verify alike. Empty: <data_dir>/issuer.key, created when missing.
  std::string issuer_key_file;
};

/// The kvgov daemon: the HTTP API over the residency index and the
/// governance plane, and the subscribers that follow engine streams.
/// Start() binds and serves on background threads; Shutdown() stops
/// accepting and joins them. Start/Shutdown may be called from different
/// threads; the object must outlive every thread that calls it.
class Server {
 public:
  /// Starts everything. Returns:
  ///  - PermissionDenied when host is not a loopback address and no bearer
  ///    token exists (docs/formats/tokens.md): beyond this machine every
  ///    call must be authenticated;
  ///  - InvalidArgument when the TLS certificate or key cannot be loaded;
  ///  - InvalidArgument for a bad engine list (a repeated id, a bad spec);
  ///  - IOError when the data dir cannot be created or the port is taken.
  static Result<std::unique_ptr<Server>> Start(const ServerOptions& options);

  /// The checks of `options` Start makes before it touches anything (a
  /// repeated engine id, engine specs the prober cannot use, replicas
  /// without shared keys): what `serve --print-config` checks too.
  static Status CheckOptions(const ServerOptions& options);

  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// The port actually bound (useful with port 0).
  uint16_t port() const;

  /// The gateway's port; 0 without a gateway.
  uint16_t gateway_port() const;

  /// Stops accepting, finishes in-flight requests, stops the subscribers,
  /// joins the threads. Idempotent.
  void Shutdown();

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// True for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackHost(const std::string& host);

}  // namespace kvgov::server
