#pragma once

// kvgov's embedded store: RocksDB in the data dir, one column family per
// kind of record. Layout: docs/formats/store.md.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kvgov/core/status.h"

namespace kvgov::store {

/// The column families. Their spellings on disk are in docs/formats/store.md.
enum class Column {
  kMeta,        // format version, store identity
  kJournal,     // the audit journal: u64 seq -> row
  kGovernance,  // governance state: "<kind>/<id>" -> record
  kStreams,     // per engine stream: worker -> last durable seq
  kEventLog,    // engine batches applied since the last snapshot: worker/u64 seq -> payload
  kSnapshots,   // residency index snapshots: worker -> snapshot
};

/// One change in an atomic write: a put; a delete when `value` is empty;
/// or, when `value` is empty and `range_end` is not, a delete of every key
/// in [key, range_end), which reads nothing (RocksDB's DeleteRange).
struct WriteOp {
  Column column;
  std::string key;
  std::optional<std::string> value;
  std::string range_end = {};
};

/// The store format this build reads and writes.
inline constexpr uint32_t kStoreFormatVersion = 1;

/// Big-endian 8-byte key, so integer keys sort numerically.
std::string KeyU64(uint64_t value);
/// Inverse of KeyU64; InvalidArgument unless `key` is 8 bytes.
Result<uint64_t> ParseKeyU64(std::string_view key);

/// How a store is opened.
struct StoreOptions {
  /// Hears of a fatal write failure once (see Store::Open).
  std::function<void(const Status&)> on_fatal;
  /// Background compaction stays off until ResumeCompactions(). A restart
  /// decodes every worker's snapshot on every core, and a compaction that
  /// the crash left due (often hundreds of MB of snapshots) would take one
  /// of them (docs/formats/store.md).
  bool hold_compactions = false;
};

/// Thread-safe: RocksDB's own guarantees (concurrent reads and writes); the
/// failure state (full disk, fatal error) is behind a mutex of its own.
/// Owned by the daemon; closed on destruction.
class Store {
 public:
  /// Opens the store in `dir`, creating it (and its column families and
  /// format version) when `dir` holds none. Returns:
  ///  - Corruption naming the file when RocksDB finds a damaged file, or the
  ///    store's format version is not kStoreFormatVersion;
  ///  - IOError when the directory cannot be used (permissions, a second
  ///    kvgov holding the lock).
  ///
  /// Writes that fail are never acknowledged, and fail in one of two ways:
  ///  - the disk is full: Unavailable naming it. The store asks RocksDB to
  ///    resume at a later write (at most every kResumeInterval), so writes
  ///    are taken again by themselves once space is freed;
  ///  - any other I/O error (a failed write or fsync): IOError, and fatal.
  ///    After a failed fsync the file system's state is unknown (the dirty
  ///    pages may be gone, and a retried fsync can succeed on nothing), so
  ///    the store refuses every later write with that error and calls
  ///    `on_fatal` once, from the failing writer's thread; the owner stops,
  ///    and a restart recovers from the write-ahead log.
  static Result<std::unique_ptr<Store>> Open(const std::string& dir, StoreOptions options = {});

  static constexpr std::chrono::milliseconds kResumeInterval{200};

  virtual ~Store() = default;

  /// Applies `ops` atomically. With `sync`, the write is on stable storage
  /// (the WAL is fsynced) before this returns: use it for every write that
  /// an answer acknowledges.
  virtual Status Write(std::span<const WriteOp> ops, bool sync) = 0;

  /// Puts one large value durably without the write-ahead log: the column's
  /// memtable is flushed into a table file before this returns. For values
  /// rewritten whole and often (index snapshots, tens of MB): through the
  /// WAL each would be written twice, and read, copied and flushed again by
  /// every open that finds it there. Fails as Write does.
  virtual Status PutFlushed(Column column, std::string_view key, std::string_view value) = 0;
  /// The value, nullopt when absent. Corruption / IOError from RocksDB.
  virtual Result<std::optional<std::string>> Get(Column column, std::string_view key) const = 0;

  /// Hands `read` the value where RocksDB holds it (a pinned block, valid
  /// during the call only) instead of copying it: for values of tens of MB
  /// read once. False, without calling `read`, when absent; otherwise what
  /// `read` returns, or Corruption / IOError from RocksDB.
  virtual Result<bool> ReadPinned(
      Column column, std::string_view key,
      const std::function<Status(std::string_view value)>& read) const = 0;
  /// Visits keys in [begin, end) in key order (an empty `end` means to the
  /// end of the column) until `visit` returns false. Checksums are verified
  /// on every read; Corruption names what failed.
  virtual Status Scan(
      Column column, std::string_view begin, std::string_view end,
      const std::function<bool(std::string_view key, std::string_view value)>& visit) const = 0;

  /// The greatest key in `column`, nullopt when the column is empty (the
  /// journal's head). Corruption / IOError from RocksDB.
  virtual Result<std::optional<std::string>> LastKey(Column column) const = 0;

  /// Makes every earlier unsynced write durable (group commit).
  virtual Status SyncWal() = 0;

  /// Starts the background compaction that StoreOptions::hold_compactions
  /// held; a no-op when none is held.
  virtual Status ResumeCompactions() = 0;

  /// Flushes every column's memtable into table files, so that a test can
  /// find (and damage) the .sst files. Not for production paths.
  virtual Status FlushForTest() = 0;

  virtual const std::string& dir() const = 0;
};

}  // namespace kvgov::store
