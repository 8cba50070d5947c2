#pragma once

namespace kvgov::cli {

/// Runs the `kvgov` command line: parses argv, runs the chosen subcommand,
/// and returns the process exit code (0 on success, 1 on a runtime error, 2
/// on a usage error). Writes help and errors to stdout/stderr.
int Run(int argc, char** argv);

}  // namespace kvgov::cli
