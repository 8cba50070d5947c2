#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace kvgov::cli {

/// Flags of `kvgov token add|list|revoke`.
struct TokenFlags {
  std::string data_dir = "./kvgov-data";
  std::string name;
  std::vector<std::string> roles;
  std::string tenant;
  // With a Redis URL, add and revoke go into the replicas' governance log
  // (every replica applies them to its own token file) instead of a data
  // dir's token file.
  std::string redis_url;
  std::string redis_prefix = "kvgov";
  CLI::App* add = nullptr;
  CLI::App* list = nullptr;
  CLI::App* revoke = nullptr;
};

/// Registers `kvgov token` and its subcommands; returns `token`.
CLI::App* AddTokenCommand(CLI::App& app, TokenFlags& flags);

/// Runs whichever subcommand was parsed. Returns the exit code.
int RunToken(const TokenFlags& flags);

}  // namespace kvgov::cli
