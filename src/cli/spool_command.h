#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <string>

namespace kvgov::cli {

/// Flags of `kvgov ingest-spool FILE --kvgov URL`.
struct IngestSpoolFlags {
  std::string file;
  std::string kvgov_url;
  std::string token;  // or $KVGOV_TOKEN
  size_t batch_lines = 1000;
  size_t batch_bytes = size_t{4} << 20;
};

/// Registers `kvgov ingest-spool`; returns the subcommand.
CLI::App* AddIngestSpoolCommand(CLI::App& app, IngestSpoolFlags& flags);

/// Posts the file's lines to kvgov in batches and prints what became of
/// each (docs/formats/spool.md). Exit 0 when every report was accepted, 1
/// when any was rejected or not sent, 2 for a usage error or an unreadable
/// file.
int RunIngestSpool(const IngestSpoolFlags& flags);

}  // namespace kvgov::cli
