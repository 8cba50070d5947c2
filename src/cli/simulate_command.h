#pragma once

#include <CLI/CLI.hpp>

#include "kvgov/router/router.h"

#include <string>
#include <vector>

namespace kvgov::cli {

/// Flags of `kvgov simulate`.
struct SimulateFlags {
  std::string workload = "shared-prefix";
  int engines = 0;             // 0: the workload's default
  size_t capacity_blocks = 0;  // 0: sized for the workload
  int requests = 0;            // 0: the workload's default
  double rate = 0;             // 0: the workload's default
  std::string shape;           // "": the workload's default
  bool decode = false;         // a built-in workload's answers are decoded (traces always)
  int64_t answer_tokens = -1;  // -1: the workload's default
  uint64_t seed = 1;
  std::vector<std::string> policies = {"kvgov",  "round-robin", "random", "least-load", "oracle",
                                       "dynamo", "llm-d",       "sglang", "prefix-hash"};
  std::string encoding = "map";
  bool json = false;
  router::RouteWeights route;  // kvgov's policy
  std::string disaggregate;    // "xPyD": also run an xPyD fleet; "": colocated only
  double link_gbps = 400;      // each decode engine's link, with --disaggregate
  // --trace FILE: replay a Mooncake-format trace instead of a workload.
  std::string trace;
  int64_t trace_block_tokens = 512;
  double speedup = 1;
  std::string window;  // "START:END" seconds of the trace; "": all of it
};

/// Registers `kvgov simulate` on the app; returns the subcommand.
CLI::App* AddSimulateCommand(CLI::App& app, SimulateFlags& flags);

/// Runs it: the workload through a fresh simulated fleet once per policy,
/// then a table (or JSON) of the results. With --disaggregate xPyD, each
/// policy also runs the same trace on an xPyD fleet of the same x+y
/// engines, reported beside the colocated one. Returns the exit code.
int RunSimulate(const SimulateFlags& flags);

}  // namespace kvgov::cli
