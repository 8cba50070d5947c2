#include "cli/demo_command.h"

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/listen.h"
#include "cli/stop_signals.h"
#include "kvgov/simfleet/demo.h"

namespace kvgov::cli {
namespace {

nlohmann::json ResultJson(const simfleet::DemoResult& result) {
  return {{"kvgov_url", result.kvgov_url},
          {"gateway_url", result.gateway_url},
          {"gateway_turn1_prompt_tokens", result.gateway_turn1_prompt_tokens},
          {"gateway_turn2_prompt_tokens", result.gateway_turn2_prompt_tokens},
          {"gateway_turn2_cached_tokens", result.gateway_turn2_cached_tokens},
          {"gateway_predictions_scored", result.gateway_predictions_scored},
          {"gateway_predictions_exact", result.gateway_predictions_exact},
          {"gateway_predicted_tokens", result.gateway_predicted_tokens},
          {"gateway_engine_cached_tokens", result.gateway_engine_cached_tokens},
          {"gateway_tokenize_mismatches", result.gateway_tokenize_mismatches},
          {"gateway_saved_tokens_by_tenant", result.gateway_saved_tokens_by_tenant},
          {"data_dir", result.data_dir},
          {"requests", result.requests},
          {"live_hit_rate", result.live_hit_rate},
          {"live_ttft_p50_s", result.live_ttft_p50_s},
          {"live_ttft_p90_s", result.live_ttft_p90_s},
          {"round_robin_hit_rate", result.round_robin_hit_rate},
          {"round_robin_ttft_p90_s", result.round_robin_ttft_p90_s},
          {"breaker_tenant", result.breaker_tenant},
          {"breaker_kind", result.breaker_kind},
          {"breaker_position_tokens", result.breaker_position_tokens},
          {"breaker_avoidable_tokens", result.breaker_avoidable_tokens},
          {"breaker_occurrences", result.breaker_occurrences},
          {"quarantined_blocks", result.quarantined_blocks},
          {"quarantine_verdict", result.quarantine_verdict},
          {"invalidation_state", result.invalidation_state},
          {"certificate_id", result.certificate_id},
          {"certificate_file", result.certificate_file},
          {"route_example_file", result.route_example_file},
          {"issuer_public_key", result.issuer_public_key},
          {"certificate_verified", result.certificate_verified},
          {"lease_credited_while_active", result.lease_credited_while_active},
          {"lease_verdict_after", result.lease_verdict_after},
          {"lease_expired_after_ms", result.lease_expired_after_ms}};
}

}  // namespace

CLI::App* AddDemoCommand(CLI::App& app, DemoFlags& flags) {
  CLI::App* command = app.add_subcommand(
      "demo",
      "See kvgov work without GPUs: start a simulated vLLM fleet (ZeroMQ KV events, HTTP\n"
      "control) and kvgov serving it, send a multi-tenant agent workload through kvgov's\n"
      "OpenAI-compatible gateway (/v1/completions, as an OpenAI client would), compare with\n"
      "round-robin on the same trace, quarantine a span and certify its invalidation,\n"
      "and let a NIXL lease lapse. Then kvgov keeps running until Ctrl-C. `make run` runs it.");
  command->add_option("--listen", flags.listen, "HOST:PORT for kvgov's HTTP API (loopback only).")
      ->capture_default_str();
  command
      ->add_option("--gateway-listen", flags.gateway_listen,
                   "HOST:PORT for kvgov's OpenAI-compatible gateway (loopback only; the same "
                   "host as --listen).")
      ->capture_default_str();
  command
      ->add_option("--data-dir", flags.data_root,
                   "Root under which the demo makes a fresh data dir (demo-<UTC time>).")
      ->capture_default_str();
  command->add_flag("--quick", flags.quick, "A small workload that finishes in seconds (CI).");
  command->add_flag("--exit", flags.exit_after, "Stop once the report is printed.");
  command->add_option("--report-json", flags.report_json,
                      "Also write the report's figures to this file as JSON.");
  command->add_option("--seed", flags.seed, "Seed of the workload.")->capture_default_str();
  return command;
}

int RunDemo(const DemoFlags& flags) {
  simfleet::DemoOptions options;
  if (Status parsed = ParseListen(flags.listen, &options.host, &options.port); !parsed.ok()) {
    std::fprintf(stderr, "kvgov demo: %s\n", parsed.message().c_str());
    return 2;
  }
  std::string gateway_host;
  if (Status parsed = ParseListen(flags.gateway_listen, &gateway_host, &options.gateway_port);
      !parsed.ok() || gateway_host != options.host) {
    std::fprintf(stderr, "kvgov demo: --gateway-listen: %s\n",
                 parsed.ok() ? "want the same host as --listen" : parsed.message().c_str());
    return 2;
  }
  options.data_root = flags.data_root;
  options.quick = flags.quick;
  options.seed = flags.seed;

  const sigset_t stop_signals = BlockStopSignals();
  simfleet::Demo demo;
  Result<simfleet::DemoResult> result = demo.Run(options);
  if (!result.ok()) {
    std::fprintf(stderr, "kvgov demo: %s\n", result.status().ToString().c_str());
    demo.Stop();
    return 1;
  }
  if (!flags.report_json.empty()) {
    std::ofstream file(flags.report_json);
    file << ResultJson(*result).dump(2) << "\n";
    if (!file) {
      std::fprintf(stderr, "kvgov demo: cannot write %s\n", flags.report_json.c_str());
      demo.Stop();
      return 1;
    }
  }
  if (flags.exit_after) {
    demo.Stop();
    return 0;
  }
  const std::string& url = result->kvgov_url;
  std::printf(
      "kvgov keeps running with the fleet attached (Ctrl-C stops both):\n"
      "  console  %s/ui/  (open it in a browser: the fleet, traffic and governance, live)\n"
      "  metrics  %s/metrics\n  workers  %s/v1/workers\n  journal  %s/v1/journal\n"
      "  route    curl -s %s/v1/route -H 'Content-Type: application/json' -d @%s\n"
      "           (tenant-1's first transcript: it hits. The decision holds load on its worker\n"
      "           until released, curl -s -X POST %s/v1/route/DECISION_ID/done, or until its\n"
      "           decision_ttl_ms passes)\n",
      url.c_str(), url.c_str(), url.c_str(), url.c_str(), url.c_str(),
      result->route_example_file.c_str(), url.c_str());
  std::fflush(stdout);
  const int received = WaitForStopSignal(stop_signals);
  std::fprintf(stderr, "kvgov demo: signal %d, stopping kvgov and the fleet\n", received);
  demo.Stop();
  return 0;
}

}  // namespace kvgov::cli
