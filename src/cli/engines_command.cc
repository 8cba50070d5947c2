#include "cli/engines_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "cli/stop_signals.h"
#include "kvgov/core/enum_spelling.h"
#include "kvgov/ingest/engine_spec.h"
#include "kvgov/simfleet/demo.h"
#include "kvgov/simfleet/live_engine.h"

namespace kvgov::cli {
namespace {

// Written whole under a temporary name and renamed, so a script that waits
// for the file reads every spec or none.
Status WriteSpecs(const std::string& path, const std::vector<std::string>& specs) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    for (const std::string& spec : specs) out << spec << "\n";
    out.flush();
    if (!out) return Status::IOError("--specs-file '" + path + "': cannot write " + temp);
  }
  std::error_code renamed;
  std::filesystem::rename(temp, path, renamed);
  if (renamed) return Status::IOError("--specs-file '" + path + "': " + renamed.message());
  return Status::Ok();
}

Result<std::vector<std::unique_ptr<simfleet::LiveEngine>>> StartEngines(const EnginesFlags& flags) {
  KVGOV_ASSIGN_OR_RETURN(const ingest::EngineKind kind, ParseEnum<ingest::EngineKind>(flags.kind));
  KVGOV_ASSIGN_OR_RETURN(const ingest::EngineRole role, ParseEnum<ingest::EngineRole>(flags.role));
  std::vector<std::unique_ptr<simfleet::LiveEngine>> engines;
  for (int i = 0; i < flags.count; ++i) {
    simfleet::LiveEngineOptions options =
        simfleet::DemoEngineOptions(static_cast<size_t>(i), flags.seed);
    options.kind = kind;
    options.role = role;
    options.host = flags.host;
    options.model = flags.model;
    options.pool.capacity_blocks = static_cast<size_t>(flags.pool_blocks);
    options.max_model_len = flags.max_model_len;
    options.speedup = flags.speedup;
    KVGOV_ASSIGN_OR_RETURN(std::unique_ptr<simfleet::LiveEngine> engine,
                           simfleet::LiveEngine::Start(options));
    // What is printed is what serve accepts: the same parser checks it.
    if (Result<ingest::EngineSpec> parsed = ingest::ParseEngineSpec(engine->EngineSpec());
        !parsed.ok()) {
      return Status::InvalidArgument("engine " + options.id + ": " + parsed.status().message());
    }
    engines.push_back(std::move(engine));
  }
  return engines;
}

}  // namespace

CLI::App* AddEnginesCommand(CLI::App& app, EnginesFlags& flags) {
  const simfleet::LiveEngineOptions demo = simfleet::DemoEngineOptions(0, flags.seed);
  flags.model = demo.model;
  flags.host = demo.host;
  flags.pool_blocks = static_cast<int64_t>(demo.pool.capacity_blocks);
  flags.max_model_len = demo.max_model_len;
  flags.speedup = demo.speedup;
  CLI::App* command = app.add_subcommand(
      "engines",
      "Run simulated vLLM or SGLang engines alone, the demo's (ZeroMQ KV events with replay,\n"
      "the OpenAI API with /tokenize, /health, /metrics, prefix-cache reset), and print the\n"
      "--engine spec of each to follow them from a kvgov serve of your own. No GPU: prefill\n"
      "time is modeled, the tokenizer is a toy. Serves until Ctrl-C.\n"
      "Example: kvgov engines --count 2, then kvgov serve with the specs it prints");
  command->add_option("--count", flags.count, "How many engines (ids sim-0, sim-1, ...).")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  command->add_option("--kind", flags.kind, "Whose interfaces they speak.")
      ->capture_default_str()
      ->check(CLI::IsMember({"vllm", "sglang"}));
  command
      ->add_option("--role", flags.role,
                   "both, or prefill / decode for a disaggregated pool (every engine).")
      ->capture_default_str()
      ->check(CLI::IsMember({"both", "prefill", "decode"}));
  command->add_option("--model", flags.model, "The model they serve.")->capture_default_str();
  command
      ->add_option("--host", flags.host,
                   "The address every socket binds, and the specs name: an address of this\n"
                   "machine that kvgov can connect to.")
      ->capture_default_str();
  command
      ->add_option("--pool-blocks", flags.pool_blocks,
                   "KV blocks of " + std::to_string(demo.pool.block_size) + " tokens per engine.")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  command
      ->add_option("--max-model-len", flags.max_model_len,
                   "Context length; a longer prompt is refused with 400.")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  command->add_option("--speedup", flags.speedup, "Modeled prefill time is divided by this.")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1e6));
  command->add_option("--seed", flags.seed, "Seed of the engines' block hashes.")
      ->capture_default_str();
  command->add_option("--specs-file", flags.specs_file,
                      "Also write the specs here, one a line, once every engine is up.");
  return command;
}

int RunEngines(const EnginesFlags& flags) {
  const sigset_t stop_signals = BlockStopSignals();
  Result<std::vector<std::unique_ptr<simfleet::LiveEngine>>> engines = StartEngines(flags);
  if (!engines.ok()) {
    std::fprintf(stderr, "kvgov engines: %s\n", engines.status().message().c_str());
    return engines.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::vector<std::string> specs;
  for (const auto& engine : *engines) specs.push_back(engine->EngineSpec());
  if (!flags.specs_file.empty()) {
    if (Status written = WriteSpecs(flags.specs_file, specs); !written.ok()) {
      std::fprintf(stderr, "kvgov engines: %s\n", written.message().c_str());
      for (auto& engine : *engines) engine->Stop();
      return 1;
    }
  }
  std::printf("kvgov engines: %d simulated %s engine%s serving %s (Ctrl-C stops them)\n",
              flags.count, flags.kind == "vllm" ? "vLLM" : "SGLang", flags.count == 1 ? "" : "s",
              flags.model.c_str());
  for (const auto& engine : *engines) {
    std::printf("  %-6s events %s  replay %s  control %s\n", engine->id().c_str(),
                engine->events_endpoint().c_str(), engine->replay_endpoint().c_str(),
                engine->control_url().c_str());
  }
  std::printf(
      "follow them with kvgov (its OpenAI gateway on --gateway-listen):\n"
      "  kvgov serve --gateway-listen 127.0.0.1:8788");
  for (const std::string& spec : specs) std::printf(" \\\n    --engine %s", spec.c_str());
  std::printf("\n");
  std::fflush(stdout);
  const int received = WaitForStopSignal(stop_signals);
  std::fprintf(stderr, "kvgov engines: signal %d, stopping\n", received);
  for (auto& engine : *engines) engine->Stop();
  return 0;
}

}  // namespace kvgov::cli
