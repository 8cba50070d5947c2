#include "kvgov/log/log.h"
#include "kvgov/spool/spool_directory.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "kvgov/spool/spool_reader.h"

namespace kvgov::spool {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr std::string_view kComplete = ".ndjson";

bool IsComplete(const std::string& name) {
  return name.size() > kComplete.size() && name.front() != '.' &&
         name.compare(name.size() - kComplete.size(), kComplete.size(), kComplete) == 0;
}

}  // namespace

Result<std::unique_ptr<SpoolDirectory>> SpoolDirectory::Open(std::string dir, Sink sink,
                                                             metrics::Registry* registry) {
  std::error_code error;
  if (!fs::exists(dir, error)) {
    fs::create_directories(dir, error);
    if (error) return Status::IOError("spool dir '" + dir + "': " + error.message());
    // Whoever can write here reports with the ingest role.
    ::chmod(dir.c_str(), 0700);
  }
  if (!fs::is_directory(dir, error)) {
    return Status::IOError("spool dir '" + dir + "': not a directory");
  }
  std::unique_ptr<SpoolDirectory> spool(new SpoolDirectory(std::move(dir), std::move(sink)));
  KVGOV_ASSIGN_OR_RETURN(spool->files_,
                         registry->AddCounter({"kvgov_spool_files_total",
                                               "Spool files ingested, by outcome (done: every "
                                               "line accepted; rejected: at least one not).",
                                               {"outcome"}}));
  KVGOV_ASSIGN_OR_RETURN(
      spool->lines_,
      registry->AddCounter(
          {"kvgov_spool_lines_total", "Reports read from spool files, by outcome.", {"outcome"}}));
  KVGOV_ASSIGN_OR_RETURN(spool->errors_,
                         registry->AddCounter({"kvgov_spool_errors_total",
                                               "Failures to list the spool directory or to open, "
                                               "read or rename a spool file; a file left in place "
                                               "counts again at every retry."}));
  // Every series exists from the start, so a rate or an alert never sees
  // an absent one.
  for (std::string_view outcome : {"done", "rejected"}) spool->files_->WithLabels({outcome});
  for (std::string_view outcome : {"accepted", "rejected"}) spool->lines_->WithLabels({outcome});
  spool->errors_->WithLabels({});
  return spool;
}

void SpoolDirectory::LogOnce(const std::string& file, const std::string& problem) {
  errors_->WithLabels({})->Inc();
  if (logged_.insert(file).second) {
    log::Line(log::Level::kWarn, "spool.file_failed")
        .Field("file", file)
        .Field("error", problem)
        .Field("detail", "left in place; retried every scan");
  }
}

void SpoolDirectory::Scan() {
  std::vector<fs::path> ready;
  std::error_code error;
  for (fs::directory_iterator it(dir_, error), end; !error && it != end; it.increment(error)) {
    std::error_code type_error;
    if (!it->is_regular_file(type_error)) continue;
    if (IsComplete(it->path().filename().string())) ready.push_back(it->path());
  }
  if (error) {
    LogOnce(dir_, "cannot list: " + error.message());
    return;
  }
  std::sort(ready.begin(), ready.end());
  for (const fs::path& path : ready) {
    // A started file is finished even when cancelled: half a file would be
    // ingested again, whole, at the next start.
    if (cancelled_.load(std::memory_order_relaxed)) return;
    // Ingested already, only its rename failed: ingesting it again would
    // apply every line twice.
    if (auto unfinished = unfinished_.find(path.string()); unfinished != unfinished_.end()) {
      if (Finish(path, unfinished->second)) unfinished_.erase(unfinished);
      continue;
    }
    IngestFile(path);
  }
}

bool SpoolDirectory::Finish(const fs::path& path, const Outcome& outcome) {
  const std::string name = path.string();
  std::error_code error;
  // The sidecar first, so a .rejected file always has its errors beside it
  // (unless they could not be written at all, which IngestFile logged).
  const std::string sidecar = name + ".rejected.errors";
  if (outcome.rejected > 0 && fs::exists(sidecar + ".tmp", error)) {
    fs::rename(sidecar + ".tmp", sidecar, error);
    if (error) {
      LogOnce(name, "rename to " + sidecar + ": " + error.message());
      return false;
    }
  }
  const std::string target = name + (outcome.rejected == 0 ? ".done" : ".rejected");
  fs::rename(path, target, error);
  if (error) {
    LogOnce(name, "rename to " + target + ": " + error.message());
    return false;
  }
  files_->WithLabels({outcome.rejected == 0 ? "done" : "rejected"})->Inc();
  logged_.erase(name);
  log::Line line(outcome.rejected == 0 ? log::Level::kInfo : log::Level::kWarn, "spool.file_done");
  line.Field("file", name).Field("accepted", outcome.accepted).Field("rejected", outcome.rejected);
  if (outcome.rejected != 0) line.Field("errors", target + ".errors");
  return true;
}

void SpoolDirectory::IngestFile(const fs::path& path) {
  const std::string name = path.string();
  Result<std::unique_ptr<SpoolReader>> reader = SpoolReader::Open(name);
  // Nothing of it was applied: trying again later is safe.
  if (!reader.ok()) return LogOnce(name, reader.status().message());
  Outcome outcome;
  // Streamed, not held: a file of bad lines may be as long as the file.
  const std::string sidecar = name + ".rejected.errors.tmp";
  std::ofstream errors;
  auto reject = [&](uint64_t line, const std::string& message) {
    ++outcome.rejected;
    if (!errors.is_open()) errors.open(sidecar, std::ios::trunc | std::ios::binary);
    // replace: an error may quote untrusted bytes that are not UTF-8.
    errors << Json{{"line", line}, {"error", message}}.dump(-1, ' ', false,
                                                            Json::error_handler_t::replace)
           << '\n';
  };
  uint64_t last_line = 0;
  for (;;) {
    Result<std::optional<SpoolLine>> next = (*reader)->Next();
    if (!next.ok()) {
      // Lines before it were applied, so the file must not be read again;
      // it is finished as rejected, the sidecar saying where reading
      // stopped.
      reject(last_line + 1, "reading stopped here: " + next.status().message());
      break;
    }
    if (!next->has_value()) break;
    const SpoolLine& line = **next;
    last_line = line.number;
    Status ingested = line.event.ok() ? sink_(*line.event) : line.event.status();
    if (ingested.ok()) {
      ++outcome.accepted;
    } else {
      reject(line.number, ingested.message());
    }
  }
  lines_->WithLabels({"accepted"})->Add(outcome.accepted);
  lines_->WithLabels({"rejected"})->Add(outcome.rejected);
  if (outcome.rejected > 0) {
    errors.close();
    if (!errors) LogOnce(name, "writing " + sidecar + " failed; the line errors are incomplete");
  }
  if (!Finish(path, outcome)) unfinished_.emplace(name, outcome);
}

}  // namespace kvgov::spool
