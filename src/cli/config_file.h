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
/// if need be, the first element on the key's line, no comments inside),
/// and `#` comments; no '#' inside a value (CLI11, which reads the file
/// next, would cut it there). Every key must be a long option of its
/// section's subcommand.
/// InvalidArgument "FILE:LINE: ..." for the first line at fault; IOError
/// when the file cannot be read.
Result<ConfigLines> CheckConfigFile(const std::string& path, CLI::App& app);

/// The value of --config in argv, or "" when absent.
std::string ConfigPathFromArgs(int argc, char** argv);

/// The effective settings of a parsed subcommand as a `[name]` section of
/// the TOML subset above, after a one-line comment: every configurable
/// long option, in registration order, with the value given on the command
/// line, else in the config file, else its default. A setting with no value is written commented
/// out (`# ready-file = ""`). CheckConfigFile accepts the text, and loading
/// it with --config prints the same text again. InvalidArgument when a
/// value cannot be written in that subset (a double quote, a '#', a
/// control character or a trailing backslash).
Result<std::string> FormatConfigSection(const CLI::App& section);

}  // namespace kvgov::cli
