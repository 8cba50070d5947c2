#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace kvgov::cli {

/// The data dir `kvgov token` uses without --data-dir (kvgov serve's too).
inline constexpr const char* kDefaultTokenDataDir = "./kvgov-data";

/// Flags of `kvgov token add|list|revoke|import`.
struct TokenFlags {
  std::string data_dir = kDefaultTokenDataDir;
  std::string name;
  std::vector<std::string> roles;
  std::string tenant;
  std::string import_file;  // token import FILE
  // With a Redis URL, add and revoke go into the replicas' governance log
  // (every replica applies them to its own token file), and list reads it,
  // instead of a data dir's token file; --data-dir is then refused.
  std::string redis_url;
  std::string redis_password_file;
  std::string redis_prefix = "kvgov";
  CLI::App* add = nullptr;
  CLI::App* list = nullptr;
  CLI::App* revoke = nullptr;
  CLI::App* import = nullptr;
  // Every --data-dir option (on `token` and on each subcommand), to tell a
  // data dir given from the default.
  std::vector<CLI::Option*> data_dir_options;
};

/// Registers `kvgov token` and its subcommands; returns `token`.
CLI::App* AddTokenCommand(CLI::App& app, TokenFlags& flags);

/// Runs whichever subcommand was parsed. Returns the exit code.
int RunToken(const TokenFlags& flags);

}  // namespace kvgov::cli
