#pragma once

// The replicated governance log: one Redis Stream that every kvgov replica
// appends governance writes to (XADD) and applies in stream order (XREAD),
// plus the claims that decide which replica does a piece of work, and the
// board where replicas share their in-flight route load.
// Format: docs/formats/governance-log.md.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvgov/core/mutex.h"
#include "kvgov/core/status.h"
#include "kvgov/replication/redis.h"

namespace kvgov::replication {

/// A state change an entry carries: `column` names where it goes on the
/// applying replica ("governance": the store's governance column; "tokens":
/// the token file). No value means erase.
struct LogWrite {
  std::string column;
  std::string key;
  std::optional<std::string> value;
  friend bool operator==(const LogWrite&, const LogWrite&) = default;
};

/// One governance write. Every replica turns it into the same journal row
/// (kind, subject, actor, origin, payload, time_ms) and the same state
/// writes; an entry
/// with an empty kind carries state only (a lease heartbeat) and makes no
/// row.
struct LogEntry {
  std::string id;  // the stream id ("1700000000000-0"); not encoded
  // Chosen by the writer, the same on every retry of one write, so an entry
  // appended twice (its XADD reply lost) is applied once; "" before version 3.
  std::string write_id;
  std::string origin;  // the replica that appended it
  std::string actor;   // who asked for the write (journal.md §2); "" in version 1
  std::string kind;
  std::string subject;
  std::string payload;
  int64_t time_ms = 0;
  std::vector<LogWrite> writes;
  friend bool operator==(const LogEntry&, const LogEntry&) = default;
};

/// The largest encoded entry a replica appends or accepts.
inline constexpr size_t kMaxLogEntryBytes = size_t{2} << 20;
/// The entry format this build writes; it reads every version up to it.
inline constexpr int kLogEntryVersion = 3;
/// The longest write id an entry may carry.
inline constexpr size_t kMaxWriteIdBytes = 64;

/// The entry's field value (docs/formats/governance-log.md); `id` is left
/// out (the stream assigns it).
std::string EncodeLogEntry(const LogEntry& entry);
/// InvalidArgument naming the field at fault; the size limit, field types,
/// unknown columns and the version are all checked.
Result<LogEntry> DecodeLogEntry(std::string_view bytes, std::string_view id);

/// A stream id as (milliseconds, sequence), ordered.
struct StreamId {
  uint64_t ms = 0;
  uint64_t seq = 0;
  // clang-tidy 14 reads the 0 a defaulted <=> is compared with as a null
  // pointer (llvm-project#53961).
  // NOLINTNEXTLINE(modernize-use-nullptr)
  friend auto operator<=>(const StreamId&, const StreamId&) = default;
  std::string ToString() const;
};
Result<StreamId> ParseStreamId(std::string_view text);

/// What one read brought: decoded entries in stream order, entries that did
/// not decode (id and why), and the last id read (decoded or not), where
/// the next read starts.
struct LogBatch {
  std::vector<LogEntry> entries;
  std::vector<std::pair<std::string, Status>> rejected;
  std::string last_id;
};

/// Thread-safe: appends and reads use separate connections, each behind
/// its own mutex, so a blocked read never delays an append.
class GovernanceLog {
 public:
  GovernanceLog(const RedisEndpoint& endpoint, std::string stream_key,
                std::chrono::milliseconds timeout);

  /// XADD; returns the id. InvalidArgument when the entry is too large;
  /// Unavailable when Redis is unreachable (then nothing was appended, or
  /// the reply was lost: see the format page on duplicates).
  Result<std::string> Append(const LogEntry& entry);

  /// Entries after `after_id` ("0-0": from the start), at most `count`,
  /// waiting up to `block` for the first one. An empty batch (last_id ==
  /// after_id) when nothing came in time.
  Result<LogBatch> ReadAfter(std::string_view after_id, size_t count,
                             std::chrono::milliseconds block);

  /// The id of the newest entry ("0-0" when the stream is empty).
  Result<std::string> LastId();

  /// Deletes every entry older than `below` (XTRIM MINID) and, in the same
  /// script, records `below` as the trim mark `<stream>:trimmed`, so that a
  /// reader that has not applied up to it knows its next entries would
  /// follow a hole. The mark never moves back: a `below` not past it
  /// trims nothing and returns false.
  Result<bool> TrimBelow(const StreamId& below);
  /// The trim mark: every entry older than it may be gone. nullopt when the
  /// stream was never trimmed (or Redis lost the mark with the stream).
  Result<std::optional<StreamId>> TrimmedBelow();
  /// The number of entries in the stream (XLEN).
  Result<uint64_t> Length();

  /// The log's identity, `<stream>:identity`: set once (SET NX) to
  /// `candidate` by the first replica of a fleet, and gone only with
  /// Redis's data. A replica remembers it, and one that finds another (or
  /// none) knows the log it followed was lost. Returns the identity in
  /// force.
  Result<std::string> EnsureIdentity(std::string_view candidate);
  /// The identity in force; nullopt when there is none (never set, or lost).
  Result<std::optional<std::string>> Identity();

 private:
  const std::string stream_key_;
  const std::chrono::milliseconds timeout_;  // a blocking read waits block + timeout_
  Mutex append_mu_;
  RedisConnection append_ KVGOV_GUARDED_BY(append_mu_);
  Mutex read_mu_;
  RedisConnection read_ KVGOV_GUARDED_BY(read_mu_);
};

/// Named claims with a time to live: SET NX PX to take, a compare-and-set
/// script to renew or release, so a replica only ever extends or drops a
/// claim it holds. Thread-safe (one connection behind a mutex).
class ClaimStore {
 public:
  ClaimStore(const RedisEndpoint& endpoint, std::string key_prefix,
             std::chrono::milliseconds timeout);

  /// True when `owner` now holds `name` (taken now, or already its own,
  /// which renews it).
  Result<bool> Acquire(std::string_view name, std::string_view owner,
                       std::chrono::milliseconds ttl);
  /// True when `owner` held it and it was extended; false when it lapsed
  /// or someone else holds it.
  Result<bool> Renew(std::string_view name, std::string_view owner, std::chrono::milliseconds ttl);
  /// Drops the claim if `owner` holds it.
  Status Release(std::string_view name, std::string_view owner);
  /// Who holds it now, if anyone.
  Result<std::optional<std::string>> Holder(std::string_view name);

 private:
  const std::string prefix_;
  Mutex mu_;
  RedisConnection connection_ KVGOV_GUARDED_BY(mu_);
};

/// The governance state every replica holds, as of one log entry: what a
/// replica that was away longer than the stream's history installs instead
/// of the entries it missed (docs/formats/governance-log.md, "Snapshot").
struct GovernanceSnapshot {
  std::string id;            // the last entry applied into it
  uint64_t journal_seq = 0;  // the journal's head after that entry
  std::string journal_hash;
  // Every record of the store's governance column, by key.
  std::vector<std::pair<std::string, std::string>> governance;
  // The token file: name -> encoded token record.
  std::vector<std::pair<std::string, std::string>> tokens;
  // The write ids still deduplicated after that entry: write id -> the
  // stream id it was first applied at.
  std::vector<std::pair<std::string, std::string>> write_ids;
  friend bool operator==(const GovernanceSnapshot&, const GovernanceSnapshot&) = default;
};

/// The largest snapshot a replica writes or reads, encoded.
inline constexpr size_t kMaxSnapshotBytes = size_t{512} << 20;

std::string EncodeSnapshot(const GovernanceSnapshot& snapshot);
/// InvalidArgument naming the field at fault.
Result<GovernanceSnapshot> DecodeSnapshot(std::string_view bytes);

/// The newest governance snapshot in Redis: chunks of at most 1 MiB under
/// `<prefix>:snapshot:<id>:<n>` and a manifest `<prefix>:snapshot` naming
/// them with their SHA-256, written after them, so a reader sees the old
/// snapshot or the new one whole. Thread-safe (one connection behind a
/// mutex).
class SnapshotStore {
 public:
  SnapshotStore(const RedisEndpoint& endpoint, std::string key_prefix,
                std::chrono::milliseconds timeout);

  /// Replaces the snapshot (the previous one's chunks are deleted after).
  /// InvalidArgument when it is over kMaxSnapshotBytes encoded.
  Status Put(const GovernanceSnapshot& snapshot);
  /// The snapshot, or nullopt when there is none. Unavailable when its
  /// chunks do not match the manifest (it was replaced under the read: read
  /// again); InvalidArgument when it does not decode.
  Result<std::optional<GovernanceSnapshot>> Get();

 private:
  const std::string prefix_;  // "<prefix>:snapshot"
  Mutex mu_;
  RedisConnection connection_ KVGOV_GUARDED_BY(mu_);
};

/// Each live replica's applied stream id, under a key that expires (`ttl`):
/// the housekeeper trims the log below the lowest one. Thread-safe (one
/// connection behind a mutex).
class AppliedBoard {
 public:
  AppliedBoard(const RedisEndpoint& endpoint, std::string key_prefix, std::string replica_id,
               std::chrono::milliseconds ttl, std::chrono::milliseconds timeout);

  Status Publish(const StreamId& applied);
  /// The lowest applied id any live replica published, this one included;
  /// nullopt when none did.
  Result<std::optional<StreamId>> Lowest();

 private:
  const std::string prefix_;
  const std::string replica_id_;
  const std::chrono::milliseconds ttl_;
  Mutex mu_;
  RedisConnection connection_ KVGOV_GUARDED_BY(mu_);
};

/// Each replica's in-flight route load per worker, published under a key
/// that expires (`ttl`), so a replica that dies stops counting within ttl.
/// Thread-safe (one connection behind a mutex).
class LoadBoard {
 public:
  LoadBoard(const RedisEndpoint& endpoint, std::string key_prefix, std::string replica_id,
            std::chrono::milliseconds ttl, std::chrono::milliseconds timeout);

  /// Replaces this replica's published load.
  Status Publish(const std::map<std::string, uint64_t, std::less<>>& blocks_by_worker);
  /// The sum over every other live replica's published load, per worker.
  Result<std::map<std::string, uint64_t, std::less<>>> PeerTotals();

 private:
  const std::string prefix_;
  const std::string replica_id_;
  const std::chrono::milliseconds ttl_;
  Mutex mu_;
  RedisConnection connection_ KVGOV_GUARDED_BY(mu_);
};

}  // namespace kvgov::replication
