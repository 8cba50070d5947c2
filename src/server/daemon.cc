#include "server/daemon.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <chrono>
#include <set>
#include <thread>

#include "kvgov/clock/clock.h"
#include "kvgov/connectors/health_prober.h"
#include "kvgov/connectors/openai_upstream.h"
#include "kvgov/log/log.h"
#include "kvgov/ingest/engine_diagnostics.h"
#include "kvgov/replication/replica.h"
#include "kvgov/services/replicated_governance.h"
#include "kvgov/spool/spool_directory.h"
#include "kvgov/auth/entropy.h"
#include "kvgov/codec/config_api.h"
#include "server/route_http.h"
#include "kvgov/auth/tenant_secret.h"

namespace kvgov::server {
namespace {

// Engine-stream and residency metrics are read at scrape time from the
// streams' own counters and the index, so the ingest hot path touches no
// registry lock.
Status RegisterEngineMetrics(Daemon& daemon) {
  metrics::Registry& registry = daemon.metrics;
  using metrics::FamilyOptions;
  KVGOV_ASSIGN_OR_RETURN(
      auto* events,
      registry.AddCallbackCounter({"kvgov_engine_events_total",
                                   "Engine KV events applied to the residency index, by worker and "
                                   "event type.",
                                   {"worker", "type"}}));
  KVGOV_ASSIGN_OR_RETURN(auto* gaps, registry.AddCallbackCounter(
                                         {"kvgov_engine_seq_gaps_total",
                                          "Forward gaps in an engine stream's sequence numbers.",
                                          {"worker"}}));
  KVGOV_ASSIGN_OR_RETURN(
      auto* replays,
      registry.AddCallbackCounter({"kvgov_engine_replays_total",
                                   "Replay requests made to repair gaps, by outcome (ok: every "
                                   "missing batch came back; failed: the worker was marked stale).",
                                   {"worker", "outcome"}}));
  KVGOV_ASSIGN_OR_RETURN(auto* restarts,
                         registry.AddCallbackCounter(
                             {"kvgov_engine_restarts_total",
                              "Engine restarts detected (sequence going backwards with a newer "
                              "batch timestamp); the worker is cleared.",
                              {"worker"}}));
  KVGOV_ASSIGN_OR_RETURN(auto* duplicates, registry.AddCallbackCounter(
                                               {"kvgov_engine_duplicates_total",
                                                "Redelivered batches dropped by sequence number.",
                                                {"worker"}}));
  KVGOV_ASSIGN_OR_RETURN(auto* decode_errors,
                         registry.AddCallbackCounter(
                             {"kvgov_engine_decode_errors_total",
                              "Engine messages skipped because they did not decode, by reason.",
                              {"worker", "reason"}}));
  KVGOV_ASSIGN_OR_RETURN(auto* blocks,
                         registry.AddCallbackGauge({"kvgov_residency_blocks",
                                                    "KV blocks resident per worker and tier.",
                                                    {"worker", "tier"}}));
  KVGOV_ASSIGN_OR_RETURN(
      auto* stale, registry.AddCallbackGauge({"kvgov_worker_stale",
                                              "1 while a worker's residency cannot be believed (an "
                                              "unrepaired gap); its blocks then do not count.",
                                              {"worker"}}));
  KVGOV_ASSIGN_OR_RETURN(
      auto* store_pending,
      registry.AddCallbackGauge(
          {"kvgov_store_pending_bytes",
           "Bytes of applied engine batches handed to the store's writer and not yet written "
           "(docs/adr/0038): what a kill -9 would leave to the engines' replay.",
           {}}));
  KVGOV_ASSIGN_OR_RETURN(
      auto* stale_seconds,
      registry.AddCallbackGauge({"kvgov_worker_stale_seconds",
                                 "How long a worker has been stale, by the reason it went stale "
                                 "(gap_lost, replay_rolled_over, replay_unanswered, "
                                 "stale_before_restart); absent while it is live.",
                                 {"worker", "reason"}}));
  KVGOV_ASSIGN_OR_RETURN(
      auto* catch_ups,
      registry.AddCallbackCounter({"kvgov_engine_catch_ups_total",
                                   "Catch-ups through the replay socket at each connection to the "
                                   "engine, by outcome (ok: kvgov holds every batch the engine "
                                   "published; failed: the worker was marked stale).",
                                   {"worker", "outcome"}}));
  KVGOV_ASSIGN_OR_RETURN(auto* orphans,
                         registry.AddCallbackCounter(
                             {"kvgov_engine_orphan_blocks_total",
                              "Stored blocks whose parent kvgov never saw (a missed batch or a "
                              "restarted engine); they are not indexed.",
                              {"worker"}}));
  KVGOV_ASSIGN_OR_RETURN(
      auto* drift,
      registry.AddCallbackCounter({"kvgov_engine_hash_drift_blocks_total",
                                   "Blocks an engine stored again under a new hash for the same "
                                   "tokens: its hash seed changed (PYTHONHASHSEED unset).",
                                   {"worker"}}));
  KVGOV_ASSIGN_OR_RETURN(
      auto* salts,
      registry.AddCallbackGauge({"kvgov_engine_salts",
                                 "1 for a worker's salt reporting (ADR 0019): reported (its events "
                                 "carry extra keys), not_reported (a salted request came back "
                                 "without the salt: tenant routes avoid it), unknown (no evidence "
                                 "yet); 0 for the other two.",
                                 {"worker", "state"}}));
  KVGOV_ASSIGN_OR_RETURN(
      auto* salt_blind,
      registry.AddCallbackCounter({"kvgov_engine_salt_blind_blocks_total",
                                   "Blocks of a salted request that the engine published without "
                                   "the salt; they are not indexed.",
                                   {"worker"}}));
  KVGOV_ASSIGN_OR_RETURN(
      auto* silent_seconds,
      registry.AddCallbackGauge({"kvgov_engine_silent_seconds",
                                 "Seconds since the engine stream's last batch (since kvgov began "
                                 "following it, when it has sent none).",
                                 {"worker"}}));
  KVGOV_ASSIGN_OR_RETURN(auto* silent,
                         registry.AddCallbackGauge(
                             {"kvgov_engine_silent",
                              "1 while the engine stream has been silent for --engine-silence-ms "
                              "although the engine's scraped metrics show requests running.",
                              {"worker"}}));

  Daemon* state = &daemon;
  return registry
      .RegisterCollector([=](metrics::CollectorSink& sink) {
        if (state->stream_store) {
          sink.Emit(store_pending, {}, static_cast<double>(state->stream_store->pending_bytes()));
        }
        for (const index::WorkerResidency& worker : state->index.Workers()) {
          for (size_t i = 0; i < index::kIndexedTiers.size(); ++i) {
            const ResidencyTier tier = index::kIndexedTiers[i];
            sink.Emit(blocks,
                      {worker.id, tier == ResidencyTier::kUnknown ? "unknown" : ToString(tier)},
                      static_cast<double>(worker.blocks[i]));
          }
          sink.Emit(stale, {worker.id}, worker.state == index::WorkerState::kStale ? 1.0 : 0.0);
          for (index::SaltReporting reporting :
               {index::SaltReporting::kUnknown, index::SaltReporting::kReported,
                index::SaltReporting::kNotReported}) {
            sink.Emit(salts, {worker.id, index::ToString(reporting)},
                      worker.salts == reporting ? 1.0 : 0.0);
          }
        }
        if (!state->ingest) return;
        const int64_t now_ms = clock::NowMillis();
        for (const transport::StreamView& view : state->ingest->Streams()) {
          const ingest::StreamStats& stats = *view.stats;
          const std::string_view worker = view.worker;
          for (size_t i = 0; i < stats.events.size(); ++i) {
            sink.Emit(events, {worker, ingest::StreamStats::kEventTypes[i]},
                      static_cast<double>(stats.events[i].load()));
          }
          for (size_t i = 0; i < stats.decode_errors.size(); ++i) {
            sink.Emit(decode_errors, {worker, ingest::StreamStats::kDecodeErrorReasons[i]},
                      static_cast<double>(stats.decode_errors[i].load()));
          }
          sink.Emit(gaps, {worker}, static_cast<double>(stats.seq_gaps.load()));
          sink.Emit(replays, {worker, "ok"}, static_cast<double>(stats.replays_ok.load()));
          sink.Emit(replays, {worker, "failed"}, static_cast<double>(stats.replays_failed.load()));
          sink.Emit(restarts, {worker}, static_cast<double>(stats.restarts.load()));
          sink.Emit(duplicates, {worker}, static_cast<double>(stats.duplicates.load()));
          sink.Emit(catch_ups, {worker, "ok"}, static_cast<double>(stats.catch_ups_ok.load()));
          sink.Emit(catch_ups, {worker, "failed"},
                    static_cast<double>(stats.catch_ups_failed.load()));
          const ingest::EngineDiagnostics diagnosis = ingest::DiagnoseEngine(
              stats, router::RunningRequests(state->router->LoadOf(view.worker).scraped), now_ms,
              state->options.engine_silence_ms);
          sink.Emit(orphans, {worker}, static_cast<double>(diagnosis.orphan_blocks));
          sink.Emit(drift, {worker}, static_cast<double>(diagnosis.hash_drift_blocks));
          sink.Emit(salt_blind, {worker}, static_cast<double>(diagnosis.salt_blind_blocks));
          sink.Emit(silent_seconds, {worker}, static_cast<double>(diagnosis.silent_for_ms) / 1e3);
          sink.Emit(silent, {worker}, diagnosis.silent_while_busy ? 1.0 : 0.0);
          if (diagnosis.stale_reason != ingest::StaleReason::kNone) {
            sink.Emit(stale_seconds, {worker, ingest::ToString(diagnosis.stale_reason)},
                      static_cast<double>(diagnosis.stale_for_ms) / 1e3);
          }
        }
      })
      .status();
}

// The gateway's request path's families, and the handoffs'.
Result<services::Handoffs::Metrics> RegisterGatewayMetrics(Daemon& daemon) {
  GatewayMetrics& gateway = daemon.gateway_metrics;
  KVGOV_ASSIGN_OR_RETURN(
      gateway.requests,
      daemon.metrics.AddCounter({"kvgov_gateway_requests_total",
                                 "Gateway requests by endpoint (completions, chat/completions), "
                                 "counted as they reach the request path.",
                                 {"endpoint"}}));
  KVGOV_ASSIGN_OR_RETURN(gateway.bytes_relayed,
                         daemon.metrics.AddCounter(
                             {"kvgov_gateway_relayed_bytes_total",
                              "Bytes of engines' answers the gateway passed on to its clients."}));
  gateway.bytes_relayed->WithLabels({});
  KVGOV_ASSIGN_OR_RETURN(
      gateway.retries,
      daemon.metrics.AddCounter({"kvgov_gateway_upstream_retries_total",
                                 "Gateway requests tried again on the next candidate because the "
                                 "first engine gave no byte or a 5xx before any byte reached the "
                                 "client."}));
  gateway.retries->WithLabels({});
  KVGOV_ASSIGN_OR_RETURN(
      gateway.tokenize_failures,
      daemon.metrics.AddCounter({"kvgov_gateway_tokenize_failures_total",
                                 "Gateway requests answered 502 because no engine of the model "
                                 "could tokenize them (unreachable, or a tokenizer that lacks "
                                 "the request's form, e.g. chat on an older SGLang), by model.",
                                 {"model"}}));
  services::Handoffs::Metrics handoffs;
  KVGOV_ASSIGN_OR_RETURN(
      handoffs.outcomes,
      daemon.metrics.AddCounter({"kvgov_gateway_handoffs_total",
                                 "Disaggregated gateway requests by how their prefill/decode "
                                 "handoff ended: completed, unpinned (the prefill answer carried "
                                 "no KV to pull), prefill_failed, decode_failed, withdrawn (span "
                                 "quarantined or under invalidation), expired (the pin's lease "
                                 "ran out first), client_gone.",
                                 {"outcome"}}));
  for (const auto& [value, spelling] : EnumSpelling<gateway::HandoffOutcome>::kValues) {
    handoffs.outcomes->WithLabels({std::string(spelling)});
  }
  KVGOV_ASSIGN_OR_RETURN(
      handoffs.seconds,
      daemon.metrics.AddHistogram({"kvgov_gateway_handoff_seconds",
                                   "Time from the prefill worker's answer (SGLang: the dispatch of "
                                   "both legs) to the decode worker's first token (a whole "
                                   "answer's arrival, when not streamed)."},
                                  metrics::ExponentialBuckets(1e-3, 2, 16)));
  return handoffs;
}

// Governance state by state, read at scrape time.
Status RegisterGovernanceGauges(Daemon& daemon) {
  KVGOV_ASSIGN_OR_RETURN(auto* invalidations,
                         daemon.metrics.AddCallbackGauge(
                             {"kvgov_invalidations",
                              "Invalidation directives by state (planned, dispatched, "
                              "acknowledged, witnessed, certified, failed), since the data dir "
                              "was created.",
                              {"state"}}));
  KVGOV_ASSIGN_OR_RETURN(auto* leases, daemon.metrics.AddCallbackGauge(
                                           {"kvgov_leases", "NIXL leases by state.", {"state"}}));
  KVGOV_ASSIGN_OR_RETURN(
      auto* quarantined,
      daemon.metrics.AddCallbackGauge({"kvgov_quarantined_blocks", "Blocks under quarantine."}));
  KVGOV_ASSIGN_OR_RETURN(
      auto* clock_skew,
      daemon.metrics.AddCallbackGauge(
          {"kvgov_clock_wall_skew_seconds",
           "The wall clock minus kvgov's clock, which is the wall clock at start advanced by the "
           "monotonic clock (ADR 0033): how far the wall clock stepped since; kvgov takes the "
           "step at its next start."}));
  Daemon* state = &daemon;
  return daemon.metrics
      .RegisterCollector([=](metrics::CollectorSink& sink) {
        std::map<NIXLLeaseState, uint64_t> counts = state->leases->CountByState(clock::NowMillis());
        for (const auto& [value, spelling] : EnumSpelling<NIXLLeaseState>::kValues) {
          sink.Emit(leases, {spelling}, static_cast<double>(counts[value]));
        }
        sink.Emit(quarantined, {}, static_cast<double>(state->gate.quarantined_blocks()));
        sink.Emit(clock_skew, {},
                  static_cast<double>(clock::ProcessClock().WallSkewMillis()) / 1000.0);
        if (state->invalidations) {
          for (const auto& [name, count] : state->invalidations->CountByState()) {
            sink.Emit(invalidations, {name}, static_cast<double>(count));
          }
        }
      })
      .status();
}

Status RegisterRouteMetrics(Daemon& daemon) {
  KVGOV_ASSIGN_OR_RETURN(
      daemon.route_metrics.decisions,
      daemon.metrics.AddCounter({"kvgov_route_decisions_total",
                                 "Route calls by outcome: routed, no_eligible_worker, "
                                 "unknown_model, bad_request, forbidden.",
                                 {"outcome"}}));
  KVGOV_ASSIGN_OR_RETURN(
      daemon.route_metrics.overlap,
      daemon.metrics.AddHistogram({"kvgov_route_overlap_blocks",
                                   "Credited prefix overlap of the chosen worker, in blocks."},
                                  {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}));
  KVGOV_ASSIGN_OR_RETURN(
      daemon.route_metrics.latency,
      daemon.metrics.AddHistogram({"kvgov_route_latency_seconds",
                                   "Time to decide a route, from the handler's start (its body "
                                   "decoded there) to the decision."},
                                  metrics::ExponentialBuckets(1e-5, 2, 16)));
  KVGOV_ASSIGN_OR_RETURN(
      daemon.route_metrics.diversions,
      daemon.metrics.AddCounter({"kvgov_quarantine_diversions_total",
                                 "Requests (gateway and /v1/route) whose prompt crosses a "
                                 "quarantined span, sent under a diverted salt so that no engine "
                                 "reuses the quarantined KV, by model and tenant.",
                                 {"model", "tenant"}}));
  KVGOV_ASSIGN_OR_RETURN(
      daemon.route_metrics.predicted_tokens,
      daemon.metrics.AddCounter({"kvgov_route_predicted_tokens_total",
                                 "Prompt tokens /v1/route predicted cached on the chosen worker, "
                                 "by model and tenant: a prediction, never a saving "
                                 "(kvgov_prefill_tokens_saved_total counts what engines "
                                 "reported).",
                                 {"model", "tenant"}}));
  KVGOV_ASSIGN_OR_RETURN(
      auto* evicted,
      daemon.metrics.AddCallbackCounter(
          {"kvgov_route_decisions_evicted_total",
           "Route decisions released before their done or their ttl because 1,048,576 were in "
           "flight: callers of /v1/route that never report done."}));
  Daemon* state = &daemon;
  return daemon.metrics
      .RegisterCollector([=](metrics::CollectorSink& sink) {
        if (state->router) {
          sink.Emit(evicted, {}, static_cast<double>(state->router->decisions_evicted()));
        }
      })
      .status();
}

Status RegisterReplicaMetrics(Daemon& daemon) {
  KVGOV_ASSIGN_OR_RETURN(auto* connected,
                         daemon.metrics.AddCallbackGauge(
                             {"kvgov_replica_log_connected",
                              "1 while this replica reads the governance log on Redis; 0 while "
                              "it cannot (governance writes are then refused with 503)."}));
  KVGOV_ASSIGN_OR_RETURN(auto* housekeeper,
                         daemon.metrics.AddCallbackGauge(
                             {"kvgov_replica_housekeeper",
                              "1 while this replica holds the housekeeping claim (it records "
                              "lease expiries for every replica)."}));
  KVGOV_ASSIGN_OR_RETURN(auto* rejected,
                         daemon.metrics.AddCallbackCounter(
                             {"kvgov_replica_log_rejected_entries_total",
                              "Governance log entries skipped by every replica alike: they did "
                              "not decode, or no replica could apply them."}));
  KVGOV_ASSIGN_OR_RETURN(auto* refused,
                         daemon.metrics.AddCallbackCounter(
                             {"kvgov_replica_log_refused_entries_total",
                              "Governance log entries every replica refused alike because the "
                              "log had overtaken them: a lease write that is no legal step from "
                              "the lease's record (a concurrent write on another replica won)."}));
  KVGOV_ASSIGN_OR_RETURN(auto* duplicates,
                         daemon.metrics.AddCallbackCounter(
                             {"kvgov_replica_log_duplicate_entries_total",
                              "Governance log entries applied once already (a writer sent its "
                              "append again after the reply was lost), skipped."}));
  KVGOV_ASSIGN_OR_RETURN(auto* installs,
                         daemon.metrics.AddCallbackCounter(
                             {"kvgov_replica_snapshot_installs_total",
                              "Times this replica installed the governance snapshot because the "
                              "log was trimmed past what it had applied (it was away longer "
                              "than --log-retain-ms)."}));
  Daemon* state = &daemon;
  return daemon.metrics
      .RegisterCollector([=](metrics::CollectorSink& sink) {
        if (!state->replica) return;
        sink.Emit(connected, {}, state->replica->connected() ? 1.0 : 0.0);
        sink.Emit(housekeeper, {}, state->replica->housekeeper() ? 1.0 : 0.0);
        sink.Emit(rejected, {}, static_cast<double>(state->replica->rejected_entries()));
        sink.Emit(refused, {}, static_cast<double>(state->replica->refused_entries()));
        sink.Emit(duplicates, {}, static_cast<double>(state->replica->duplicate_entries()));
        sink.Emit(installs, {}, static_cast<double>(state->replica->snapshot_installs()));
      })
      .status();
}

// Replicas share the issuer key and the tenant secret the operator
// distributes: a key made here would sign certificates the other replicas'
// issuer does not match, and salt tenants' blocks differently.
Status CheckReplicaSecrets(const ServerOptions& options) {
  if (options.issuer_key_file.empty() || options.tenant_secret_file.empty()) {
    return Status::InvalidArgument(
        "--redis needs --issuer-key FILE and --tenant-secret-file FILE, the same files on every "
        "replica (make them once with `kvgov keygen`)");
  }
  for (const std::string& path : {options.issuer_key_file, options.tenant_secret_file}) {
    if (!std::filesystem::exists(path)) {
      return Status::InvalidArgument("'" + path +
                                     "' does not exist; replicas load shared keys, they never "
                                     "create them (make them once with `kvgov keygen`)");
    }
  }
  return Status::Ok();
}

Result<std::string> DefaultReplicaId() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  KVGOV_ASSIGN_OR_RETURN(std::string suffix, auth::RandomHexId());
  return std::string(host[0] != '\0' ? host : "kvgov") + "-" + suffix.substr(0, 8);
}

}  // namespace

Daemon::Daemon(size_t index_shards) : index(index::BlockKeyHasher(), index_shards) {}
Daemon::~Daemon() { Stop(); }

void Daemon::Stop() {
  if (spool) spool->Cancel();
  if (spool_scans) spool_scans->Stop();
  if (ingest) ingest->Stop();
  // Before the dispatcher: a write it is waiting on returns at once.
  if (replica) replica->Stop();
  if (invalidations) invalidations->Stop();
  if (prober) prober->Stop();
  if (upstreams) upstreams->CloseIdle();
  if (housekeeping) housekeeping->Stop();
  if (traffic_samples) traffic_samples->Stop();
  if (group_commit) group_commit->Stop();
  if (stream_store) {
    if (Status snapped = stream_store->SnapshotAll(); !snapped.ok()) {
      log::Line(log::Level::kError, "store.snapshot_failed")
          .Field("detail", "at shutdown")
          .Field("error", snapped.ToString());
    }
  }
  if (store) (void)store->SyncWal();
}

std::string DescribeConfig(const Daemon& daemon) {
  ConfigView config;
  config.weights = daemon.router->weights();
  config.probe_interval_ms = daemon.options.probe_interval_ms;
  config.max_body_bytes = daemon.options.max_body_bytes;
  config.spool_dir = daemon.options.spool_dir;
  config.engines = daemon.options.engines;
  if (daemon.replica) {
    Result<replication::RedisEndpoint> redis = replication::ParseRedisUrl(daemon.options.redis_url);
    config.replica =
        ReplicaConfigView{daemon.replica->id(),         redis.ok() ? redis->Describe() : "",
                          daemon.options.redis_prefix,  daemon.options.claim_ttl_ms,
                          daemon.options.log_retain_ms, daemon.options.snapshot_interval_ms,
                          daemon.replica->connected(),  daemon.replica->housekeeper(),
                          daemon.replica->applied_id()};
  }
  return EncodeConfigJson(config);
}

Status CheckServerOptions(const ServerOptions& options) {
  std::set<std::string> ids;
  for (const ingest::EngineSpec& engine : options.engines) {
    if (!ids.insert(engine.id).second) {
      return Status::InvalidArgument("engine id '" + engine.id + "' is given twice");
    }
  }
  KVGOV_RETURN_IF_ERROR(connectors::HealthProber::Validate(options.engines));
  if (!options.redis_url.empty()) KVGOV_RETURN_IF_ERROR(CheckReplicaSecrets(options));
  return Status::Ok();
}

Result<std::unique_ptr<Daemon>> BuildDaemon(const ServerOptions& options) {
  KVGOV_RETURN_IF_ERROR(CheckServerOptions(options));
  const bool replicated = !options.redis_url.empty();
  size_t shards = options.index_shards;
  if (shards == 0) shards = std::max(1u, std::thread::hardware_concurrency());
  auto daemon = std::make_unique<Daemon>(shards);
  daemon->options = options;
  if (replicated && daemon->options.replica_id.empty()) {
    KVGOV_ASSIGN_OR_RETURN(daemon->options.replica_id, DefaultReplicaId());
  }
  const std::string secret_path = options.tenant_secret_file.empty()
                                      ? options.data_dir + "/tenant-salt.key"
                                      : options.tenant_secret_file;
  KVGOV_ASSIGN_OR_RETURN(std::string tenant_secret, auth::LoadOrCreateTenantSecret(secret_path));
  daemon->salts = std::make_unique<services::TenantSalts>(std::move(tenant_secret), &daemon->index,
                                                          &daemon->gate);
  daemon->auth = std::make_unique<auth::Authenticator>(auth::TokenFilePath(options.data_dir),
                                                       !IsLoopbackHost(options.host));
  KVGOV_RETURN_IF_ERROR(daemon->auth->Load());
  KVGOV_ASSIGN_OR_RETURN(daemon->issuer,
                         cert::IssuerKey::LoadOrCreate(options.issuer_key_file.empty()
                                                           ? options.data_dir + "/issuer.key"
                                                           : options.issuer_key_file));
  KVGOV_ASSIGN_OR_RETURN(
      daemon->store, store::Store::Open(options.data_dir + "/store",
                                        {.on_fatal = options.on_fatal, .hold_compactions = true}));
  KVGOV_ASSIGN_OR_RETURN(daemon->journal, journal::Journal::Open(daemon->store.get()));
  daemon->recorder =
      std::make_unique<services::GovernanceRecorder>(daemon->journal.get(), replicated);
  daemon->stream_store = std::make_unique<ingest::StreamStore>(
      daemon->store.get(), &daemon->index,
      ingest::StreamStore::Options{
          .snapshot_every = std::max<uint64_t>(1, options.snapshot_every_batches),
          .snapshot_log_ratio = std::max(0.0, options.snapshot_log_ratio)});
  KVGOV_ASSIGN_OR_RETURN(daemon->accounting, metrics::CacheAccounting::Create(&daemon->metrics));
  KVGOV_ASSIGN_OR_RETURN(daemon->usage,
                         services::UsageAccounting::Create(daemon->accounting.get(),
                                                           &daemon->predictions, &daemon->metrics));
  KVGOV_RETURN_IF_ERROR(RegisterEngineMetrics(*daemon));
  KVGOV_RETURN_IF_ERROR(RegisterRouteMetrics(*daemon));
  KVGOV_ASSIGN_OR_RETURN(const services::Handoffs::Metrics handoff_metrics,
                         RegisterGatewayMetrics(*daemon));
  KVGOV_RETURN_IF_ERROR(RegisterGovernanceGauges(*daemon));
  daemon->salting = std::make_unique<services::RouteSalting>(
      daemon->salts.get(), &daemon->gate, &daemon->index, daemon->route_metrics.diversions);
  daemon->upstreams = std::make_unique<connectors::UpstreamConnections>(options.gateway_timeouts);
  daemon->engines = std::make_unique<services::Engines>(
      options.engines, &daemon->index, daemon->upstreams.get(), BodyLimits(options.max_body_bytes));
  KVGOV_ASSIGN_OR_RETURN(daemon->leases, services::LeaseService::Create(
                                             &daemon->gate, &daemon->index, daemon->store.get(),
                                             daemon->recorder.get(), &daemon->metrics,
                                             {.retain_ended_ms = options.lease_retain_ms}));
  daemon->quarantines = std::make_unique<services::QuarantineService>(
      &daemon->gate, daemon->store.get(), daemon->recorder.get());
  daemon->drains = std::make_unique<services::WorkerDrains>(&daemon->status, daemon->store.get(),
                                                            daemon->recorder.get());
  daemon->reports =
      std::make_unique<services::ReportIntake>(AdmissionPolicy(options.admit), &daemon->index,
                                               daemon->accounting.get(), daemon->leases.get());
  daemon->handoffs = std::make_unique<services::Handoffs>(
      daemon->leases.get(), &daemon->gate, &daemon->index, daemon->engines.get(), handoff_metrics);
  KVGOV_RETURN_IF_ERROR(RegisterReplicaMetrics(*daemon));
  std::unique_ptr<prompts::CacheBreakerDetector> breakers;
  metrics::CounterFamily* avoidable_tokens = nullptr;
  if (options.prefix_diagnostics) {
    prompts::DetectorOptions detector;
    detector.granule_tokens = options.breaker_granule_tokens;
    KVGOV_RETURN_IF_ERROR(
        auth::FillRandom(std::span(reinterpret_cast<char*>(&detector.key), sizeof(detector.key))));
    breakers = std::make_unique<prompts::CacheBreakerDetector>(detector);
    KVGOV_ASSIGN_OR_RETURN(
        avoidable_tokens,
        daemon->metrics.AddCounter(
            {"kvgov_prefix_avoidable_prefill_tokens_total",
             "Prompt tokens the engine recomputed only because of a cache breaker earlier in the "
             "prompt (docs/formats/prefix-diagnostics.md), by model, tenant and cause (breaker, "
             "reordering).",
             {"model", "tenant", "cause"}}));
  }
  daemon->prefixes = std::make_unique<services::PrefixWatch>(
      std::move(breakers), options.prefix_context_tenants, avoidable_tokens);
  daemon->router = std::make_unique<router::Router>(&daemon->index, &daemon->status, options.route,
                                                    &daemon->gate);
  metrics::CacheAccounting* accounting = daemon->accounting.get();
  ingest::StreamStore* stream_store = daemon->stream_store.get();
  Daemon* const wired = daemon.get();
  const services::Engines* engines = daemon->engines.get();
  KVGOV_ASSIGN_OR_RETURN(
      daemon->invalidations,
      services::DirectiveDriver::Create(
          {.index = &daemon->index,
           .gate = &daemon->gate,
           .salts = daemon->salts.get(),
           .recorder = daemon->recorder.get(),
           .store = daemon->store.get(),
           .issuer = daemon->issuer.get(),
           .engines = {
               .engine_of = [engines](std::string_view worker) { return engines->Of(worker); },
               .stream_seq = [wired](std::string_view worker) -> int64_t {
                 if (!wired->ingest) return -1;
                 for (const transport::StreamView& view : wired->ingest->Streams()) {
                   if (view.worker == worker) return view.stats->last_seq.load();
                 }
                 return -1;
               }}},
          &daemon->metrics,
          {.witness_timeout_ms = options.witness_timeout_ms,
           .claim_ttl_ms = options.claim_ttl_ms}));
  services::DirectiveDriver* invalidations = daemon->invalidations.get();
  // Before the streams start: a removal they catch up on must find its
  // directive.
  KVGOV_RETURN_IF_ERROR(invalidations->Recover());
  const auto recovery_started = std::chrono::steady_clock::now();
  ingest::StreamStore::RecoveryStats* recovered = &daemon->recovered;
  daemon->ingest = std::make_unique<transport::ZmqIngest>(
      &daemon->index, [accounting](const Entry& entry) { accounting->Record(entry); },
      transport::ReplayLimits{}, stream_store,
      [stream_store, recovered](ingest::EngineStream& stream) {
        return stream_store->Recover(stream, recovered);
      },
      ingest::StreamObserver{
          .event = [invalidations](
                       std::string_view worker, uint64_t seq,
                       const EngineEvent& event) { invalidations->Observe(worker, seq, event); },
          .restart = [invalidations](
                         std::string_view worker,
                         uint64_t seq) { invalidations->ObserveRestart(worker, seq); }});
  KVGOV_RETURN_IF_ERROR(daemon->ingest->AddEngines(options.engines));
  for (const ingest::EngineSpec& engine : options.engines) {
    KVGOV_ASSIGN_OR_RETURN(std::vector<ingest::StreamSpec> streams, ingest::StreamsFor(engine));
    for (const ingest::StreamSpec& stream : streams) {
      KVGOV_RETURN_IF_ERROR(daemon->status.Add(stream.worker, !engine.control.empty()));
    }
  }
  log::Line(log::Level::kInfo, "recovery.done")
      .Field("snapshot_blocks", static_cast<uint64_t>(recovered->snapshot_blocks))
      .Field("logged_batches", static_cast<uint64_t>(recovered->logged_batches))
      .Field("journal_seq", static_cast<uint64_t>(daemon->journal->head_seq()))
      .Field("ms", static_cast<int64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::steady_clock::now() - recovery_started)
                                            .count()));
  // Governance state: leases whose time ran out while kvgov was down are
  // journaled as expired by a single node.
  KVGOV_RETURN_IF_ERROR(daemon->drains->Recover());
  KVGOV_RETURN_IF_ERROR(daemon->salts->Recover(*daemon->store));
  KVGOV_RETURN_IF_ERROR(daemon->leases->Recover(clock::NowMillis()));
  KVGOV_RETURN_IF_ERROR(daemon->quarantines->Recover());
  // Recovered: the compaction held since the store opened may take a core.
  KVGOV_RETURN_IF_ERROR(daemon->store->ResumeCompactions());
  if (replicated) {
    // After the local state is back: the log's newer entries apply over it.
    replication::ReplicaOptions replica;
    replica.redis_url = options.redis_url;
    replica.key_prefix = options.redis_prefix;
    replica.replica_id = daemon->options.replica_id;
    replica.token_path = auth::TokenFilePath(options.data_dir);
    replica.claim_ttl = std::chrono::milliseconds(options.claim_ttl_ms);
    replica.log_retain = std::chrono::milliseconds(options.log_retain_ms);
    replica.snapshot_interval = std::chrono::milliseconds(options.snapshot_interval_ms);
    auto governance = std::make_shared<services::ReplicatedGovernance>(
        daemon->leases.get(), daemon->quarantines.get(), daemon->salts.get(),
        daemon->invalidations.get(), daemon->drains.get());
    replication::Replica::Hooks hooks;
    hooks.apply = [governance](const replication::LogEntry& entry) { governance->Apply(entry); };
    hooks.guard = [governance](const replication::LogEntry& entry) {
      return governance->Guard(entry);
    };
    hooks.fatal = options.on_fatal;
    KVGOV_ASSIGN_OR_RETURN(
        daemon->replica,
        replication::Replica::Start(std::move(replica), daemon->journal.get(), daemon->store.get(),
                                    daemon->router.get(), std::move(hooks)));
    daemon->recorder->AttachReplica(daemon->replica.get());
    // The log's tokens reached the token file while the replica caught up:
    // read them now, not at the first reload after the listener opens.
    KVGOV_RETURN_IF_ERROR(daemon->auth->Load());
  }
  if (Status started =
          daemon->recorder
              ->Record(kDaemonActor, "serve.start", "config", DescribeConfig(*daemon), {})
              .status();
      !started.ok()) {
    // A single node whose journal cannot take the row does not start; a
    // replica without Redis serves on local state until the log returns.
    if (!replicated) return started;
    log::Line(log::Level::kWarn, "governance.write_failed")
        .Field("kind", "serve.start")
        .Field("error", started.ToString());
  }
  if (!replicated) {
    // After serve.start: the rows of changes made while kvgov was down
    // follow the start that found them.
    KVGOV_ASSIGN_OR_RETURN(daemon->token_audit,
                           services::TokenAudit::Load(daemon->auth.get(), daemon->store.get(),
                                                      daemon->recorder.get()));
    KVGOV_RETURN_IF_ERROR(daemon->token_audit->CatchUp());
  }
  daemon->invalidations->CallRecoveredOwners();
  daemon->prober = std::make_unique<connectors::HealthProber>(
      &daemon->status, options.engines,
      connectors::HealthProberOptions{.probe_interval_ms = options.probe_interval_ms});
  KVGOV_RETURN_IF_ERROR(daemon->prober->Start());
  router::Router* router = daemon->router.get();
  Daemon* state = daemon.get();
  // Lease expiry takes effect at every route's clock; this timer records it
  // in the journal and the metrics soon after, without waiting for an event.
  daemon->housekeeping =
      std::make_unique<PeriodicTask>(std::chrono::milliseconds(100), [router, state] {
        const int64_t now = clock::NowMillis();
        router->ExpireDecisions(now);
        // One replica records expiries for all; the others' routes see an
        // expired lease by the clock until its record arrives.
        if (!state->replica || state->replica->housekeeper()) {
          state->leases->ExpireDue(now);
        }
        state->invalidations->Tick(now);
        state->leases->ForgetEnded(now);
        if (state->token_audit) state->token_audit->CatchUpOrLog();
      });
  const int64_t traffic_interval_ms = std::max<int64_t>(100, options.traffic_interval_ms);
  daemon->traffic_interval_ms = traffic_interval_ms;
  daemon->traffic = std::make_unique<metrics::TrafficHistory>(
      static_cast<size_t>(int64_t{15} * 60 * 1000 / traffic_interval_ms));
  daemon->traffic->Sample(clock::NowMillis(), daemon->route_totals.Read(*daemon->accounting));
  daemon->traffic_samples =
      std::make_unique<PeriodicTask>(std::chrono::milliseconds(traffic_interval_ms), [state] {
        state->traffic->Sample(clock::NowMillis(), state->route_totals.Read(*state->accounting));
      });
  store::Store* store = daemon->store.get();
  daemon->group_commit = std::make_unique<PeriodicTask>(
      std::chrono::milliseconds(std::max<int64_t>(1, options.group_commit_ms)),
      // Said once per failure, not every interval while a disk stays full.
      [store, failing = std::string()]() mutable {
        Status synced = store->SyncWal();
        if (synced.ok() && !failing.empty()) {
          log::Line(log::Level::kInfo, "store.group_commit_resumed");
        } else if (!synced.ok() && synced.ToString() != failing) {
          log::Line(log::Level::kError, "store.group_commit_failed")
              .Field("error", synced.ToString());
        }
        failing = synced.ok() ? std::string() : synced.ToString();
      });
  if (!options.spool_dir.empty()) {
    KVGOV_ASSIGN_OR_RETURN(daemon->spool,
                           spool::SpoolDirectory::Open(
                               options.spool_dir,
                               [reports = daemon->reports.get()](const IngestEvent& event) {
                                 return reports->Apply(event, kSpoolActor, clock::NowMillis());
                               },
                               &daemon->metrics));
    spool::SpoolDirectory* spool = daemon->spool.get();
    daemon->spool_scans = std::make_unique<PeriodicTask>(
        std::chrono::milliseconds(std::max<int64_t>(1, options.spool_interval_ms)),
        [spool] { spool->Scan(); });
  }
  return daemon;
}

}  // namespace kvgov::server
