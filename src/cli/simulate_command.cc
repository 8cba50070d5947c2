#include "cli/simulate_command.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "kvgov/sim/fleet.h"
#include "kvgov/sim/pareto.h"
#include "kvgov/sim/trace.h"
#include "kvgov/sim/workload.h"

namespace kvgov::cli {
namespace {

// 16 or 2.5, not 16.000000.
std::string Rate(double per_s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", per_s);
  return text;
}

// A trace file is read whole, so it is bounded first.
constexpr uintmax_t kMaxTraceFileBytes = uintmax_t{2} << 30;

Result<std::string> ReadTraceFile(const std::string& path) {
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error) return Status::InvalidArgument("--trace " + path + ": " + error.message());
  if (size > kMaxTraceFileBytes) {
    return Status::InvalidArgument("--trace " + path + ": " + std::to_string(size) +
                                   " bytes, over the limit of " +
                                   std::to_string(kMaxTraceFileBytes));
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) return Status::InvalidArgument("--trace " + path + ": cannot be opened");
  std::string text(static_cast<size_t>(size), '\0');
  file.read(text.data(), static_cast<std::streamsize>(size));
  if (!file) return Status::InvalidArgument("--trace " + path + ": read failed");
  return text;
}

// "START:END" in seconds, either side empty for the trace's start or end.
Status ParseWindow(const std::string& text, sim::MooncakeTraceOptions& options) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument("--window: want START:END in seconds, got '" + text + "'");
  }
  const std::string start = text.substr(0, colon);
  const std::string end = text.substr(colon + 1);
  try {
    size_t used = 0;
    if (!start.empty()) {
      options.window_start_s = std::stod(start, &used);
      if (used != start.size()) throw std::invalid_argument(start);
    }
    if (!end.empty()) {
      options.window_end_s = std::stod(end, &used);
      if (used != end.size()) throw std::invalid_argument(end);
    }
  } catch (const std::exception&) {
    return Status::InvalidArgument("--window: want START:END in seconds, got '" + text + "'");
  }
  return Status::Ok();
}

// A workload with the fleet it is meant for; flags override either.
struct Scenario {
  std::vector<sim::SimRequest> trace;
  sim::FleetOptions fleet;  // colocated
  std::string description;
  std::optional<sim::FleetSplit> split;  // --disaggregate
};

// The fleet of the workloads made to be decoded: Llama-3-8B engines (4
// unless --engines says), `capacity_blocks` each, decode modeled.
void DecodedLlamaFleet(int engines, size_t capacity_blocks, sim::FleetOptions& fleet) {
  fleet.engines = engines > 0 ? engines : 4;
  fleet.shape = sim::ModelShape::kLlama3_8B;
  fleet.capacity_blocks = capacity_blocks;
  fleet.decode.enabled = true;
}

Result<Scenario> BuildScenario(const SimulateFlags& flags) {
  Scenario scenario;
  sim::FleetOptions& fleet = scenario.fleet;
  fleet.seed = flags.seed;
  // The colocated fleet a split is compared with has the same engines.
  int engines = flags.engines;
  if (!flags.disaggregate.empty()) {
    Result<sim::FleetSplit> split = sim::ParseFleetSplit(flags.disaggregate);
    if (!split.ok()) {
      return Status::InvalidArgument("--disaggregate: " + split.status().message());
    }
    const int total = split->prefill_engines + split->decode_engines;
    if (flags.engines > 0 && flags.engines != total) {
      return Status::InvalidArgument("--disaggregate: " + flags.disaggregate + " is " +
                                     std::to_string(total) + " engines, but --engines is " +
                                     std::to_string(flags.engines));
    }
    engines = total;
    scenario.split = *split;
  }
  if (!flags.trace.empty()) {
    sim::MooncakeTraceOptions options;
    options.block_tokens = flags.trace_block_tokens;
    options.speedup = flags.speedup;
    options.seed = flags.seed;
    if (!flags.window.empty()) KVGOV_RETURN_IF_ERROR(ParseWindow(flags.window, options));
    KVGOV_ASSIGN_OR_RETURN(std::string text, ReadTraceFile(flags.trace));
    Result<std::vector<sim::SimRequest>> trace = sim::ParseMooncakeTrace(text, options);
    if (!trace.ok()) return trace.status().WithContext("--trace " + flags.trace);
    scenario.trace = std::move(trace).value();
    // An 8B model on H200s: about 800 k tokens of KV each once the weights
    // are loaded (docs/formats/simulator.md, "Request traces").
    fleet.engines = engines > 0 ? engines : 4;
    fleet.shape = sim::ModelShape::kLlama3_8B;
    fleet.capacity_blocks = 50000;
    // A trace says how long each answer is: decode is modeled.
    fleet.decode.enabled = true;
    scenario.description = flags.trace + ", " + std::to_string(scenario.trace.size()) +
                           " requests, " + std::to_string(flags.trace_block_tokens) +
                           "-token blocks, " + Rate(flags.speedup) + "x speed";
  } else if (flags.workload == "shared-prefix") {
    // llm-d's 73%-capacity benchmark: 8 pods of Qwen3-32B, 150 groups of a
    // 6k-token system prompt plus a 1.2k-token question.
    sim::SharedPrefixWorkloadOptions workload;
    workload.seed = flags.seed;
    if (flags.requests > 0) workload.requests = flags.requests;
    if (flags.rate > 0) workload.requests_per_s = flags.rate;
    if (flags.answer_tokens >= 0) workload.answer_tokens = flags.answer_tokens;
    if (flags.decode && workload.answer_tokens == 0) {
      return Status::InvalidArgument(
          "--decode: the shared-prefix workload's answers have no length; give --answer-tokens");
    }
    fleet.engines = engines > 0 ? engines : 8;
    fleet.shape = sim::ModelShape::kQwen3_32B;
    fleet.capacity_blocks = static_cast<size_t>(
        std::ceil(static_cast<double>(sim::SharedPrefixBlocks(workload, fleet.block_size)) / 0.73 /
                  fleet.engines));
    KVGOV_ASSIGN_OR_RETURN(scenario.trace, sim::SharedPrefixWorkload(workload));
    scenario.description = std::to_string(workload.groups) + " groups x (" +
                           std::to_string(workload.system_prompt_tokens) + " + " +
                           std::to_string(workload.question_tokens) + " tokens), " +
                           std::to_string(workload.requests) + " requests at " +
                           Rate(workload.requests_per_s) + "/s";
  } else if (flags.workload == "agent" || flags.workload == "tool-agent") {
    sim::AgentWorkloadOptions workload;
    workload.seed = flags.seed;
    if (flags.workload == "tool-agent") {
      // Agents calling tools: a long system prompt of tool definitions,
      // short answers (the tool calls) and long tool results, fast turns.
      // More tenants than engines, as in the demo: where each tenant's
      // prompt lives decides which engines idle.
      workload.tenants = 6;
      workload.sessions_per_tenant = 16;
      workload.turns = 10;
      workload.system_prompt_tokens = 12288;
      workload.message_tokens = 1024;
      workload.answer_tokens = 128;
      workload.session_starts_per_s = 1.0;
      workload.think_time_s = 0.5;
    }
    if (flags.requests > 0) {
      // Whole sessions: as many as make up the requests asked for.
      workload.sessions_per_tenant =
          std::max(1, flags.requests / (workload.tenants * workload.turns));
    }
    if (flags.rate > 0) workload.session_starts_per_s = flags.rate;
    if (flags.answer_tokens >= 0) workload.answer_tokens = flags.answer_tokens;
    fleet.engines = engines > 0 ? engines : 4;
    fleet.shape = sim::ModelShape::kLlama3_8B;
    fleet.capacity_blocks = flags.workload == "tool-agent" ? 8192 : 4096;
    fleet.decode.enabled = flags.workload == "tool-agent";
    KVGOV_ASSIGN_OR_RETURN(scenario.trace, sim::AgentWorkload(workload));
    scenario.description = std::to_string(workload.tenants) + " tenants x " +
                           std::to_string(workload.sessions_per_tenant) + " sessions x " +
                           std::to_string(workload.turns) + " turns, " +
                           std::to_string(workload.system_prompt_tokens) +
                           "-token system prompt per tenant, " +
                           std::to_string(workload.message_tokens) + "-token messages";
  } else if (flags.workload == "conversation") {
    sim::ConversationWorkloadOptions workload;
    workload.seed = flags.seed;
    // Six turns a session on average.
    if (flags.requests > 0) workload.sessions = std::max(1, flags.requests / 6);
    if (flags.rate > 0) workload.session_starts_per_s = flags.rate;
    if (flags.answer_tokens > 0) workload.answer_tokens = flags.answer_tokens;
    DecodedLlamaFleet(engines, 8192, fleet);
    KVGOV_ASSIGN_OR_RETURN(scenario.trace, sim::ConversationWorkload(workload));
    scenario.description = std::to_string(workload.sessions) + " sessions of " +
                           std::to_string(workload.min_turns) + "-" +
                           std::to_string(workload.max_turns) + " turns, " +
                           Rate(workload.think_time_s) + " s thinking between turns";
  } else if (flags.workload == "document-qa") {
    sim::DocumentQaWorkloadOptions workload;
    workload.seed = flags.seed;
    if (flags.requests > 0) workload.requests = flags.requests;
    if (flags.rate > 0) workload.requests_per_s = flags.rate;
    if (flags.answer_tokens > 0) workload.answer_tokens = flags.answer_tokens;
    DecodedLlamaFleet(engines, 16384, fleet);
    KVGOV_ASSIGN_OR_RETURN(scenario.trace, sim::DocumentQaWorkload(workload));
    scenario.description = std::to_string(workload.requests) + " questions on " +
                           std::to_string(workload.documents) + " documents of " +
                           std::to_string(workload.min_document_tokens) + "-" +
                           std::to_string(workload.max_document_tokens) + " tokens at " +
                           Rate(workload.requests_per_s) + "/s";
  } else if (flags.workload == "burst") {
    sim::BurstWorkloadOptions workload;
    workload.seed = flags.seed;
    if (flags.rate > 0) workload.background_per_s = flags.rate;
    if (flags.answer_tokens > 0) workload.answer_tokens = flags.answer_tokens;
    DecodedLlamaFleet(engines, 8192, fleet);
    KVGOV_ASSIGN_OR_RETURN(scenario.trace, sim::BurstWorkload(workload));
    scenario.description =
        std::to_string(workload.bursts) + " bursts of " + std::to_string(workload.burst_requests) +
        " requests in " + Rate(workload.burst_window_s) + " s over " +
        Rate(workload.background_per_s) + "/s background, " + std::to_string(workload.prompts) +
        " shared " + std::to_string(workload.prompt_tokens) + "-token prompts";
  } else {
    return Status::InvalidArgument("--workload: unknown workload \"" + flags.workload +
                                   "\": want shared-prefix, agent, tool-agent, "
                                   "conversation, document-qa or burst");
  }
  if (flags.decode) fleet.decode.enabled = true;
  if (flags.capacity_blocks > 0) fleet.capacity_blocks = flags.capacity_blocks;
  if (!flags.shape.empty()) {
    KVGOV_ASSIGN_OR_RETURN(fleet.shape, sim::ParseModelShape(flags.shape));
  }
  if (flags.encoding == "legacy") {
    fleet.encoding = sim::WireEncoding::kLegacyPositional;
  } else if (flags.encoding != "map") {
    return Status::InvalidArgument("--encoding: want map or legacy, got \"" + flags.encoding +
                                   "\"");
  }
  return scenario;
}

nlohmann::json ReportJson(const sim::PolicyReport& report) {
  return {{"policy", report.policy},
          {"requests", report.requests},
          {"prompt_blocks", report.prompt_blocks},
          {"hit_blocks", report.hit_blocks},
          {"hit_rate", report.hit_rate()},
          {"prompt_tokens", report.prompt_tokens},
          {"prefill_tokens", report.computed_tokens},
          {"prefill_causes",
           {{"first_seen_tokens", report.prefill_causes.first_seen_tokens},
            {"not_held_tokens", report.prefill_causes.not_held_tokens},
            {"routed_away_tokens", report.prefill_causes.routed_away_tokens},
            {"while_queued_tokens", report.prefill_causes.while_queued_tokens}}},
          {"ttft_p50_s", report.ttft_p50_s},
          {"ttft_p90_s", report.ttft_p90_s},
          {"ttft_p99_s", report.ttft_p99_s},
          {"ttft_mean_s", report.ttft_mean_s},
          {"busy_s_per_engine", report.busy_s_per_engine},
          {"requests_per_engine", report.requests_per_engine},
          {"load_spread", report.load_spread},
          {"waits_over_10s", report.long_waits},
          {"decode_modeled", report.decode_modeled},
          {"e2e_p50_s", report.e2e_p50_s},
          {"e2e_p99_s", report.e2e_p99_s}};
}

nlohmann::json DisaggregatedReportJson(const sim::PolicyReport& report) {
  nlohmann::json out = ReportJson(report);
  out["pulled_tokens"] = report.pulled_tokens;
  out["pull_saved_tokens"] = report.pull_saved_tokens;
  out["transfer_s"] = report.transfer_s;
  out["link_wait_s"] = report.link_wait_s;
  return out;
}

// kvgov against the other policies of one fleet's run; null without kvgov.
nlohmann::json ParetoJson(const std::vector<sim::PolicyReport>& reports) {
  Result<sim::ParetoSummary> summary = sim::Pareto(reports, "kvgov");
  if (!summary.ok()) return nullptr;
  nlohmann::json out = {{"policy", summary->policy},
                        {"no_worse_than", summary->no_worse_than()},
                        {"against", nlohmann::json::array()}};
  if (summary->hit_rate_points_behind_oracle.has_value()) {
    out["hit_rate_points_behind_oracle"] = *summary->hit_rate_points_behind_oracle;
  }
  for (const sim::ParetoComparison& c : summary->against) {
    out["against"].push_back({{"peer", c.peer},
                              {"prefill_ratio", c.prefill_ratio},
                              {"ttft_p90_ratio", c.ttft_p90_ratio},
                              {"no_worse", c.no_worse()},
                              {"dominates", c.dominates()}});
  }
  return out;
}

// A fleet's table, then kvgov's standing against the rest when it ran.
std::string TableWithPareto(const std::vector<sim::PolicyReport>& reports) {
  std::string out = sim::FormatReports(reports);
  out += "\n" + sim::FormatPrefillCauses(reports);
  Result<sim::ParetoSummary> summary = sim::Pareto(reports, "kvgov");
  if (summary.ok() && !summary->against.empty()) out += "\n" + sim::FormatPareto(*summary);
  return out;
}

// Every policy on one fleet; 0 with the reports, else the exit code
// (after the message).
int RunPolicies(const SimulateFlags& flags, const Scenario& scenario,
                const sim::FleetOptions& fleet, std::vector<sim::PolicyReport>& reports) {
  for (const std::string& name : flags.policies) {
    Result<std::unique_ptr<sim::RoutingPolicy>> policy =
        sim::MakePolicy(name, fleet, flags.seed, flags.route);
    if (!policy.ok()) {
      std::fprintf(stderr, "kvgov simulate: --policy: %s\n", policy.status().message().c_str());
      return 2;
    }
    if (fleet.disaggregated() && (*policy)->colocated_only()) continue;
    Result<sim::PolicyReport> report = sim::RunTrace(scenario.trace, fleet, **policy);
    if (!report.ok()) {
      std::fprintf(stderr, "kvgov simulate: %s%s: %s\n", name.c_str(),
                   fleet.disaggregated() ? " (disaggregated)" : "",
                   report.status().ToString().c_str());
      return 1;
    }
    reports.push_back(std::move(report).value());
  }
  return 0;
}

// "sim-0..sim-3", or "sim-4" for one engine.
std::string EngineRange(size_t first, size_t count) {
  std::string out = sim::Fleet::WorkerId(first);
  if (count > 1) out += ".." + sim::Fleet::WorkerId(first + count - 1);
  return out;
}

}  // namespace

CLI::App* AddSimulateCommand(CLI::App& app, SimulateFlags& flags) {
  CLI::App* command = app.add_subcommand(
      "simulate",
      "Replay a workload through a simulated vLLM fleet once per routing policy and compare\n"
      "them on the same trace: prefix hit rate, prefill tokens computed, modeled TTFT\n"
      "(p50/p90/p99, from the prefill cost measured on an H200) and load spread. kvgov's\n"
      "policy is its own router fed only by the engines' encoded KV-event streams.\n"
      "Deterministic under --seed. Example: kvgov simulate --workload shared-prefix");
  command
      ->add_option("--workload", flags.workload,
                   "shared-prefix (llm-d's benchmark), agent, tool-agent (long tool\n"
                   "definitions, tool results), conversation (multi-turn chat), document-qa\n"
                   "(long documents, Zipf popularity) or burst. All but shared-prefix and\n"
                   "agent model decode.")
      ->capture_default_str();
  CLI::Option* trace = command->add_option(
      "--trace", flags.trace,
      "Replay a request trace in Mooncake's format (one JSON object a line: timestamp ms,\n"
      "input_length, output_length, hash_ids) instead of a workload; tokens are synthesized\n"
      "per hash id, so equal ids are equal blocks. Default fleet: 4 engines x 50000 blocks,\n"
      "llama-3-8b.");
  command
      ->add_option("--trace-block-tokens", flags.trace_block_tokens,
                   "Tokens each of the trace's hash ids stands for.")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{65536}))
      ->needs(trace);
  command
      ->add_option("--speedup", flags.speedup,
                   "Replay the trace this many times faster (arrivals divided by it).")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->needs(trace);
  command
      ->add_option("--window", flags.window,
                   "START:END: only the trace's requests arriving in [START, END) seconds\n"
                   "(either side may be empty).")
      ->needs(trace);
  command
      ->add_option("--engines", flags.engines,
                   "Simulated engines (default: 8 for shared-prefix, 4 for agent).")
      ->check(CLI::Range(1, 1024));
  command
      ->add_option("--capacity-blocks", flags.capacity_blocks,
                   "KV blocks per engine (default: shared-prefix sizes the fleet so its group\n"
                   "prompts fill 73% of it, as llm-d's benchmark did; agent uses 4096).")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30));
  command->add_option("--requests", flags.requests, "Requests in the trace.")
      ->check(CLI::Range(1, 10000000));
  command
      ->add_option("--rate", flags.rate,
                   "Requests per second (shared-prefix) or new sessions per second (agent).")
      ->check(CLI::PositiveNumber);
  command->add_option("--shape", flags.shape,
                      "Prefill cost model: qwen3-32b (shared-prefix default) or llama-3-8b.");
  command->add_flag("--decode", flags.decode,
                    "Model the answers' decode for a built-in workload too (continuous batching;\n"
                    "a trace always has it), and report end-to-end latency.");
  command
      ->add_option("--answer-tokens", flags.answer_tokens,
                   "Answer length: each answer (agent, default 192) or the mean of\n"
                   "exponential draws capped at 8x (shared-prefix, default 0: none).")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  command->add_option("--seed", flags.seed, "Seed of the trace and the engines' hash seeds.")
      ->capture_default_str();
  command->add_option("--policy", flags.policies,
                      "Policies to compare (repeatable): kvgov, round-robin, random, least-load,\n"
                      "oracle, and the peers' as documented: dynamo, llm-d, sglang, prefix-hash\n"
                      "(colocated fleets only). Default: all.");
  command
      ->add_option("--encoding", flags.encoding,
                   "Engine event encoding: map (vLLM >= 0.26) or legacy (positional).")
      ->capture_default_str();
  command->add_flag("--json", flags.json, "Print the reports as JSON.");
  command
      ->add_option("--route-overlap-weight", flags.route.overlap_weight,
                   "kvgov's cost of each prompt block a worker would still prefill (as in\n"
                   "kvgov serve).")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  command
      ->add_option("--route-cache-pressure-weight", flags.route.cache_pressure_weight,
                   "kvgov's cost added to the overlap weight in proportion to how full a\n"
                   "worker's cache is (as in kvgov serve).")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  command
      ->add_option("--route-decode-load-weight", flags.route.decode_load_weight,
                   "kvgov's load of each prompt block of a request past its first token (as\n"
                   "in kvgov serve).")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  CLI::Option* disaggregate = command->add_option(
      "--disaggregate", flags.disaggregate,
      "Also run each policy on the same x+y engines split xPyD (e.g. 2P2D): sim-0.. prefill,\n"
      "the rest decode, pulling the prompt's KV they lack from the prefill engine (decode\n"
      "itself is not modeled). Prints the colocated and the disaggregated table.");
  command
      ->add_option("--link-gbps", flags.link_gbps,
                   "Each decode engine's link for KV pulls, Gb/s (with --disaggregate).")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->needs(disaggregate);
  return command;
}

int RunSimulate(const SimulateFlags& flags) {
  Result<Scenario> scenario = BuildScenario(flags);
  if (!scenario.ok()) {
    std::fprintf(stderr, "kvgov simulate: %s\n", scenario.status().message().c_str());
    return 2;
  }
  const sim::FleetOptions& fleet = scenario->fleet;
  std::vector<sim::PolicyReport> reports;
  if (int code = RunPolicies(flags, *scenario, fleet, reports); code != 0) return code;
  // The same trace on the same engines, split xPyD.
  std::optional<sim::FleetOptions> split_fleet;
  std::vector<sim::PolicyReport> split_reports;
  std::string split_name;
  if (scenario->split.has_value()) {
    split_fleet = fleet;
    split_fleet->prefill_engines = scenario->split->prefill_engines;
    split_fleet->decode_engines = scenario->split->decode_engines;
    split_fleet->link_bytes_per_s = flags.link_gbps * 1e9 / 8;
    split_name = std::to_string(split_fleet->prefill_engines) + "P" +
                 std::to_string(split_fleet->decode_engines) + "D";
    if (int code = RunPolicies(flags, *scenario, *split_fleet, split_reports); code != 0) {
      return code;
    }
  }
  if (flags.json) {
    nlohmann::json out = {{"workload", flags.trace.empty() ? flags.workload : "trace"},
                          {"description", scenario->description},
                          {"engines", fleet.engines},
                          {"capacity_blocks", fleet.capacity_blocks},
                          {"block_size", fleet.block_size},
                          {"shape", sim::ToString(fleet.shape)},
                          {"seed", flags.seed},
                          {"policies", nlohmann::json::array()}};
    for (const sim::PolicyReport& report : reports) out["policies"].push_back(ReportJson(report));
    out["pareto"] = ParetoJson(reports);
    if (split_fleet.has_value()) {
      out["disaggregate"] = split_name;
      out["prefill_engines"] = split_fleet->prefill_engines;
      out["decode_engines"] = split_fleet->decode_engines;
      out["link_gbps"] = flags.link_gbps;
      out["disaggregated"] = nlohmann::json::array();
      for (const sim::PolicyReport& report : split_reports) {
        out["disaggregated"].push_back(DisaggregatedReportJson(report));
      }
      out["disaggregated_pareto"] = ParetoJson(split_reports);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("workload %s: %s\n", flags.trace.empty() ? flags.workload.c_str() : "trace",
              scenario->description.c_str());
  std::printf("fleet: %d engines x %zu blocks of %lld tokens, prefill modeled on %s (H200)\n",
              fleet.engines, fleet.capacity_blocks, static_cast<long long>(fleet.block_size),
              std::string(sim::ToString(fleet.shape)).c_str());
  if (!split_fleet.has_value()) {
    std::printf("\n%s", TableWithPareto(reports).c_str());
    return 0;
  }
  const size_t prefill = static_cast<size_t>(split_fleet->prefill_engines);
  const size_t decode = static_cast<size_t>(split_fleet->decode_engines);
  std::printf(
      "disaggregated %s: prefill on %s, decode on %s; each decode engine pulls\n"
      "the KV it lacks over its own %g Gb/s link, one pull at a time. Decode itself is not\n"
      "modeled in either fleet: TTFT = prefill queue + prefill (+ link queue + transfer).\n",
      split_name.c_str(), EngineRange(0, prefill).c_str(), EngineRange(prefill, decode).c_str(),
      flags.link_gbps);
  std::printf("\ncolocated, %d engines\n%s", fleet.engines, TableWithPareto(reports).c_str());
  std::printf("\ndisaggregated, %s\n%s", split_name.c_str(),
              TableWithPareto(split_reports).c_str());
  return 0;
}

}  // namespace kvgov::cli
