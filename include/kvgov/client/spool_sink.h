#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "kvgov/client/sink.h"

namespace kvgov::client {

/// When a SpoolSink makes its writes durable with fdatasync.
enum class FsyncPolicy {
  kNever,       // the page cache decides: a power cut may lose recent lines
  kOnPublish,   // before a file is renamed into view: a published file is whole on disk
  kEveryEvent,  // after every line: nothing Emit accepted is lost, at a sync per event
};

/// Where and how a SpoolSink writes.
struct SpoolSinkOptions {
  /// The spool directory (kvgov serve --spool-dir reads it). It must exist;
  /// files are created in it mode 0640.
  std::string dir;
  /// Files are named <prefix>-<unix ms>-<pid>-<seq>.ndjson; letters,
  /// digits, '_' and '-' only.
  std::string prefix = "kvgov";
  /// A file is published (renamed from .ndjson.tmp to .ndjson) once it holds
  /// this many bytes or once its first line is this old, whichever is
  /// first, and by Flush and Close. The age is watched by a timer thread,
  /// so a quiet sink still publishes within max_file_age. Zero turns a
  /// bound off.
  size_t max_file_bytes = size_t{16} << 20;
  std::chrono::milliseconds max_file_age{1000};
  FsyncPolicy fsync = FsyncPolicy::kOnPublish;
};

/// The longest line a spool file may hold (docs/formats/spool.md). Longer
/// events are refused by Emit.
inline constexpr size_t kMaxSpoolLineBytes = size_t{1} << 20;

/// A Sink that appends events as NDJSON lines to files in a spool
/// directory (docs/formats/spool.md), for kvgov to ingest later. Never
/// touches the network. Emit writes the line before it returns (and syncs
/// it under FsyncPolicy::kEveryEvent), so it waits on the local disk, not
/// on kvgov. A file is written as NAME.ndjson.tmp and renamed to
/// NAME.ndjson when it is published; a crash leaves the .tmp behind, which
/// kvgov ignores and the operator may rename (its last line may be cut).
///
/// Thread-safe: Emit, Flush, Close and stats may be called from any thread;
/// one mutex serialises writes. The destructor calls Close().
class SpoolSink final : public Sink {
 public:
  /// Starts the age timer. No file is created until the first event.
  /// Returns InvalidArgument for a bad prefix or FailedPrecondition when
  /// `dir` is not a directory this process can write.
  static Result<std::unique_ptr<SpoolSink>> Create(SpoolSinkOptions options);

  ~SpoolSink() override;
  SpoolSink(const SpoolSink&) = delete;
  SpoolSink& operator=(const SpoolSink&) = delete;

  /// Writes the event as one line. Returns OK; InvalidArgument for an
  /// event EncodeEvent refuses or one longer than kMaxSpoolLineBytes;
  /// IOError when the write (or, under kEveryEvent, the sync) failed: the
  /// file is cut back to its last whole line, or, should even that fail,
  /// published as it is, its torn last line then rejected by kvgov on its
  /// own; FailedPrecondition after Close.
  Status Emit(const Event& event) noexcept override;

  /// Publishes the current file, so every event emitted so far is visible
  /// to the spool directory's reader. The timeout is not used: publishing
  /// is a sync and a rename on the caller's thread. Returns IOError when
  /// either fails (the file then stays .tmp and is retried next time).
  Status Flush(std::chrono::milliseconds timeout) noexcept override;
  SinkStats stats() const noexcept override;

  /// Publishes the current file and stops the timer. Idempotent; later
  /// Emits return FailedPrecondition.
  Status Close() noexcept;

 private:
  struct Impl;
  explicit SpoolSink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgov::client
