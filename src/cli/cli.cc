#include "kvgov/cli/cli.h"

#include <CLI/CLI.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kvgov/index/residency_index.h"
#include "kvgov/ingest/engine_spec.h"
#include "kvgov/journal/journal.h"
#include "kvgov/router/router.h"
#include "kvgov/server/server.h"
#include "kvgov/store/store.h"
#include "cli/cert_verify.h"
#include "cli/config_file.h"
#include "cli/demo_command.h"
#include "cli/engines_command.h"
#include "cli/listen.h"
#include "cli/loadgen_command.h"
#include "cli/redis_password.h"
#include "cli/simulate_command.h"
#include "cli/lint_command.h"
#include "cli/spool_command.h"
#include "cli/stop_signals.h"
#include "cli/suggest.h"
#include "cli/token_command.h"
#include "kvgov/cert/issuer_key.h"
#include "kvgov/auth/tenant_secret.h"

#ifndef KVGOV_VERSION
#error "KVGOV_VERSION must be defined by the build"
#endif

namespace kvgov::cli {
namespace {

constexpr const char* kDescription =
    "kvgov: the governance plane for KV caches in LLM serving.\n"
    "It follows the KV-cache events of vLLM and SGLang engines and the reports of\n"
    "KV transports (NIXL, Mooncake, LMCache), knows which blocks live where and\n"
    "under which tenant, and decides what may legally be reused, quarantined or\n"
    "deleted, with a signed audit trail. It moves no KV bytes.";

struct ServeFlags {
  std::string listen = "127.0.0.1:8787";
  std::string data_dir = "./kvgov-data";
  std::string ready_file;
  std::string gateway_listen;  // "": no gateway
  std::string gateway_ready_file;
  int64_t gateway_connect_timeout_ms = 2000;
  int64_t gateway_first_byte_timeout_ms = 60000;
  uint64_t gateway_max_in_flight = 0;
  int gateway_loops = 0;
  size_t gateway_max_connections = 100000;
  uint64_t gateway_max_requests = 16384;
  int64_t gateway_header_timeout_ms = 10000;
  bool prefix_diagnostics = true;
  uint32_t breaker_granule_tokens = 16;
  std::vector<std::string> prefix_context_tenants;
  int http_threads = 32;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::vector<std::string> engines;
  size_t max_body_bytes = size_t{8} << 20;
  router::RouteWeights route;
  int64_t probe_interval_ms = 1000;
  int64_t traffic_interval_ms = 5000;
  std::string tenant_secret_file;
  uint64_t snapshot_every_batches = 10000;
  double snapshot_log_ratio = 0.25;
  size_t index_shards = 0;
  int64_t witness_timeout_ms = 30000;
  int64_t lease_retain_ms = 3600000;
  int64_t engine_silence_ms = 30000;
  std::vector<std::string> admit;
  std::string spool_dir;
  std::string redis_url;
  std::string redis_password_file;
  std::string redis_prefix = "kvgov";
  std::string replica_id;
  int64_t claim_ttl_ms = 3000;
  int64_t log_retain_ms = 600000;
  int64_t snapshot_interval_ms = 30000;
  std::string issuer_key_file;
  bool print_config = false;     // --print-config: print effective_config and exit
  std::string effective_config;  // the merged [serve] section, when print_config
};

int Serve(const ServeFlags& flags) {
  server::ServerOptions options;
  if (Status parsed = ParseListen(flags.listen, &options.host, &options.port); !parsed.ok()) {
    std::fprintf(stderr, "kvgov serve: %s\n", parsed.message().c_str());
    return 2;
  }
  if (!flags.gateway_listen.empty()) {
    if (Status parsed =
            ParseListen(flags.gateway_listen, &options.gateway_host, &options.gateway_port);
        !parsed.ok()) {
      std::fprintf(stderr, "kvgov serve: --gateway-listen: %s\n", parsed.message().c_str());
      return 2;
    }
  }
  options.gateway_ready_file = flags.gateway_ready_file;
  options.gateway_max_in_flight = flags.gateway_max_in_flight;
  options.gateway_loops = flags.gateway_loops;
  options.gateway_max_connections = flags.gateway_max_connections;
  options.gateway_max_requests = flags.gateway_max_requests;
  options.gateway_header_timeout_ms = flags.gateway_header_timeout_ms;
  options.prefix_diagnostics = flags.prefix_diagnostics;
  options.breaker_granule_tokens = flags.breaker_granule_tokens;
  options.prefix_context_tenants = flags.prefix_context_tenants;
  options.http_threads = flags.http_threads;
  options.gateway_timeouts = {flags.gateway_connect_timeout_ms,
                              flags.gateway_first_byte_timeout_ms};
  options.data_dir = flags.data_dir;
  options.ready_file = flags.ready_file;
  options.tls_cert_file = flags.tls_cert_file;
  options.tls_key_file = flags.tls_key_file;
  options.max_body_bytes = flags.max_body_bytes;
  options.route = flags.route;
  options.probe_interval_ms = flags.probe_interval_ms;
  options.traffic_interval_ms = flags.traffic_interval_ms;
  options.tenant_secret_file = flags.tenant_secret_file;
  options.snapshot_every_batches = flags.snapshot_every_batches;
  options.snapshot_log_ratio = flags.snapshot_log_ratio;
  options.index_shards = flags.index_shards;
  options.witness_timeout_ms = flags.witness_timeout_ms;
  options.lease_retain_ms = flags.lease_retain_ms;
  options.engine_silence_ms = flags.engine_silence_ms;
  options.spool_dir = flags.spool_dir;
  options.redis_url = flags.redis_url;
  if (!flags.redis_password_file.empty()) {
    Result<std::string> url = WithRedisPasswordFile(flags.redis_url, flags.redis_password_file);
    if (!url.ok()) {
      std::fprintf(stderr, "kvgov serve: %s\n", url.status().message().c_str());
      return url.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
    options.redis_url = *std::move(url);
  }
  options.redis_prefix = flags.redis_prefix;
  options.replica_id = flags.replica_id;
  options.claim_ttl_ms = flags.claim_ttl_ms;
  options.log_retain_ms = flags.log_retain_ms;
  options.snapshot_interval_ms = flags.snapshot_interval_ms;
  options.issuer_key_file = flags.issuer_key_file;
  for (const std::string& rule : flags.admit) {
    // OWNER or OWNER=SCOPE (fleet or tenant; tenant by default).
    const size_t equals = rule.find('=');
    AdmissionRule admission{rule.substr(0, equals), Scope::kTenant, "config:--admit"};
    if (equals != std::string::npos) {
      Result<Scope> scope = ParseEnum<Scope>(rule.substr(equals + 1));
      if (!scope.ok()) {
        std::fprintf(stderr, "kvgov serve: --admit '%s': %s\n", rule.c_str(),
                     scope.status().message().c_str());
        return 2;
      }
      admission.scope = *scope;
    }
    if (admission.owner.empty()) {
      std::fprintf(stderr, "kvgov serve: --admit '%s': empty owner\n", rule.c_str());
      return 2;
    }
    options.admit.push_back(std::move(admission));
  }
  for (const std::string& spec : flags.engines) {
    Result<ingest::EngineSpec> engine = ingest::ParseEngineSpec(spec);
    if (!engine.ok()) {
      std::fprintf(stderr, "kvgov serve: --engine '%s': %s\n", spec.c_str(),
                   engine.status().message().c_str());
      return 2;
    }
    options.engines.push_back(std::move(engine).value());
  }

  if (flags.print_config) {  // checked as serve checks them; nothing starts
    if (Status checked = server::Server::CheckOptions(options); !checked.ok()) {
      std::fprintf(stderr, "kvgov serve: %s\n", checked.message().c_str());
      return 2;
    }
    std::fputs(flags.effective_config.c_str(), stdout);
    return 0;
  }

  const sigset_t stop_signals = BlockStopSignals();

  // A replica that lost its id, or a store that failed an fsync, stops as
  // if signalled, and exits 1.
  static std::atomic<bool> stopped_on_fatal{false};
  options.on_fatal = [](const Status& why) {
    if (stopped_on_fatal.exchange(true)) return;
    std::fprintf(stderr, "kvgov serve: %s\n", why.ToString().c_str());
    ::kill(::getpid(), SIGTERM);
  };
  Result<std::unique_ptr<server::Server>> started = server::Server::Start(options);
  if (!started.ok()) {
    std::fprintf(stderr, "kvgov serve: %s\n", started.status().ToString().c_str());
    return 1;
  }
  const char* scheme = options.tls_cert_file.empty() ? "http" : "https";
  std::fprintf(stderr,
               "kvgov serve: listening on %s://%s:%u (data dir %s); the console is at "
               "%s://%s:%u/ui/\n",
               scheme, options.host.c_str(), (*started)->port(), options.data_dir.c_str(), scheme,
               options.host.c_str(), (*started)->port());
  if (!options.gateway_host.empty()) {
    std::fprintf(stderr, "kvgov serve: the gateway is at %s://%s:%u/v1\n", scheme,
                 options.gateway_host.c_str(), (*started)->gateway_port());
  }
  if (options.engines.empty()) {
    std::fprintf(stderr,
                 "kvgov serve: warning: no engine is configured, so nothing is followed or "
                 "routed to; add one with --engine id=w1,events=tcp://HOST:PORT,model=NAME or "
                 "engine = [\"id=w1,...\"] under [serve] in the config file\n");
  }

  const int received = WaitForStopSignal(stop_signals);
  std::fprintf(stderr, "kvgov serve: signal %d, shutting down\n", received);
  (*started)->Shutdown();
  return stopped_on_fatal.load() ? 1 : 0;
}

int VerifyJournal(const std::string& data_dir) {
  Result<std::unique_ptr<store::Store>> store = store::Store::Open(data_dir + "/store");
  if (!store.ok()) {
    std::fprintf(stderr, "kvgov journal verify: %s\n", store.status().ToString().c_str());
    return 1;
  }
  Result<journal::VerifyReport> report = journal::Verify(**store);
  if (!report.ok()) {
    std::fprintf(stderr, "kvgov journal verify: %s\n", report.status().ToString().c_str());
    return 1;
  }
  if (report->first_broken_seq.has_value()) {
    std::printf("journal broken at seq %llu: %s (%llu rows before it verify)\n",
                static_cast<unsigned long long>(*report->first_broken_seq), report->problem.c_str(),
                static_cast<unsigned long long>(report->rows));
    return 1;
  }
  std::printf("journal ok: %llu rows\n", static_cast<unsigned long long>(report->rows));
  for (const journal::AdoptedSpan& span : report->adopted) {
    std::printf(
        "  rows %llu-%llu adopted from %s (this replica rejoined; every other replica "
        "holds them)\n",
        static_cast<unsigned long long>(span.first_seq),
        static_cast<unsigned long long>(span.last_seq), span.source.c_str());
  }
  return 0;
}

// `kvgov keygen`: makes each key file that does not exist and keeps the
// ones that do. The output says which, so a second run (or a path that
// already held a key) is not mistaken for fresh keys to copy out.
int RunKeygen(const std::string& issuer_key, const std::string& tenant_secret) {
  auto exists = [](const std::string& path) {
    std::error_code error;
    return std::filesystem::symlink_status(path, error).type() !=
           std::filesystem::file_type::not_found;
  };
  // Looked at before: LoadOrCreate creates exclusively and loads what is
  // there otherwise, and tells the caller neither.
  const bool issuer_existed = exists(issuer_key);
  const bool secret_existed = exists(tenant_secret);
  Result<std::unique_ptr<cert::IssuerKey>> issuer = cert::IssuerKey::LoadOrCreate(issuer_key);
  Result<std::string> secret = issuer.ok() ? auth::LoadOrCreateTenantSecret(tenant_secret)
                                           : Result<std::string>(issuer.status());
  if (!secret.ok()) {
    std::fprintf(stderr, "kvgov keygen: %s\n", secret.status().message().c_str());
    return 1;
  }
  constexpr const char* kKept = "kept: it existed, and was not overwritten";
  std::printf("issuer key %s (key id %s): %s\ntenant secret %s: %s\n", issuer_key.c_str(),
              (*issuer)->key_id().c_str(), issuer_existed ? kKept : "created",
              tenant_secret.c_str(), secret_existed ? kKept : "created");
  if (issuer_existed && secret_existed) {
    std::printf(
        "nothing new was written; to replace a key, move its file away first (every "
        "replica must then get the new copy)\n");
  }
  return 0;
}

}  // namespace

int Run(int argc, char** argv) {
  CLI::App app(kDescription, "kvgov");
  app.require_subcommand(1);
  app.set_version_flag("--version", KVGOV_VERSION);
  // CLI11 reads config files for the top-level app only, so the file is a
  // root option that subcommands accept too (fallthrough); each
  // subcommand's settings sit in its own [section].
  app.set_config("--config", "",
                 "TOML file with the same settings as the flags, one [section] per\n"
                 "subcommand, e.g.\n"
                 "  [serve]\n"
                 "  listen = \"127.0.0.1:8787\"\n"
                 "  engine = [\"id=w1,events=tcp://127.0.0.1:5557,model=llama\"]");
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.fallthrough();  // before add_subcommand: subcommands copy it

  ServeFlags serve_flags;
  CLI::App* serve = app.add_subcommand(
      "serve",
      "Run the kvgov daemon: follow engines' KV-event streams, keep the residency index,\n"
      "and serve the HTTP API (/healthz, /metrics, /v1/workers, POST /v1/events).\n"
      "Example: kvgov serve --listen 127.0.0.1:8787 --data-dir ./kvgov-data");
  serve
      ->add_option("--listen", serve_flags.listen,
                   "HOST:PORT to serve HTTP on; port 0 picks a free port. Beyond loopback\n"
                   "kvgov starts only once a bearer token exists (kvgov token add).")
      ->capture_default_str();
  serve
      ->add_option("--data-dir", serve_flags.data_dir,
                   "Directory for kvgov's durable state; created with mode 0700.")
      ->capture_default_str();
  serve->add_option("--ready-file", serve_flags.ready_file,
                    "Write the bound port to this file once the server accepts\n"
                    "connections (for supervisors and tests that start kvgov on port 0).");
  serve->add_option("--gateway-listen", serve_flags.gateway_listen,
                    "HOST:PORT for the OpenAI-compatible gateway (docs/formats/gateway.md),\n"
                    "a listener of its own beside the control API; off unless given. Its\n"
                    "callers need a token with the infer role once tokens exist.");
  serve->add_option("--gateway-ready-file", serve_flags.gateway_ready_file,
                    "Write the gateway's bound port to this file once it accepts connections.");
  serve
      ->add_option("--gateway-connect-timeout-ms", serve_flags.gateway_connect_timeout_ms,
                   "The gateway's connect timeout to an engine.")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{600000}));
  serve
      ->add_option("--gateway-first-byte-timeout-ms", serve_flags.gateway_first_byte_timeout_ms,
                   "How long the gateway waits for an engine's first byte (and between\n"
                   "chunks) before it tries the next candidate or answers 504.")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{3600000}));
  serve
      ->add_option("--gateway-max-in-flight", serve_flags.gateway_max_in_flight,
                   "Requests the gateway keeps in flight on one worker at most: a busy\n"
                   "worker is skipped, and with every worker busy the answer is 429 with\n"
                   "Retry-After. 0: no limit.")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{0}, uint64_t{1000000}));
  serve
      ->add_option("--gateway-loops", serve_flags.gateway_loops,
                   "The gateway's event-loop threads, which serve every client connection\n"
                   "and engine connection between them. 0: one per core.")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  serve
      ->add_option("--gateway-max-connections", serve_flags.gateway_max_connections,
                   "Client connections the gateway holds open at most; more are closed as\n"
                   "they are accepted. Each needs a file descriptor (ulimit -n).")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{10000000}));
  serve
      ->add_option("--gateway-max-requests", serve_flags.gateway_max_requests,
                   "Requests, streams included, the gateway serves at once at most; more\n"
                   "are answered 429 with Retry-After.")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{10000000}));
  serve
      ->add_option("--gateway-header-timeout-ms", serve_flags.gateway_header_timeout_ms,
                   "A client's request line and headers must arrive within this of its\n"
                   "first byte; a client trickling them (slow-loris) is dropped.")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{600000}));
  serve
      ->add_option("--prefix-diagnostics", serve_flags.prefix_diagnostics,
                   "Look for cache breakers in the prompts the gateway and /v1/route see:\n"
                   "volatile spans early in otherwise static prompts (GET\n"
                   "/v1/diagnostics/prefix). Only keyed hashes of prompts are kept.")
      ->capture_default_str();
  serve
      ->add_option("--breaker-granule-tokens", serve_flags.breaker_granule_tokens,
                   "Prompts are compared in granules of this many tokens: set it to the\n"
                   "engines' block size.")
      ->capture_default_str()
      ->check(CLI::Range(uint32_t{1}, uint32_t{1024}));
  serve->add_option("--prefix-context-tenant", serve_flags.prefix_context_tenants,
                    "A tenant whose cache breakers may show the few tokens around them, as\n"
                    "the engine detokenizes them ('-' for untenanted traffic); repeatable.\n"
                    "Prompts are the tenant's data: none by default.");
  serve
      ->add_option("--http-threads", serve_flags.http_threads,
                   "Threads of each listener (control API, gateway). A kept-alive\n"
                   "connection or a streamed answer holds one for its whole length.")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  serve->add_option("--engine", serve_flags.engines,
                    "Follow an engine's KV-event stream (repeatable). Comma-separated key=value:\n"
                    "  id=w1,kind=vllm|sglang|mooncake,events=tcp://HOST:PORT,model=NAME\n"
                    "  and optionally replay=tcp://HOST:PORT,block-size=16,dp-ranks=1,\n"
                    "  control=http://HOST:PORT, openai=http://HOST:PORT (where the gateway\n"
                    "  sends requests; default: the control URL, as vLLM and SGLang serve both\n"
                    "  on one port), connector=vllm|sglang|lmcache|webhook and\n"
                    "  connector-path=/PATH (webhook). With dp-ranks=N, rank r is at port+r.\n"
                    "  pool-blocks=N (the engine's KV pool in blocks, per rank) sizes the\n"
                    "  index's tables up front: faster ingest, ~40 B per pool block at start.\n"
                    "  role=prefill|decode|both (default both) puts the engine in a model's\n"
                    "  disaggregated pools; a prefill engine takes kv-lease-ms=N (how long it\n"
                    "  pins a handed-over prompt, default 30000) and, for SGLang,\n"
                    "  bootstrap-port=N (default 8998).");
  serve->add_option("--tls-cert", serve_flags.tls_cert_file,
                    "PEM certificate (chain) for HTTPS; with --tls-key, kvgov speaks only HTTPS.");
  serve->add_option("--tls-key", serve_flags.tls_key_file, "PEM private key for --tls-cert.");
  serve
      ->add_option("--max-body-bytes", serve_flags.max_body_bytes,
                   "Refuse POST bodies longer than this with 413.")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));

  router::RouteWeights& route = serve_flags.route;
  const std::string weights = "Route cost";
  serve
      ->add_option("--route-overlap-weight", route.overlap_weight,
                   "Cost of each prompt block the worker would still prefill.")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(weights);
  serve
      ->add_option("--route-hbm-credit", route.tier_credit[0],
                   "Share of a block's prefill saved when it is resident in HBM.")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0))
      ->group(weights);
  serve
      ->add_option("--route-dram-credit", route.tier_credit[1],
                   "The same for a block resident only in host DRAM.")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0))
      ->group(weights);
  serve
      ->add_option("--route-disk-credit", route.tier_credit[2],
                   "The same for a block resident only on disk.")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0))
      ->group(weights);
  serve
      ->add_option("--route-remote-credit", route.tier_credit[3],
                   "The same for a block only in a remote tier (an object store, a shared\n"
                   "file system, another machine's pool), which the engine must fetch first.")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0))
      ->group(weights);
  serve
      ->add_option("--route-unrouted-request-blocks", route.unrouted_request_blocks,
                   "Load, in blocks, of each request an engine reports that kvgov did not\n"
                   "route itself.")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(weights);
  serve
      ->add_option("--route-pull-weight", route.pull_weight,
                   "Cost of each prompt block a decode worker pulls from a prefill worker's\n"
                   "pin (a disaggregated model's decode step), against 1 per block of prefill.")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(weights);
  serve
      ->add_option("--route-cache-pressure-weight", route.cache_pressure_weight,
                   "Added to the overlap weight, per block a worker would prefill, in\n"
                   "proportion to how full its cache is against the fullest worker's.")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(weights);
  serve
      ->add_option("--route-decode-load-weight", route.decode_load_weight,
                   "Load of each prompt block of a routed request past its first token (it\n"
                   "decodes), against 1 per block of prefill it still has to do.")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(weights);
  serve
      ->add_option("--route-busy-load-blocks", route.busy_load_blocks,
                   "A worker whose load reaches this many blocks is busy and not routed to;\n"
                   "0 turns the limit off.")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(weights);
  serve
      ->add_option("--route-temperature", route.temperature,
                   "0 picks the lowest cost; above 0 samples by softmax over costs.")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(weights);
  serve->add_option("--route-seed", route.seed, "Seed of the sampling generator.")
      ->capture_default_str()
      ->group(weights);
  serve
      ->add_option("--route-decision-ttl-ms", route.decision_ttl_ms,
                   "A decision not released by POST /v1/route/{id}/done releases its load\n"
                   "after this long.")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}))
      ->group(weights);
  serve
      ->add_option("--probe-interval-ms", serve_flags.probe_interval_ms,
                   "How often engines with a control URL are probed (/health, /metrics).")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{10}, int64_t{3600000}));
  serve
      ->add_option("--traffic-interval-ms", serve_flags.traffic_interval_ms,
                   "The console's traffic charts (GET /v1/traffic) show 15 minutes in\n"
                   "intervals this long.")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{60000}));
  serve
      ->add_option("--index-shards", serve_flags.index_shards,
                   "Shards of the residency index (docs/adr/0027): engines in different\n"
                   "shards apply their events in parallel; a prefix held in several\n"
                   "shards is kept once in each, and a route reads each shard in turn.\n"
                   "0: one per core.")
      ->capture_default_str()
      ->check(CLI::Range(size_t{0}, index::ResidencyIndex::kMaxShards));
  serve
      ->add_option("--snapshot-every-batches", serve_flags.snapshot_every_batches,
                   "Snapshot a worker's residency into the store at most every this many\n"
                   "engine batches; recovery re-applies only the batches after the last\n"
                   "snapshot.")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{100000000}));
  serve
      ->add_option("--snapshot-log-ratio", serve_flags.snapshot_log_ratio,
                   "...and only once the blocks the batches since the last snapshot stored\n"
                   "or removed reach this many times the blocks that snapshot held, so a\n"
                   "big worker is not rewritten for every few blocks it changes\n"
                   "(docs/adr/0038). 0: by the batch count alone.")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  serve->add_option("--admit", serve_flags.admit,
                    "Admit transfer reports from this owner (repeatable), as OWNER or\n"
                    "OWNER=SCOPE (tenant or fleet; tenant by default). Reports from other\n"
                    "owners are counted but move no residency and earn no route credit.");
  serve
      ->add_option("--witness-timeout-ms", serve_flags.witness_timeout_ms,
                   "An invalidation fails (witness_timeout) when the engines' own event\n"
                   "streams have not shown the removal by then.")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{10}, int64_t{86400000}));
  serve
      ->add_option("--lease-retain-ms", serve_flags.lease_retain_ms,
                   "A transport-reported lease that ended is listed by GET /v1/leases\n"
                   "this long, then forgotten from memory (its journal rows stay).")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1000}, int64_t{604800000}));
  serve
      ->add_option("--engine-silence-ms", serve_flags.engine_silence_ms,
                   "An engine whose event stream has been silent this long while its\n"
                   "scraped metrics show requests running is reported silent\n"
                   "(kvgov_engine_silent, GET /v1/workers): events not enabled, or its\n"
                   "publisher died.")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{86400000}));
  serve->add_option("--spool-dir", serve_flags.spool_dir,
                    "Ingest complete spool files (*.ndjson) written into this directory,\n"
                    "every 500 ms, then rename each to .done or .rejected\n"
                    "(docs/formats/spool.md). Created (mode 0700) when missing.");
  serve->add_option("--tenant-secret-file", serve_flags.tenant_secret_file,
                    "32-byte secret tenants' cache salts are derived from; created (mode\n"
                    "0600) when missing. Default: <data-dir>/tenant-salt.key.");
  serve->add_option("--issuer-key", serve_flags.issuer_key_file,
                    "The Ed25519 key deletion certificates are signed with; created (mode\n"
                    "0600) when missing. Default: <data-dir>/issuer.key. Replicas (--redis)\n"
                    "share one file, which must exist (kvgov keygen).");
  const std::string replicas = "Replicas (docs/adr/0011-replicated-governance-log.md)";
  serve
      ->add_option("--redis", serve_flags.redis_url,
                   "redis://[:PASSWORD@]HOST[:PORT][/DB]: run as one of several replicas\n"
                   "sharing governance through a log on Redis Streams. Needs --issuer-key\n"
                   "and --tenant-secret-file, the same files on every replica. Without it\n"
                   "kvgov is a single node.")
      ->group(replicas);
  serve
      ->add_option("--redis-password-file", serve_flags.redis_password_file, kRedisPasswordFileHelp)
      ->group(replicas);
  serve
      ->add_option("--redis-prefix", serve_flags.redis_prefix,
                   "Prefix of every Redis key kvgov uses; the replicas of one fleet share it.")
      ->capture_default_str()
      ->group(replicas);
  serve
      ->add_option("--replica-id", serve_flags.replica_id,
                   "This replica's name in the log and its claims. Default: host name and a\n"
                   "random suffix. Keep it across restarts to resume its own claims at once.")
      ->group(replicas);
  serve
      ->add_option("--claim-ttl-ms", serve_flags.claim_ttl_ms,
                   "A replica's claim on a directive (or on housekeeping) lapses this long\n"
                   "after it stops renewing it; another replica then takes the work over.")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{300}, int64_t{600000}))
      ->group(replicas);
  serve
      ->add_option("--log-retain-ms", serve_flags.log_retain_ms,
                   "History the housekeeper keeps in the governance stream below the slowest\n"
                   "live replica when it trims: a replica away for less catches up from the\n"
                   "log, a longer one from the snapshot.")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{30LL * 24 * 3600 * 1000}))
      ->group(replicas);
  serve
      ->add_option("--snapshot-interval-ms", serve_flags.snapshot_interval_ms,
                   "How often the housekeeper writes the governance snapshot to Redis and\n"
                   "trims the stream.")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{24LL * 3600 * 1000}))
      ->group(replicas);
  serve
      ->add_flag("--print-config", serve_flags.print_config,
                 "Print the effective settings (flags over --config over defaults) as a\n"
                 "TOML [serve] section that --config loads, and exit 0 without starting.")
      ->configurable(false);

  SimulateFlags simulate_flags;
  CLI::App* simulate = AddSimulateCommand(app, simulate_flags);
  DemoFlags demo_flags;
  CLI::App* demo = AddDemoCommand(app, demo_flags);
  EnginesFlags engines_flags;
  CLI::App* engines = AddEnginesCommand(app, engines_flags);
  TokenFlags token_flags;
  CLI::App* token = AddTokenCommand(app, token_flags);
  LoadgenFlags loadgen_flags;
  CLI::App* loadgen = AddLoadgenCommand(app, loadgen_flags);
  IngestSpoolFlags ingest_spool_flags;
  CLI::App* ingest_spool = AddIngestSpoolCommand(app, ingest_spool_flags);
  LintFlags lint_flags;
  CLI::App* lint = AddLintCommand(app, lint_flags);

  app.add_subcommand("version", "Print kvgov's version and exit.");

  std::string cert_file;
  std::vector<std::string> cert_issuer_keys;
  std::string cert_data_dir;
  CLI::App* cert = app.add_subcommand("cert", "Work with signed deletion certificates.");
  cert->require_subcommand(1);
  CLI::App* cert_verify = cert->add_subcommand(
      "verify",
      "Check a deletion certificate offline: schema, fields, id, Ed25519 signature, a trusted\n"
      "issuer and, with --data-dir, its anchor in the audit journal. Prints one line per check;\n"
      "exits 0 only when all hold.");
  cert_verify->add_option("FILE", cert_file, "The certificate (JSON).")->required();
  cert_verify->add_option("--issuer-key", cert_issuer_keys,
                          "A trusted issuer's public key, 64 hex digits (repeatable).");
  cert_verify->add_option("--data-dir", cert_data_dir,
                          "A kvgov data dir (not in use by a running kvgov): trusts its issuer\n"
                          "key and checks the journal anchor.");

  std::string keygen_issuer_key;
  std::string keygen_tenant_secret;
  CLI::App* keygen = app.add_subcommand(
      "keygen",
      "Make the keys kvgov replicas share (serve --redis): an Ed25519 issuer key and a tenant\n"
      "secret, each mode 0600. An existing file is kept, not replaced (the output says which\n"
      "were kept). Copy both to every replica.");
  keygen->add_option("--issuer-key", keygen_issuer_key, "Where the issuer key goes.")->required();
  keygen->add_option("--tenant-secret-file", keygen_tenant_secret, "Where the tenant secret goes.")
      ->required();

  std::string journal_data_dir = "./kvgov-data";
  CLI::App* journal = app.add_subcommand(
      "journal",
      "Inspect the audit journal of a kvgov data dir. It opens the store, which a running\n"
      "kvgov holds: stop kvgov first, or point --data-dir at a copy.");
  journal->require_subcommand(1);
  CLI::App* verify = journal->add_subcommand(
      "verify",
      "Walk the hash chain: every row decodes, seqs have no holes, every hash and payload\n"
      "digest recomputes. Prints the first broken row and exits 1, or exits 0.");
  verify->add_option("--data-dir", journal_data_dir, "kvgov's data dir.")->capture_default_str();

  // A config file is checked first, so its errors name the line and key.
  ConfigLines config_lines;
  if (const std::string config = ConfigPathFromArgs(argc, argv); !config.empty()) {
    Result<ConfigLines> checked = CheckConfigFile(config, app);
    if (!checked.ok()) {
      std::fprintf(stderr, "kvgov: config %s\n", checked.status().message().c_str());
      return 2;
    }
    config_lines = std::move(checked).value();
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() == 0) return app.exit(error);  // --help, --version
    // A suggestion explains an unexpected argument, or a subcommand CLI11
    // did not recognise, better than CLI11's own words for either, so those
    // words are left out when there is one.
    const std::string suggestions = Suggestions(app, argc, argv);
    std::fputs(suggestions.c_str(), stderr);
    const bool explained = dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr ||
                           dynamic_cast<const CLI::RequiredError*>(&error) != nullptr;
    if (suggestions.empty() || !explained) {
      app.exit(error);
    } else {
      std::fputs("Run with --help for more information.\n", stderr);
    }
    // A bad value from the file: say where it was written.
    for (const auto& [flag, where] : config_lines) {
      if (std::string_view(error.what()).find(flag + ":") != std::string_view::npos) {
        std::fprintf(stderr, "(%s comes from %s)\n", flag.c_str(), where.c_str());
      }
    }
    return 2;
  }

  if (app.got_subcommand("version")) {
    std::printf("kvgov %s\n", KVGOV_VERSION);
    return 0;
  }
  if (app.got_subcommand(serve)) {
    if (serve_flags.print_config) {
      Result<std::string> text = FormatConfigSection(*serve);
      if (!text.ok()) {
        std::fprintf(stderr, "kvgov serve --print-config: %s\n", text.status().message().c_str());
        return 2;
      }
      serve_flags.effective_config = std::move(text).value();
    }
    return Serve(serve_flags);
  }
  if (app.got_subcommand(simulate)) return RunSimulate(simulate_flags);
  if (app.got_subcommand(demo)) return RunDemo(demo_flags);
  if (app.got_subcommand(engines)) return RunEngines(engines_flags);
  if (app.got_subcommand(token)) return RunToken(token_flags);
  if (app.got_subcommand(loadgen)) return RunLoadgenCommand(loadgen_flags);
  if (app.got_subcommand(ingest_spool)) return RunIngestSpool(ingest_spool_flags);
  if (app.got_subcommand(lint)) return RunLint(lint_flags);
  if (verify->parsed()) return VerifyJournal(journal_data_dir);
  if (keygen->parsed()) return RunKeygen(keygen_issuer_key, keygen_tenant_secret);
  if (cert_verify->parsed()) return RunCertVerify(cert_file, cert_issuer_keys, cert_data_dir);
  return 2;
}

}  // namespace kvgov::cli
