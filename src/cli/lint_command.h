#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace kvgov::cli {

/// Flags of `kvgov lint FILE --kvgov URL`.
struct LintFlags {
  std::string file;
  std::string kvgov_url;
  std::string token;  // or $KVGOV_TOKEN
};

/// Registers `kvgov lint`; returns the subcommand.
CLI::App* AddLintCommand(CLI::App& app, LintFlags& flags);

/// Sends the file's requests to kvgov's POST /v1/lint/prompt
/// (docs/formats/prefix-diagnostics.md §5) and prints what it found. Exit 0
/// when no rule is broken, 1 when one is, 2 for a usage error, an
/// unreadable file or a refusal.
int RunLint(const LintFlags& flags);

}  // namespace kvgov::cli
