#include "kvgov/simfleet/demo.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kvgov/cert/certificate.h"
#include "kvgov/ingest/engine_spec.h"
#include "kvgov/server/server.h"
#include "kvgov/sim/fleet.h"
#include "kvgov/sim/workload.h"
#include "kvgov/simfleet/drive.h"
#include "kvgov/simfleet/live_engine.h"
#include "simfleet/http_json.h"

namespace kvgov::simfleet {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kModel = kDemoModel;

// Where the breaker tenant's system prompt carries its timestamp, and the
// token ids the timestamps take (none of the workload's own).
constexpr size_t kBreakerToken = 40;
constexpr int64_t kTimestampTokens = 900000;

// The demo's shape: the full agent workload, or a small one for CI.
struct Plan {
  sim::AgentWorkloadOptions workload;
  sim::FleetOptions fleet;
  double speedup = 1;
};

Plan MakePlan(const DemoOptions& options) {
  // The simulated round-robin fleet compared against is the live one.
  const LiveEngineOptions engine = DemoEngineOptions(0, options.seed);
  Plan plan;
  plan.workload.seed = options.seed;
  plan.fleet.seed = options.seed;
  plan.fleet.model = kModel;
  plan.fleet.shape = engine.shape;
  plan.fleet.engines = 4;
  plan.fleet.capacity_blocks = engine.pool.capacity_blocks;
  plan.fleet.block_size = engine.pool.block_size;
  plan.speedup = engine.speedup;
  if (options.quick) {
    plan.workload.tenants = 3;
    plan.workload.sessions_per_tenant = 3;
    plan.workload.turns = 5;
    plan.fleet.engines = 3;
    plan.fleet.capacity_blocks = 2048;
    plan.speedup = 8;
  }
  return plan;
}

std::string UtcStamp() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y%m%d-%H%M%S", &utc);
  return text;
}

double Seconds(Clock::duration duration) { return std::chrono::duration<double>(duration).count(); }

std::string Percent(double fraction) {
  char text[16];
  std::snprintf(text, sizeof(text), "%.1f%%", 100.0 * fraction);
  return text;
}

// Polls `attempt` every 100 ms until it returns true or `timeout` passes.
template <typename Attempt>
Status PollUntil(std::chrono::milliseconds timeout, const std::string& what, Attempt attempt) {
  const Clock::time_point deadline = Clock::now() + timeout;
  Status last = Status::Ok();
  while (Clock::now() < deadline) {
    Result<bool> done = attempt();
    if (done.ok() && *done) return Status::Ok();
    if (!done.ok()) last = done.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Status::Unavailable(what + ": not within " + std::to_string(timeout.count()) + " ms" +
                             (last.ok() ? "" : "; last error: " + last.message()));
}

// The samples of one family in a Prometheus text exposition, by their
// label set as written ("{a=\"x\",b=\"y\"}").
std::map<std::string, double> Samples(std::string_view exposition, std::string_view family) {
  std::map<std::string, double> out;
  size_t at = 0;
  while (at < exposition.size()) {
    size_t end = exposition.find('\n', at);
    if (end == std::string_view::npos) end = exposition.size();
    const std::string_view line = exposition.substr(at, end - at);
    at = end + 1;
    if (!line.starts_with(family) || line.size() <= family.size()) continue;
    const char next = line[family.size()];
    if (next != '{' && next != ' ') continue;  // another family sharing the prefix
    const size_t space = line.rfind(' ');
    out[std::string(line.substr(family.size(), space - family.size()))] =
        std::strtod(std::string(line.substr(space + 1)).c_str(), nullptr);
  }
  return out;
}

// The value of `label` in a label set as Samples keys it; "" when absent.
std::string LabelValue(std::string_view labels, std::string_view label) {
  const std::string key = std::string(label) + "=\"";
  const size_t start = labels.find(key);
  if (start == std::string_view::npos) return "";
  const size_t begin = start + key.size();
  return std::string(labels.substr(begin, labels.find('"', begin) - begin));
}

// What the gateway saw: each worker's scored predictions (GET /v1/workers),
// prompt-token mismatches and the ride_engine saving by tenant (/metrics).
Status ReadGatewayFigures(httplib::Client& kvgov, DemoResult& result) {
  KVGOV_ASSIGN_OR_RETURN(Json workers, GetJson(kvgov, "/v1/workers"));
  for (const Json& worker : workers["workers"]) {
    if (!worker.contains("predictions")) continue;
    const Json& predictions = worker["predictions"];
    result.gateway_predictions_scored += predictions.value("scored", uint64_t{0});
    result.gateway_predictions_exact += predictions.value("exact", uint64_t{0});
    result.gateway_predicted_tokens += predictions.value("predicted_tokens", int64_t{0});
    result.gateway_engine_cached_tokens += predictions.value("engine_cached_tokens", int64_t{0});
  }
  httplib::Result metrics = kvgov.Get("/metrics");
  if (!metrics || metrics->status != 200) return Status::Unavailable("GET /metrics failed");
  for (const auto& [labels, value] :
       Samples(metrics->body, "kvgov_gateway_tokenize_mismatch_total")) {
    result.gateway_tokenize_mismatches += value;
  }
  for (const auto& [labels, value] :
       Samples(metrics->body, "kvgov_prefill_tokens_saved_by_tenant_total")) {
    if (LabelValue(labels, "source") != "ride_engine") continue;
    result.gateway_saved_tokens_by_tenant[LabelValue(labels, "tenant")] += value;
  }
  return Status::Ok();
}

}  // namespace

struct Demo::Impl {
  std::vector<std::unique_ptr<LiveEngine>> engines;
  std::unique_ptr<server::Server> server;

  // Routes once and releases the decision at once: the demo asks what
  // kvgov would do, it sends no request.
  static Result<Json> Ask(httplib::Client& kvgov, Json route) {
    route["model"] = kModel;
    KVGOV_ASSIGN_OR_RETURN(Json decision, PostJson(kvgov, "POST /v1/route", "/v1/route", route));
    (void)kvgov.Post("/v1/route/" + decision.value("decision_id", "") + "/done", "",
                     "application/json");
    return decision;
  }
};

// What kvgov's prefix diagnostics found in the breaker tenant's traffic.
Status ReportBreaker(httplib::Client& kvgov, FILE* out, DemoResult& result) {
  KVGOV_ASSIGN_OR_RETURN(Json report,
                         GetJson(kvgov, "/v1/diagnostics/prefix?tenant=" + result.breaker_tenant));
  for (const Json& finding : report["findings"]) {
    if (finding.value("kind", "") != "breaker") continue;
    result.breaker_kind = "breaker";
    result.breaker_position_tokens = finding.value("position_tokens", int64_t{-1});
    result.breaker_avoidable_tokens = finding.value("avoidable_tokens_per_request", int64_t{0});
    result.breaker_occurrences = finding.value("occurrences", uint64_t{0});
    const int64_t breaker_end_tokens =
        finding.value("position_tokens", int64_t{0}) + finding.value("length_tokens", int64_t{0});
    std::fprintf(out,
                 "  breakers  %s: tokens %lld..%lld of its prompts differ on every request (the "
                 "timestamp);\n            moving it after the static prompt would let the "
                 "engines reuse %lld more tokens\n            per request, %llu requests so far "
                 "(GET /v1/diagnostics/prefix)\n\n",
                 result.breaker_tenant.c_str(),
                 static_cast<long long>(result.breaker_position_tokens),
                 static_cast<long long>(breaker_end_tokens),
                 static_cast<long long>(result.breaker_avoidable_tokens),
                 static_cast<unsigned long long>(result.breaker_occurrences));
    return Status::Ok();
  }
  std::fprintf(out, "  breakers  none found in %s's traffic\n\n", result.breaker_tenant.c_str());
  return Status::Ok();
}

LiveEngineOptions DemoEngineOptions(size_t index, uint64_t seed) {
  LiveEngineOptions engine;
  engine.id = sim::Fleet::WorkerId(index);
  engine.model = kDemoModel;
  engine.pool.capacity_blocks = 4096;
  engine.pool.block_size = 16;
  engine.pool.hash_seed = seed * 1000003 + index;
  engine.shape = sim::ModelShape::kLlama3_8B;
  engine.speedup = 4;
  return engine;
}

Demo::Demo() : impl_(std::make_unique<Impl>()) {}
Demo::~Demo() { Stop(); }

void Demo::Stop() {
  if (impl_->server != nullptr) impl_->server->Shutdown();
  for (auto& engine : impl_->engines) engine->Stop();
}

Result<DemoResult> Demo::Run(const DemoOptions& options) {
  FILE* out = options.out;
  const bool tty = isatty(fileno(out)) != 0;
  const Plan plan = MakePlan(options);
  DemoResult result;
  KVGOV_ASSIGN_OR_RETURN(std::vector<sim::SimRequest> trace, sim::AgentWorkload(plan.workload));
  result.requests = trace.size();
  // A cache breaker, as agent frameworks often write one: the last tenant's
  // system prompt carries the current time at token 40, so every request
  // recomputes the rest of it (kvgov's prefix diagnostics name it below).
  result.breaker_tenant = "tenant-" + std::to_string(plan.workload.tenants - 1);
  for (sim::SimRequest& request : trace) {
    if (request.tenant == result.breaker_tenant && request.tokens.size() > kBreakerToken) {
      request.tokens[kBreakerToken] = kTimestampTokens + static_cast<int64_t>(request.id);
    }
  }

  // The fleet: live engines on loopback.
  for (int i = 0; i < plan.fleet.engines; ++i) {
    LiveEngineOptions engine = DemoEngineOptions(static_cast<size_t>(i), options.seed);
    engine.pool.capacity_blocks = plan.fleet.capacity_blocks;
    engine.pool.block_size = plan.fleet.block_size;
    engine.shape = plan.fleet.shape;
    engine.speedup = plan.speedup;
    KVGOV_ASSIGN_OR_RETURN(std::unique_ptr<LiveEngine> live, LiveEngine::Start(engine));
    impl_->engines.push_back(std::move(live));
  }

  // kvgov itself, following and governing them.
  std::error_code made;
  std::filesystem::create_directories(options.data_root, made);
  if (made) return Status::IOError("cannot create " + options.data_root + ": " + made.message());
  result.data_dir = options.data_root + "/demo-" + UtcStamp();
  server::ServerOptions serve;
  serve.host = options.host;
  serve.port = options.port;
  serve.data_dir = result.data_dir;
  serve.probe_interval_ms = 200;
  serve.witness_timeout_ms = 15000;
  serve.gateway_host = options.host;
  serve.gateway_port = options.gateway_port;
  std::map<std::string, std::string> control_urls;
  for (const auto& engine : impl_->engines) {
    KVGOV_ASSIGN_OR_RETURN(ingest::EngineSpec spec, ingest::ParseEngineSpec(engine->EngineSpec()));
    serve.engines.push_back(std::move(spec));
    control_urls.emplace(engine->id(), engine->control_url());
  }
  KVGOV_ASSIGN_OR_RETURN(impl_->server, server::Server::Start(serve));
  result.kvgov_url = "http://" + options.host + ":" + std::to_string(impl_->server->port());
  result.gateway_url =
      "http://" + options.host + ":" + std::to_string(impl_->server->gateway_port()) + "/v1";
  httplib::Client kvgov(result.kvgov_url);
  TuneForRequests(kvgov);

  std::fprintf(out, "kvgov demo: a simulated vLLM fleet, governed by kvgov\n");
  std::fprintf(out, "  kvgov     %s   (data dir %s)\n", result.kvgov_url.c_str(),
               result.data_dir.c_str());
  std::fprintf(out, "  gateway   %s   (OpenAI-compatible)\n", result.gateway_url.c_str());
  std::fprintf(out,
               "  fleet     %d simulated vLLM engines (sim-0..sim-%d): %zu KV blocks of %lld "
               "tokens each,\n            ZeroMQ KV events + HTTP control, prefill modeled on "
               "%s (H200)\n",
               plan.fleet.engines, plan.fleet.engines - 1, plan.fleet.capacity_blocks,
               static_cast<long long>(plan.fleet.block_size),
               std::string(sim::ToString(plan.fleet.shape)).c_str());
  std::fprintf(out,
               "  engines   their specs, for a kvgov serve of your own (--engine SPEC each):\n");
  for (const auto& engine : impl_->engines) {
    std::fprintf(out, "            %s\n", engine->EngineSpec().c_str());
  }
  std::fprintf(out,
               "  workload  %d tenants x %d agent sessions x %d turns = %zu requests; one system "
               "prompt\n            per tenant, each turn re-sends the transcript, a cache salt "
               "per tenant;\n            %s's system prompt carries a timestamp at token %zu\n\n",
               plan.workload.tenants, plan.workload.sessions_per_tenant, plan.workload.turns,
               trace.size(), result.breaker_tenant.c_str(), kBreakerToken);
  std::fflush(out);

  // Wait until kvgov has probed every engine healthy.
  KVGOV_RETURN_IF_ERROR(
      PollUntil(std::chrono::seconds(20), "engines healthy", [&]() -> Result<bool> {
        KVGOV_ASSIGN_OR_RETURN(Json workers, GetJson(kvgov, "/v1/workers"));
        size_t healthy = 0;
        for (const Json& worker : workers["workers"]) {
          healthy += worker.contains("health") && worker["health"].value("healthy", false) ? 1 : 0;
        }
        return healthy == impl_->engines.size();
      }));

  // Send the workload live, through the gateway.
  DriveOptions drive;
  drive.kvgov_url = result.kvgov_url;
  drive.gateway_url = result.gateway_url.substr(0, result.gateway_url.size() - 3);  // no /v1
  drive.model = kModel;
  drive.speedup = plan.speedup;
  uint64_t next_line = 0;
  drive.on_progress = [&](const DriveProgress& progress) {
    const double hit_rate = progress.prompt_blocks == 0
                                ? 0
                                : static_cast<double>(progress.hit_blocks) /
                                      static_cast<double>(progress.prompt_blocks);
    if (tty) {
      std::fprintf(
          out, "\r  sending   %llu/%llu requests through the gateway, hit rate %s, errors %llu ",
          static_cast<unsigned long long>(progress.done),
          static_cast<unsigned long long>(progress.total), Percent(hit_rate).c_str(),
          static_cast<unsigned long long>(progress.errors));
    } else if (progress.done >= next_line) {
      std::fprintf(out,
                   "  sending   %llu/%llu requests through the gateway, hit rate %s, errors %llu\n",
                   static_cast<unsigned long long>(progress.done),
                   static_cast<unsigned long long>(progress.total), Percent(hit_rate).c_str(),
                   static_cast<unsigned long long>(progress.errors));
      next_line = progress.done + std::max<uint64_t>(progress.total / 4, 1);
    }
    std::fflush(out);
  };
  const Clock::time_point drive_start = Clock::now();
  KVGOV_ASSIGN_OR_RETURN(DriveReport live, DriveThroughKvgov(trace, control_urls, drive));
  std::fprintf(out,
               "%s  answered  %llu requests in %.1f s wall (the engines wait out their modeled "
               "H200 prefill time %.0fx faster)\n",
               tty ? "\n" : "", static_cast<unsigned long long>(live.report.requests),
               Seconds(Clock::now() - drive_start), plan.speedup);
  KVGOV_RETURN_IF_ERROR(ReadGatewayFigures(kvgov, result));
  std::fprintf(out,
               "  gateway   kvgov predicted %lld cached prompt tokens, the engines reported %lld; "
               "exact on %llu of %llu answers\n"
               "            prompt tokens as the engines counted them = tokens routed on, "
               "mismatches: %.0f\n",
               static_cast<long long>(result.gateway_predicted_tokens),
               static_cast<long long>(result.gateway_engine_cached_tokens),
               static_cast<unsigned long long>(result.gateway_predictions_exact),
               static_cast<unsigned long long>(result.gateway_predictions_scored),
               result.gateway_tokenize_mismatches);
  std::string savings;
  for (const auto& [tenant, tokens] : result.gateway_saved_tokens_by_tenant) {
    savings += (savings.empty() ? "" : ", ") + tenant + " " + std::to_string(std::llround(tokens));
  }
  std::fprintf(out,
               "            ride_engine saving (engine-reported cached tokens) by tenant: %s\n\n",
               savings.empty() ? "none" : savings.c_str());
  KVGOV_RETURN_IF_ERROR(ReportBreaker(kvgov, out, result));
  if (live.errors > 0) {
    std::fprintf(out, "  %llu requests failed; the first: %s\n\n",
                 static_cast<unsigned long long>(live.errors), live.first_error.c_str());
  }
  result.live_hit_rate = live.report.hit_rate();
  result.live_ttft_p50_s = live.report.ttft_p50_s;
  result.live_ttft_p90_s = live.report.ttft_p90_s;

  // The same trace on the same engines, other placements (simulated).
  std::vector<sim::PolicyReport> compared = {live.report};
  for (const char* name : {"kvgov", "round-robin", "least-load"}) {
    KVGOV_ASSIGN_OR_RETURN(std::unique_ptr<sim::RoutingPolicy> policy,
                           sim::MakePolicy(name, plan.fleet, options.seed));
    KVGOV_ASSIGN_OR_RETURN(sim::PolicyReport report, sim::RunTrace(trace, plan.fleet, *policy));
    report.policy += " (sim)";
    if (std::string_view(name) == "round-robin") {
      result.round_robin_hit_rate = report.hit_rate();
      result.round_robin_ttft_p90_s = report.ttft_p90_s;
    }
    compared.push_back(std::move(report));
  }
  std::fprintf(out,
               "Routing: the same trace on the same engines (TTFT modeled; spread = the busiest "
               "engine's\nprefill time over the mean, 1.00 perfectly even)\n%s",
               sim::FormatReports(compared).c_str());
  // Which engines the placements used: an idle engine beside queues is
  // TTFT thrown away.
  for (const sim::PolicyReport& report : compared) {
    std::string counts;
    for (uint64_t requests : report.requests_per_engine) {
      counts += (counts.empty() ? "" : " / ") + std::to_string(requests);
    }
    std::fprintf(out, "  %-18s requests per engine %s\n", report.policy.c_str(), counts.c_str());
  }
  const sim::PolicyReport& round_robin = compared[2];
  if (live.report.computed_tokens > 0 && live.report.ttft_p90_s > 0) {
    std::fprintf(out,
                 "  kvgov computed %.1fx fewer prefill tokens than round-robin; TTFT p90 %.1fx "
                 "lower\n\n",
                 static_cast<double>(round_robin.computed_tokens) /
                     static_cast<double>(live.report.computed_tokens),
                 round_robin.ttft_p90_s / live.report.ttft_p90_s);
  }

  std::fprintf(out, "Governance\n");
  // A NIXL lease pins a resident transcript, then lapses. (Before the
  // invalidation below: vLLM's reset empties a whole engine.)
  Json pinned;
  const sim::SimRequest* leased = nullptr;
  for (auto it = trace.rbegin(); it != trace.rend() && leased == nullptr; ++it) {
    if (it->tenant == "tenant-0") continue;
    KVGOV_ASSIGN_OR_RETURN(Json decision,
                           Impl::Ask(kvgov, {{"tenant", it->tenant}, {"token_ids", it->tokens}}));
    if (decision.value("overlap_blocks", uint64_t{0}) > 0) {
      pinned = decision;
      leased = &*it;
    }
  }
  if (leased == nullptr) return Status::NotFound("no resident transcript left to lease");
  const std::string worker = pinned.value("worker", "");
  constexpr int64_t kLeaseTtlMs = 2000;
  // Timed from before the request: kvgov grants the lease while answering
  // it, so a clock read after the answer would shave that off the lapse.
  const Clock::time_point requested_at = Clock::now();
  KVGOV_ASSIGN_OR_RETURN(Json granted,
                         PostJson(kvgov, "POST /v1/events", "/v1/events",
                                  {{"events",
                                    {{{"type", "nixl_lease"},
                                      {"lease_id", "demo-lease"},
                                      {"event", "create"},
                                      {"role", "prefill_pin"},
                                      {"span_digest", "demo-lease-span"},
                                      {"remote_engine", worker},
                                      {"ttl_ms", kLeaseTtlMs},
                                      {"worker", worker},
                                      {"token_ids", leased->tokens},
                                      {"cache_salt", pinned.value("cache_salt", "")}}}}}));
  if (granted.value("accepted", 0) != 1) {
    return Status::FailedPrecondition("the lease was refused: " + granted.dump());
  }
  const Json only_there = {
      {"tenant", leased->tenant}, {"token_ids", leased->tokens}, {"workers", {worker}}};
  KVGOV_ASSIGN_OR_RETURN(Json active, Impl::Ask(kvgov, only_there));
  const uint64_t credited = active.value("overlap_blocks", uint64_t{0});
  result.lease_credited_while_active = credited > 0;
  Json lapsed;
  KVGOV_RETURN_IF_ERROR(PollUntil(std::chrono::milliseconds(kLeaseTtlMs + 10000), "lease expiry",
                                  [&]() -> Result<bool> {
                                    KVGOV_ASSIGN_OR_RETURN(lapsed, Impl::Ask(kvgov, only_there));
                                    return lapsed.value("overlap_blocks", uint64_t{1}) == 0;
                                  }));
  result.lease_expired_after_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - requested_at).count();
  result.lease_verdict_after = lapsed["verdict"].value("reason", "");
  std::fprintf(out,
               "  lease         NIXL lease demo-lease (ttl %lld ms) pins %s's transcript on %s: "
               "%llu blocks credited while active;\n                after %.1f s none, verdict "
               "%s/%s\n",
               static_cast<long long>(kLeaseTtlMs), leased->session.c_str(), worker.c_str(),
               static_cast<unsigned long long>(credited),
               static_cast<double>(result.lease_expired_after_ms) / 1000.0,
               lapsed["verdict"].value("kind", "").c_str(), result.lease_verdict_after.c_str());
  // Quarantine tenant-0's system prompt, and invalidate it on its owners.
  const sim::SimRequest* tenant0 = nullptr;
  for (const sim::SimRequest& request : trace) {
    if (request.tenant == "tenant-0") {
      tenant0 = &request;
      break;
    }
  }
  if (tenant0 == nullptr) return Status::Internal("the trace has no tenant-0 request");
  const std::vector<int64_t> system_prompt(
      tenant0->tokens.begin(), tenant0->tokens.begin() + plan.workload.system_prompt_tokens);
  const Json tenant0_route = {{"tenant", "tenant-0"}, {"token_ids", system_prompt}};
  KVGOV_ASSIGN_OR_RETURN(Json before, Impl::Ask(kvgov, tenant0_route));
  const std::string holder = before.value("worker", "");
  KVGOV_ASSIGN_OR_RETURN(
      Json quarantine, PostJson(kvgov, "POST /v1/quarantine", "/v1/quarantine",
                                {{"model", kModel},
                                 {"tenant", "tenant-0"},
                                 {"token_ids", system_prompt},
                                 {"reason", "demo: tenant-0's system prompt was found poisoned"}}));
  result.quarantined_blocks = quarantine.value("blocks", uint64_t{0});
  Json on_holder = tenant0_route;
  on_holder["workers"] = {holder};
  KVGOV_ASSIGN_OR_RETURN(Json after, Impl::Ask(kvgov, on_holder));
  result.quarantine_verdict =
      after["verdict"].value("kind", "") + "/" + after["verdict"].value("reason", "");
  std::fprintf(out,
               "  quarantine    tenant-0's system prompt (%llu blocks): on %s it earned %llu "
               "blocks of credit before, %llu after (%s)%s\n",
               static_cast<unsigned long long>(result.quarantined_blocks), holder.c_str(),
               static_cast<unsigned long long>(before.value("overlap_blocks", uint64_t{0})),
               static_cast<unsigned long long>(after.value("overlap_blocks", uint64_t{0})),
               result.quarantine_verdict.c_str(),
               after["verdict"].value("reason", "") == "diverted"
                   ? ";\n                its requests now go out under a diverted salt, so no "
                     "engine reuses the quarantined KV"
                   : "");

  // Then have its owners delete it, with proof.
  KVGOV_ASSIGN_OR_RETURN(Json opened_directive,
                         PostJson(kvgov, "POST /v1/invalidations", "/v1/invalidations",
                                  {{"model", kModel},
                                   {"tenant", "tenant-0"},
                                   {"token_ids", system_prompt},
                                   {"reason", "demo: delete tenant-0's poisoned system prompt"}}));
  const std::string directive_id = opened_directive.value("id", "");
  const Clock::time_point opened = Clock::now();
  Json directive;
  KVGOV_RETURN_IF_ERROR(
      PollUntil(std::chrono::seconds(20), "invalidation " + directive_id, [&]() -> Result<bool> {
        KVGOV_ASSIGN_OR_RETURN(directive, GetJson(kvgov, "/v1/invalidations/" + directive_id));
        const std::string state = directive.value("state", "");
        return state == "certified" || state == "failed";
      }));
  result.invalidation_state = directive.value("state", "");
  std::string owners;
  for (const Json& owner : directive["owners"]) {
    owners += (owners.empty() ? "" : ", ") + owner.value("worker", "") + " (" +
              owner.value("witness_kind", "") + ")";
  }
  std::fprintf(out,
               "  invalidation  %s: %s in %.1f s; owners reset their prefix cache: %s\n"
               "                (vLLM and SGLang cannot drop one span: the reset empties each "
               "owner's whole prefix\n                cache, every tenant's prompts included, "
               "which are prefilled again)\n",
               directive_id.c_str(), result.invalidation_state.c_str(),
               Seconds(Clock::now() - opened), owners.c_str());
  if (result.invalidation_state != "certified") {
    return Status::FailedPrecondition("invalidation " + directive_id + " ended " +
                                      result.invalidation_state + ": " +
                                      directive.value("failure", ""));
  }

  // The certificate: signature, issuer and journal anchor.
  result.certificate_id = directive.value("certificate_id", "");
  httplib::Result document = kvgov.Get("/v1/certificates/" + result.certificate_id);
  if (!document || document->status != 200) {
    return Status::Unavailable("GET /v1/certificates/" + result.certificate_id + " failed");
  }
  KVGOV_ASSIGN_OR_RETURN(cert::DeletionCertificate certificate,
                         cert::ParseCertificateJson(document->body));
  KVGOV_ASSIGN_OR_RETURN(Json issuer, GetJson(kvgov, "/v1/issuer"));
  const std::vector<std::string> trusted = {issuer.value("public_key", "")};
  KVGOV_RETURN_IF_ERROR(cert::VerifyCertificate(certificate, trusted));
  KVGOV_ASSIGN_OR_RETURN(
      Json rows, GetJson(kvgov, "/v1/journal?since=" +
                                    std::to_string(certificate.anchor.journal_seq) + "&limit=1"));
  if (rows["rows"].empty()) return Status::NotFound("the certificate's journal row is missing");
  const Json& row = rows["rows"][0];
  KVGOV_RETURN_IF_ERROR(cert::VerifyAnchor(certificate, row.value("seq", uint64_t{0}),
                                           row.value("prev_hash", ""), row.value("hash", ""),
                                           row.value("subject", "")));
  result.certificate_verified = true;
  result.issuer_public_key = trusted[0];
  result.certificate_file = result.data_dir + "-certificate.json";
  const std::string& certificate_file = result.certificate_file;
  std::ofstream(certificate_file) << document->body;
  std::fprintf(out,
               "  certificate   %s: Ed25519 signature, issuer and journal anchor (row %llu) "
               "verified\n                saved to %s; offline: kvgov cert verify %s "
               "--issuer-key %s\n",
               result.certificate_id.substr(0, 16).c_str(),
               static_cast<unsigned long long>(certificate.anchor.journal_seq),
               certificate_file.c_str(), certificate_file.c_str(), trusted[0].c_str());
  std::fprintf(out, "\n");
  // A route that hits, for the newcomer's own curl: tenant-1's first
  // transcript (tenant-0's system prompt was just invalidated).
  for (const sim::SimRequest& request : trace) {
    if (request.tenant != "tenant-1") continue;
    result.route_example_file = result.data_dir + "-route.json";
    std::ofstream(result.route_example_file) << Json{
        {"model", kModel},
        {"tenant", request.tenant},
        {"token_ids", request.tokens}}.dump();
    break;
  }
  KVGOV_RETURN_IF_ERROR(RunGatewaySession(out, result));
  std::fflush(out);
  return result;
}

Status Demo::RunGatewaySession(FILE* out, DemoResult& result) {
  // An agent's two turns as an OpenAI client sends them: the second
  // re-sends the transcript, so the engine finds its prefix cached.
  std::string system = "You are a careful agent.";
  for (int i = 0; i < 64; ++i) system += " rule" + std::to_string(i);
  Json messages = Json::array({{{"role", "system"}, {"content", system}},
                               {{"role", "user"}, {"content", "List the open tickets."}}});
  httplib::Client gateway(result.gateway_url.substr(0, result.gateway_url.size() - 3));
  TuneForRequests(gateway);
  httplib::Client kvgov(result.kvgov_url);
  TuneForRequests(kvgov);
  // The event batches kvgov has applied over the fleet: the next turn is
  // routed on the blocks the first one stored, so it waits until the
  // engine's batch about them is in. (Not a block count: with full pools a
  // turn evicts as many blocks as it stores.)
  auto applied_batches = [&]() -> Result<int64_t> {
    KVGOV_ASSIGN_OR_RETURN(Json workers, GetJson(kvgov, "/v1/workers"));
    int64_t batches = 0;
    for (const Json& worker : workers["workers"])
      batches += worker.value("last_seq", int64_t{-1}) + 1;
    return batches;
  };
  KVGOV_ASSIGN_OR_RETURN(const int64_t batches_before, applied_batches());
  std::fprintf(out,
               "Gateway: an agent's two chat turns through kvgov (tokenized by the engine's "
               "own /tokenize, routed by kvgov)\n");
  for (int turn = 1; turn <= 2; ++turn) {
    KVGOV_ASSIGN_OR_RETURN(
        Json answer, PostJson(gateway, "POST /v1/chat/completions", "/v1/chat/completions",
                              {{"model", kModel}, {"messages", messages}, {"max_tokens", 8}}));
    const Json usage = answer.value("usage", Json::object());
    const int64_t prompt = usage.value("prompt_tokens", int64_t{0});
    const int64_t cached =
        usage.value("prompt_tokens_details", Json::object()).value("cached_tokens", int64_t{0});
    (turn == 1 ? result.gateway_turn1_prompt_tokens : result.gateway_turn2_prompt_tokens) = prompt;
    if (turn == 2) result.gateway_turn2_cached_tokens = cached;
    std::fprintf(out,
                 "  turn %d    %lld prompt tokens, %lld of them cached (as the engine "
                 "reported)\n",
                 turn, static_cast<long long>(prompt), static_cast<long long>(cached));
    messages.push_back(answer["choices"][0].value("message", Json::object()));
    messages.push_back({{"role", "user"}, {"content", "Close the first one."}});
    if (turn == 1) {
      KVGOV_RETURN_IF_ERROR(
          PollUntil(std::chrono::seconds(10), "the first turn indexed", [&]() -> Result<bool> {
            KVGOV_ASSIGN_OR_RETURN(int64_t batches, applied_batches());
            return batches > batches_before;
          }));
    }
  }
  std::fprintf(out,
               "  try it    curl -s %s/chat/completions -H 'Content-Type: application/json' \\\n"
               "              -H 'X-Kvgov-Tenant: tenant-0' \\\n"
               "              -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\","
               "\"content\":\"hello\"}],\"max_tokens\":8}'\n"
               "            or any OpenAI client (stream=True works too), e.g. Python's:\n"
               "              from openai import OpenAI\n"
               "              client = OpenAI(base_url=\"%s\", api_key=\"unused-on-loopback\")\n"
               "              client.chat.completions.create(model=\"%s\", max_tokens=8,\n"
               "                  messages=[{\"role\": \"user\", \"content\": \"hello\"}])\n\n",
               result.gateway_url.c_str(), kModel, result.gateway_url.c_str(), kModel);
  return Status::Ok();
}

}  // namespace kvgov::simfleet
