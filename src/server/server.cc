#include "kvgov/log/log.h"
#include "kvgov/server/server.h"

#include <arpa/inet.h>
#include <sys/stat.h>

#include <httplib.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "gateway/front_door.h"
#include "kvgov/auth/tokens.h"
#include "kvgov/codec/gateway_api.h"
#include "kvgov/core/mutex.h"
#include "kvgov/server/http_listener.h"
#include "server/console_api.h"
#include "server/daemon.h"
#include "kvgov/services/engines.h"
#include "server/fleet_api.h"
#include "server/gateway.h"
#include "server/governance_api.h"
#include "server/handoff_api.h"
#include "server/operations_api.h"
#include "server/prefix_diagnostics_api.h"
#include "server/route_http.h"
#include "server/routing_api.h"

namespace kvgov::server {
namespace {

Status EnsureDataDir(const std::string& data_dir) {
  std::error_code error;
  std::filesystem::create_directories(data_dir, error);
  if (error) {
    return Status::IOError("data dir '" + data_dir + "': " + error.message());
  }
  // The data dir will hold secrets (issuer key, token hashes): owner only.
  if (::chmod(data_dir.c_str(), 0700) != 0) {
    return Status::IOError("data dir '" + data_dir + "': chmod 0700: " + std::strerror(errno));
  }
  return Status::Ok();
}

Status WriteReadyFile(const std::string& path, uint16_t port) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << port << "\n";
    if (!out.flush()) return Status::IOError("ready file '" + temp + "': write failed");
  }
  std::error_code error;
  std::filesystem::rename(temp, path, error);
  if (error) return Status::IOError("ready file '" + path + "': " + error.message());
  return Status::Ok();
}

}  // namespace

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6);
  }
  return false;
}

namespace {

// Words for a refusal cpp-httplib makes before any handler runs (so every
// error answer has a body): what was wrong and what to do about it.
std::string DescribeListenerRefusal(const httplib::Request& request, int status, size_t max_body) {
  switch (status) {
    case 404:
      return "no route for " + request.method + " " + request.path;
    case 413:
      return BodyOverLimitMessage(max_body);
    case 411:
      return "Content-Length: required on a request with a body";
    case 414:
      return "request target: too long";
    case 431:
      return "headers: too large";
    case 400:
      // cpp-httplib refuses a POST that announces no body at all (neither
      // Content-Length nor chunked) as malformed; say what it lacks.
      if ((request.method == "POST" || request.method == "PUT") &&
          !request.has_header("Content-Length") && !request.has_header("Transfer-Encoding")) {
        return "body: missing; " + request.method + " " + request.path +
               " takes a JSON object, sent with Content-Length and Content-Type: application/json";
      }
      return "malformed HTTP request: the request line or a header could not be parsed";
    default:
      if (status >= 500) return "internal error";
      return "request refused (HTTP " + std::to_string(status) + ")";
  }
}

// A listener: an SSLServer with TLS configured, its pool sized, Nagle off,
// bodies bounded. InvalidArgument when the TLS files do not load.
Result<std::unique_ptr<httplib::Server>> MakeListener(const ServerOptions& options,
                                                      const std::string& host) {
  std::unique_ptr<httplib::Server> http;
  if (options.tls_cert_file.empty()) {
    http = std::make_unique<httplib::Server>();
    if (!IsLoopbackHost(host)) {
      log::Line(log::Level::kWarn, "listen.no_tls")
          .Field("host", host)
          .Field("detail",
                 "bearer tokens cross the network in the clear (set --tls-cert and --tls-key)");
    }
  } else {
    // OpenSSL reports an unreadable file and a mismatched pair alike; tell
    // them apart first, since the fixes differ.
    for (const auto& [flag, path] : {std::pair{"--tls-cert", &options.tls_cert_file},
                                     std::pair{"--tls-key", &options.tls_key_file}}) {
      if (std::ifstream file(*path); !file) {
        return Status::InvalidArgument(std::string("TLS: cannot read ") + flag + " '" + *path +
                                       "': " + std::strerror(errno));
      }
    }
    auto tls = std::make_unique<httplib::SSLServer>(options.tls_cert_file.c_str(),
                                                    options.tls_key_file.c_str());
    if (!tls->is_valid()) {
      return Status::InvalidArgument("TLS: cannot load certificate '" + options.tls_cert_file +
                                     "' with key '" + options.tls_key_file +
                                     "' (both PEM; the key must match the certificate)");
    }
    http = std::move(tls);
  }
  const int threads = options.http_threads;
  http->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // httplib writes a response's headers and body with separate sends; under
  // Nagle the body waits for the client's delayed ACK of the headers, about
  // 40 ms per answer on Linux.
  http->set_tcp_nodelay(true);
  http->set_payload_max_length(options.max_body_bytes);
  return http;
}

// Binds `http` to host:port (0: a free port) and starts its accept loop on
// `thread`. Returns the bound port.
Result<uint16_t> Listen(httplib::Server& http, const std::string& host, uint16_t port,
                        std::thread* thread) {
  KVGOV_ASSIGN_OR_RETURN(const uint16_t bound, BindListener(http, host, port));
  *thread = std::thread([&http] { http.listen_after_bind(); });
  // The socket already queues connections; waiting for the accept loop is
  // for Shutdown, whose stop() is a no-op until the loop runs.
  while (!http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return bound;
}

// Every control API route, each file handed the members it uses.
void RegisterRoutes(httplib::Server& http, Daemon& daemon) {
  const RouteAccess access{.auth = daemon.auth.get(),
                           .body_limits = BodyLimits(daemon.options.max_body_bytes)};
  const Daemon* const root = &daemon;
  RegisterOperationsApi(http, {.access = access,
                               .config_json = [root] { return DescribeConfig(*root); },
                               .issuer = daemon.issuer.get(),
                               .journal = daemon.journal.get(),
                               .store = daemon.store.get(),
                               .chain_check = &daemon.chain_check,
                               .registry = &daemon.metrics,
                               .replica = daemon.replica.get()});
  RegisterFleetApi(http, {.access = access,
                          .reports = daemon.reports.get(),
                          .index = &daemon.index,
                          .status = &daemon.status,
                          .router = daemon.router.get(),
                          .ingest = daemon.ingest.get(),
                          .predictions = &daemon.predictions,
                          .engines = daemon.engines.get(),
                          .engine_silence_ms = daemon.options.engine_silence_ms,
                          .drains = daemon.drains.get()});
  RegisterRoutingApi(http, {.access = access,
                            .router = daemon.router.get(),
                            .salting = daemon.salting.get(),
                            .index = &daemon.index,
                            .prefixes = daemon.prefixes.get(),
                            .usage = daemon.usage.get(),
                            .metrics = daemon.route_metrics,
                            .tenants_seen = &daemon.tenants_seen,
                            .route_totals = &daemon.route_totals,
                            .route_predictions = &daemon.route_predictions});
  RegisterGovernanceApi(http, {.access = access,
                               .invalidations = daemon.invalidations.get(),
                               .quarantines = daemon.quarantines.get(),
                               .leases = daemon.leases.get(),
                               .salts = daemon.salts.get(),
                               .index = &daemon.index,
                               .engines = daemon.engines.get(),
                               .tenants_seen = &daemon.tenants_seen,
                               .store = daemon.store.get(),
                               .issuer = daemon.issuer.get(),
                               .journal = daemon.journal.get(),
                               .chain_check = &daemon.chain_check});
  RegisterConsoleApi(http, {.access = access,
                            .traffic = daemon.traffic.get(),
                            .traffic_interval_ms = daemon.traffic_interval_ms,
                            .salting = daemon.salting.get(),
                            .router = daemon.router.get(),
                            .engines = daemon.engines.get()});
  RegisterHandoffApi(http, access, daemon.handoffs->log());
  RegisterPrefixDiagnosticsApi(http, access, *daemon.prefixes, *daemon.engines);
}

// The gateway's front door on --gateway-listen: the same TLS files and
// body limit as the control API, the upstream timeouts of --gateway-*.
Result<std::unique_ptr<gateway::FrontDoor>> StartGateway(const ServerOptions& options,
                                                         Daemon& daemon) {
  gateway::FrontDoorOptions door;
  door.host = options.gateway_host;
  door.port = options.gateway_port;
  door.loops = options.gateway_loops;
  door.max_body_bytes = options.max_body_bytes;
  door.max_connections = options.gateway_max_connections;
  door.head_timeout = std::chrono::milliseconds(options.gateway_header_timeout_ms);
  door.tls_cert_file = options.tls_cert_file;
  door.tls_key_file = options.tls_key_file;
  door.upstream_timeouts = options.gateway_timeouts;
  const size_t max_body = options.max_body_bytes;
  door.error_body = [max_body](int status, std::string_view message) {
    std::string_view code = "refused";
    if (status == 413) code = "request_too_large";
    if (status == 431) code = "headers_too_large";
    return EncodeOpenAIErrorJson(status == 413 ? BodyOverLimitMessage(max_body) : message,
                                 status >= 500 ? "server_error" : "invalid_request_error", "",
                                 code);
  };
  GatewayServices services{.limits = {.body = BodyLimits(options.max_body_bytes),
                                      .max_in_flight = options.gateway_max_in_flight,
                                      .max_requests = options.gateway_max_requests},
                           .auth = daemon.auth.get(),
                           .index = &daemon.index,
                           .status = &daemon.status,
                           .engines = daemon.engines.get(),
                           .router = daemon.router.get(),
                           .salting = daemon.salting.get(),
                           .prefixes = daemon.prefixes.get(),
                           .usage = daemon.usage.get(),
                           .handoffs = daemon.handoffs.get(),
                           .tenants_seen = &daemon.tenants_seen,
                           .route_totals = &daemon.route_totals,
                           .metrics = daemon.gateway_metrics};
  return gateway::FrontDoor::Start(std::move(door), GatewayHandler(services));
}

// The front door's state on /metrics: connections, requests being served,
// engine connections per engine.
Result<metrics::CollectorId> CollectGatewayStats(Daemon& daemon, const gateway::FrontDoor& door) {
  KVGOV_ASSIGN_OR_RETURN(
      metrics::CallbackFamily * connections,
      daemon.metrics.AddCallbackGauge(
          {"kvgov_gateway_connections", "Client connections open on the gateway's listener."}));
  KVGOV_ASSIGN_OR_RETURN(
      metrics::CallbackFamily * open_requests,
      daemon.metrics.AddCallbackGauge(
          {"kvgov_gateway_open_requests",
           "Gateway requests being served now (streams included), over the event loops."}));
  KVGOV_ASSIGN_OR_RETURN(
      metrics::CallbackFamily * refused,
      daemon.metrics.AddCallbackCounter(
          {"kvgov_gateway_connections_refused_total",
           "Client connections closed as accepted because --gateway-max-connections were "
           "open."}));
  KVGOV_ASSIGN_OR_RETURN(
      metrics::CallbackFamily * dropped,
      daemon.metrics.AddCallbackCounter(
          {"kvgov_gateway_slow_clients_dropped_total",
           "Client connections dropped for sending a request head or body, or taking an "
           "answer, slower than the gateway's timeouts."}));
  KVGOV_ASSIGN_OR_RETURN(
      metrics::CallbackFamily * upstream,
      daemon.metrics.AddCallbackGauge(
          {"kvgov_gateway_upstream_connections",
           "The gateway's connections to each engine's OpenAI server: idle (kept for the next "
           "request) or active.",
           {"engine", "state"}}));
  std::map<std::string, std::string, std::less<>> engine_of_url;
  for (const ingest::EngineSpec& engine : daemon.options.engines) {
    engine_of_url.emplace(services::OpenAIUrl(engine), engine.id);
  }
  return daemon.metrics.RegisterCollector(
      [&door, connections, open_requests, refused, dropped, upstream,
       engine_of_url = std::move(engine_of_url)](metrics::CollectorSink& sink) {
        const gateway::FrontDoorStats stats = door.stats();
        sink.Emit(connections, {}, static_cast<double>(stats.connections));
        sink.Emit(open_requests, {}, static_cast<double>(stats.exchanges));
        sink.Emit(refused, {}, static_cast<double>(stats.connections_refused));
        sink.Emit(dropped, {}, static_cast<double>(stats.dropped_slow));
        for (const auto& [url, pool] : door.upstream_stats()) {
          const auto engine = engine_of_url.find(url);
          const std::string_view name = engine == engine_of_url.end() ? url : engine->second;
          sink.Emit(upstream, {name, "idle"}, static_cast<double>(pool.idle));
          sink.Emit(upstream, {name, "active"}, static_cast<double>(pool.active));
        }
      });
}

}  // namespace

struct Server::Impl {
  std::unique_ptr<Daemon> daemon;
  std::unique_ptr<httplib::Server> http;  // an SSLServer with TLS configured
  std::thread listener;
  uint16_t port = 0;
  std::unique_ptr<gateway::FrontDoor> gateway;  // --gateway-listen; null without
  std::optional<metrics::CollectorId> gateway_collector;
  uint16_t gateway_port = 0;
  Mutex mu;
  bool stopped KVGOV_GUARDED_BY(mu) = false;
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { Shutdown(); }

uint16_t Server::port() const { return impl_->port; }
uint16_t Server::gateway_port() const { return impl_->gateway_port; }

Status Server::CheckOptions(const ServerOptions& options) { return CheckServerOptions(options); }

Result<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  const bool gateway = !options.gateway_host.empty();
  const bool loopback =
      IsLoopbackHost(options.host) && (!gateway || IsLoopbackHost(options.gateway_host));
  const bool replicated = !options.redis_url.empty();
  // Beyond loopback every call needs a token, so there must be one. A
  // single node's are in its token file now; a replica's come with the
  // governance log, which it has applied once its daemon is built.
  auto check_a_token_exists = [&]() -> Status {
    if (loopback) return Status::Ok();
    KVGOV_ASSIGN_OR_RETURN(const std::vector<auth::TokenRecord> tokens,
                           auth::LoadTokenFile(auth::TokenFilePath(options.data_dir)));
    if (!tokens.empty()) return Status::Ok();
    return Status::PermissionDenied(
        "refusing to listen on '" +
        (IsLoopbackHost(options.host) ? options.gateway_host : options.host) +
        "': no bearer token exists, and kvgov serves beyond loopback (127.0.0.1, ::1, "
        "localhost) only with authentication; " +
        (replicated ? "the governance log on Redis holds none (or could not be read): create "
                      "one with `kvgov token add NAME --role ROLE --redis URL`, or `kvgov token "
                      "import FILE --redis URL`"
                    : "create one with `kvgov token add NAME --role ROLE --data-dir " +
                          options.data_dir + "`"));
  };
  if (!replicated) KVGOV_RETURN_IF_ERROR(check_a_token_exists());
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return Status::InvalidArgument("TLS needs both a certificate file and a key file");
  }
  KVGOV_RETURN_IF_ERROR(EnsureDataDir(options.data_dir));

  auto impl = std::make_unique<Impl>();
  KVGOV_ASSIGN_OR_RETURN(impl->http, MakeListener(options, options.host));
  KVGOV_ASSIGN_OR_RETURN(impl->daemon, BuildDaemon(options));
  if (replicated) KVGOV_RETURN_IF_ERROR(check_a_token_exists());
  httplib::Server& http = *impl->http;
  RegisterRoutes(http, *impl->daemon);
  const size_t max_body = options.max_body_bytes;
  http.set_error_handler([max_body](const httplib::Request& request, httplib::Response& response) {
    // Only fill in bodies the handlers did not write themselves.
    if (!response.body.empty()) return;
    const int status = response.status;
    const std::string message = DescribeListenerRefusal(request, status, max_body);
    std::string_view code = "invalid_argument";
    if (status == 404) code = "not_found";
    if (status == 413 || status == 414 || status == 431) code = "resource_exhausted";
    if (status >= 500) code = "internal";
    if (status >= 400) SendErrorJson(response, status, code, message);
  });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& response, const std::exception_ptr&) {
        // No exception escapes a handler; whatever slipped through is a 500
        // without internals in the body.
        SendErrorJson(response, 500, "internal", "internal error");
      });

  KVGOV_ASSIGN_OR_RETURN(impl->port, Listen(http, options.host, options.port, &impl->listener));
  if (gateway) {
    KVGOV_ASSIGN_OR_RETURN(impl->gateway, StartGateway(options, *impl->daemon));
    impl->gateway_port = impl->gateway->port();
    KVGOV_ASSIGN_OR_RETURN(impl->gateway_collector,
                           CollectGatewayStats(*impl->daemon, *impl->gateway));
  }

  std::unique_ptr<Server> server(new Server(std::move(impl)));
  if (!options.ready_file.empty()) {
    KVGOV_RETURN_IF_ERROR(WriteReadyFile(options.ready_file, server->port()));
  }
  if (gateway && !options.gateway_ready_file.empty()) {
    KVGOV_RETURN_IF_ERROR(WriteReadyFile(options.gateway_ready_file, server->gateway_port()));
  }
  return server;
}

void Server::Shutdown() {
  {
    MutexLock lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  if (impl_->gateway_collector) {
    (void)impl_->daemon->metrics.RemoveCollector(*impl_->gateway_collector);
  }
  if (impl_->gateway) impl_->gateway->Stop();
  impl_->http->stop();
  if (impl_->listener.joinable()) impl_->listener.join();
  impl_->daemon->Stop();
}

}  // namespace kvgov::server
