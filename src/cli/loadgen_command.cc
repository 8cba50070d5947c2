#include "cli/loadgen_command.h"

#include <stdlib.h>

#include <cstdio>
#include <filesystem>

namespace kvgov::cli {

CLI::App* AddLoadgenCommand(CLI::App& app, LoadgenFlags& flags) {
  simfleet::LoadgenOptions& options = flags.options;
  CLI::App* command = app.add_subcommand(
      "loadgen",
      "Load and soak a whole kvgov daemon: start one (this binary, in its own process) with\n"
      "simulated vLLM engines attached, drive KV events, routes and governance writes for a\n"
      "while, then check it survived, applied every event exactly once, lost no acknowledged\n"
      "write and kept its memory flat. Prints throughput and latencies; exits 1 on a failed\n"
      "check. Example: kvgov loadgen --duration 60");
  command->add_option("--engines", options.engines, "Simulated engines.")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  command->add_option("--duration", options.duration_s, "Seconds of load.")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  command
      ->add_option("--rate", options.batches_per_s_per_engine,
                   "Event batches per second per engine; 0: as fast as possible.")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  command
      ->add_option("--route-threads", options.route_threads,
                   "Threads calling /v1/route back to back.")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  command
      ->add_option("--governance-every-ms", options.governance_every_ms,
                   "One quarantine or NIXL lease call this often.")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{60000}));
  command->add_option("--data-dir", options.data_dir,
                      "The daemon's data dir (default: a fresh directory under $TMPDIR,\n"
                      "removed afterwards unless --keep-data).");
  command->add_flag("--keep-data", flags.keep_data, "Keep the daemon's data dir and log.");
  command->add_option("--kvgov", options.kvgov_binary,
                      "The kvgov binary to load (default: this one).");
  command->add_option("--seed", options.seed, "Seed of the prompts.")->capture_default_str();
  return command;
}

int RunLoadgenCommand(LoadgenFlags flags) {
  simfleet::LoadgenOptions& options = flags.options;
  bool owned = false;
  if (options.data_dir.empty()) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "kvgov-loadgen-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::fprintf(stderr, "kvgov loadgen: cannot make a temporary directory\n");
      return 1;
    }
    options.data_dir = pattern + "/data";
    owned = true;
  }
  Result<simfleet::LoadgenReport> report = simfleet::RunLoadgen(options);
  if (!report.ok()) {
    std::fprintf(stderr, "kvgov loadgen: %s\n", report.status().ToString().c_str());
    return 1;
  }
  const simfleet::LoadgenReport& r = *report;
  std::printf("duration     %.1f s\n", r.duration_s);
  std::printf(
      "ingest       %llu batches, %llu blocks stored, %llu removed: %.0f blocks/s applied\n",
      static_cast<unsigned long long>(r.batches_published),
      static_cast<unsigned long long>(r.blocks_stored),
      static_cast<unsigned long long>(r.blocks_removed), r.blocks_per_s);
  std::printf("route        %llu calls (%llu errors), p50 %.2f ms, p99 %.2f ms\n",
              static_cast<unsigned long long>(r.routes),
              static_cast<unsigned long long>(r.route_errors), r.route_p50_ms, r.route_p99_ms);
  std::printf("governance   %llu writes (%llu errors), p50 %.2f ms, p99 %.2f ms\n",
              static_cast<unsigned long long>(r.governance_writes),
              static_cast<unsigned long long>(r.governance_errors), r.governance_p50_ms,
              r.governance_p99_ms);
  std::printf("memory       RSS %lld KiB after warm-up, %lld KiB at the end, %lld KiB peak\n",
              static_cast<long long>(r.rss_warm_kib), static_cast<long long>(r.rss_end_kib),
              static_cast<long long>(r.rss_peak_kib));
  for (const std::string& failure : r.failures) std::printf("FAIL         %s\n", failure.c_str());
  if (r.failures.empty()) std::printf("checks       all held\n");
  if (owned && !flags.keep_data) {
    std::error_code ignored;
    std::filesystem::remove_all(std::filesystem::path(options.data_dir).parent_path(), ignored);
  }
  return r.failures.empty() ? 0 : 1;
}

}  // namespace kvgov::cli
