#pragma once

// Reading spool files: NDJSON, one POST /v1/events element per line
// (docs/formats/spool.md). Both `kvgov serve --spool-dir` and
// `kvgov ingest-spool` read through here, so a line means the same to both.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "kvgov/codec/ingest_batch.h"
#include "kvgov/core/status.h"

namespace kvgov::spool {

/// The longest line, without its "\n" (docs/formats/spool.md).
inline constexpr size_t kMaxLineBytes = size_t{1} << 20;

/// Decodes one line as one element of POST /v1/events' `events[]`, with the
/// same decoder and limits as a request body. Errors are
/// "<path>: <problem>", the path starting at `$`, the line's own object
/// (a malformed line's column counts from the line's first byte):
/// InvalidArgument for anything that is not exactly one valid element,
/// ResourceExhausted over a limit.
Result<IngestEvent> DecodeSpoolLine(std::string_view line);

/// One non-blank line of a spool file.
struct SpoolLine {
  uint64_t number = 0;        // 1-based, blank lines counted
  std::string text;           // without its "\n"; empty when over kMaxLineBytes
  Result<IngestEvent> event;  // DecodeSpoolLine(text), or the over-limit error
};

/// Reads a spool file one line at a time, holding at most one line (up to
/// kMaxLineBytes) in memory: an over-long line is skipped to its "\n" and
/// reported, not read. Not thread-safe; one reader per file.
class SpoolReader {
 public:
  /// Returns IOError (naming the path) when the file cannot be opened or is
  /// not a regular file.
  static Result<std::unique_ptr<SpoolReader>> Open(const std::string& path);

  ~SpoolReader();
  SpoolReader(const SpoolReader&) = delete;
  SpoolReader& operator=(const SpoolReader&) = delete;

  /// The next non-blank line, decoded; nullopt at the end of the file.
  /// Returns IOError when reading fails.
  Result<std::optional<SpoolLine>> Next();

 private:
  SpoolReader(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  // Refills buffer_; false at the end of the file.
  Result<bool> Fill();

  int fd_;
  std::string path_;
  std::string buffer_;  // read and not yet consumed, from offset_
  size_t offset_ = 0;
  uint64_t line_number_ = 0;
  bool eof_ = false;
};

}  // namespace kvgov::spool
