#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace kvgov::cli {

/// Flags of `kvgov engines`.
struct EnginesFlags {
  int count = 2;
  std::string kind = "vllm";
  std::string role = "both";
  // The demo's engine's, set when the command is registered.
  std::string model;
  std::string host;
  int64_t pool_blocks = 0;
  int64_t max_model_len = 0;
  double speedup = 0;
  uint64_t seed = 1;
  std::string specs_file;
};

/// Registers `kvgov engines` on the app; returns the subcommand.
CLI::App* AddEnginesCommand(CLI::App& app, EnginesFlags& flags);

/// Starts the engines, prints their --engine specs and serves until SIGINT
/// or SIGTERM. Returns the exit code.
int RunEngines(const EnginesFlags& flags);

}  // namespace kvgov::cli
