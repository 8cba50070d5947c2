#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace kvgov::cli {

/// Flags of `kvgov demo`.
struct DemoFlags {
  std::string listen = "127.0.0.1:8787";
  std::string gateway_listen = "127.0.0.1:8788";
  std::string data_root = "./kvgov-data";
  bool quick = false;
  bool exit_after = false;
  std::string report_json;
  uint64_t seed = 1;
};

/// Registers `kvgov demo` on the app; returns the subcommand.
CLI::App* AddDemoCommand(CLI::App& app, DemoFlags& flags);

/// Runs the demo, prints its report and, unless --exit, keeps kvgov and
/// the fleet running until SIGINT or SIGTERM. Returns the exit code.
int RunDemo(const DemoFlags& flags);

}  // namespace kvgov::cli
