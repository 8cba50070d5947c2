#pragma once

// Internal to kvgov_cli: checks a --config file before CLI11 reads it, so a
// bad file is refused naming its line and key (CLI11 names neither).

#include <CLI/CLI.hpp>

#include <map>
#include <string>

#include "kvgov/core/status.h"

namespace kvgov::cli {

/// Where each setting of a config file was written: "--flag" -> "FILE:LINE".
using ConfigLines = std::map<std::string, std::string>;

/// Reads `path` as the TOML subset kvgov's config uses: `[section]`
/// headers naming subcommands, `key = value` with a quoted string, an
/// integer, a number, true/false or an array of those (over several lines
/// if need be), and `#`
/// comments. Every key must be a long option of its section's subcommand.
/// InvalidArgument "FILE:LINE: ..." for the first line at fault; IOError
/// when the file cannot be read.
Result<ConfigLines> CheckConfigFile(const std::string& path, CLI::App& app);

/// The value of --config in argv, or "" when absent.
std::string ConfigPathFromArgs(int argc, char** argv);

}  // namespace kvgov::cli
