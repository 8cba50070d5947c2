#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "kvgov/core/status.h"
#include "kvgov/metrics/registry.h"
#include "server/periodic_task.h"

namespace kvgov::server {

struct Daemon;

/// `kvgov serve --spool-dir DIR`: every interval, ingests the complete
/// spool files in DIR (`*.ndjson`, byte-wise name order) through
/// IngestReport, the code path of POST /v1/events, then renames each to
/// `.done`, or to `.rejected` after writing a `.rejected.errors` sidecar
/// naming every rejected line (docs/formats/spool.md).
///
/// Thread-safety: one background thread does all the work. Stop, which the
/// destructor calls, lets it finish the file it is on, never starts
/// another, and joins it. The daemon must outlive the object.
class SpoolDirectory {
 public:
  /// Creates DIR (mode 0700) when it is missing, registers the
  /// kvgov_spool_* metrics and starts the thread. Returns IOError when DIR
  /// cannot be created or is not a directory, and the registry's errors.
  static Result<std::unique_ptr<SpoolDirectory>> Start(Daemon* daemon, std::string dir,
                                                       std::chrono::milliseconds interval);

  ~SpoolDirectory();
  SpoolDirectory(const SpoolDirectory&) = delete;
  SpoolDirectory& operator=(const SpoolDirectory&) = delete;

  void Stop();

 private:
  SpoolDirectory(Daemon* daemon, std::string dir) : daemon_(daemon), dir_(std::move(dir)) {}

  // What ingesting one file came to.
  struct Outcome {
    uint64_t accepted = 0;
    uint64_t rejected = 0;
  };

  void Scan();
  void IngestFile(const std::filesystem::path& path);
  // Renames the file (and its errors sidecar) out of the way; false when a
  // rename failed, logged.
  bool Finish(const std::filesystem::path& path, const Outcome& outcome);
  // Logs a problem with one file once, not at every scan that retries it.
  void LogOnce(const std::string& file, const std::string& problem);

  Daemon* const daemon_;
  const std::string dir_;
  metrics::CounterFamily* files_ = nullptr;   // {outcome}: done, rejected
  metrics::CounterFamily* lines_ = nullptr;   // {outcome}: accepted, rejected
  metrics::CounterFamily* errors_ = nullptr;  // files that could not be read or renamed
  std::atomic<bool> stopping_{false};
  // Used by the scan thread only.
  std::set<std::string> logged_;
  std::map<std::string, Outcome> unfinished_;  // ingested, not yet renamed
  std::unique_ptr<PeriodicTask> task_;         // last: its thread reads everything above
};

}  // namespace kvgov::server
