#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "kvgov/codec/ingest_batch.h"
#include "kvgov/core/status.h"
#include "kvgov/metrics/registry.h"

namespace kvgov::spool {

/// `kvgov serve --spool-dir DIR`: each Scan ingests the complete spool
/// files in DIR (`*.ndjson`, byte-wise name order) through the sink (the
/// code path of POST /v1/events), then renames each to `.done`, or to
/// `.rejected` after writing a `.rejected.errors` sidecar naming every
/// rejected line (docs/formats/spool.md). The caller decides when to scan
/// (the daemon: every --spool-interval-ms).
///
/// Thread-compatible: one thread scans at a time. Cancel may be called
/// from any thread: the scan in progress finishes the file it is on and
/// starts no other.
class SpoolDirectory {
 public:
  /// Applies one report; its error is the line's error.
  using Sink = std::function<Status(const IngestEvent&)>;

  /// Creates DIR (mode 0700) when it is missing and registers the
  /// kvgov_spool_* metrics. Returns IOError when DIR cannot be created or
  /// is not a directory, and the registry's errors.
  static Result<std::unique_ptr<SpoolDirectory>> Open(std::string dir, Sink sink,
                                                      metrics::Registry* registry);

  SpoolDirectory(const SpoolDirectory&) = delete;
  SpoolDirectory& operator=(const SpoolDirectory&) = delete;

  void Scan();
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }

 private:
  SpoolDirectory(std::string dir, Sink sink) : dir_(std::move(dir)), sink_(std::move(sink)) {}

  // What ingesting one file came to.
  struct Outcome {
    uint64_t accepted = 0;
    uint64_t rejected = 0;
  };

  void IngestFile(const std::filesystem::path& path);
  // Renames the file (and its errors sidecar) out of the way; false when a
  // rename failed, logged.
  bool Finish(const std::filesystem::path& path, const Outcome& outcome);
  // Logs a problem with one file once, not at every scan that retries it.
  void LogOnce(const std::string& file, const std::string& problem);

  const std::string dir_;
  const Sink sink_;
  metrics::CounterFamily* files_ = nullptr;   // {outcome}: done, rejected
  metrics::CounterFamily* lines_ = nullptr;   // {outcome}: accepted, rejected
  metrics::CounterFamily* errors_ = nullptr;  // files that could not be read or renamed
  std::atomic<bool> cancelled_{false};
  // Used by the scanning thread only.
  std::set<std::string> logged_;
  std::map<std::string, Outcome> unfinished_;  // ingested, not yet renamed
};

}  // namespace kvgov::spool
