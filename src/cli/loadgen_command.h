#pragma once

#include <CLI/CLI.hpp>

#include "kvgov/simfleet/loadgen.h"

namespace kvgov::cli {

struct LoadgenFlags {
  simfleet::LoadgenOptions options;
  bool keep_data = false;
};

/// Registers `kvgov loadgen` on the app; returns the subcommand.
CLI::App* AddLoadgenCommand(CLI::App& app, LoadgenFlags& flags);

/// Runs it and prints the report; exit 1 when a check failed.
int RunLoadgenCommand(LoadgenFlags flags);

}  // namespace kvgov::cli
