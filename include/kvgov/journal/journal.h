#pragma once

// The audit journal: an append-only, hash-chained log of every governance
// decision and state change. Row format: docs/formats/journal.md.

#include <cstddef>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/mutex.h"
#include "kvgov/core/status.h"
#include "kvgov/store/store.h"

namespace kvgov::journal {

/// Who made a governance write. The actor's spellings are the writer's
/// ("token:<name>", "local", "kvgov", ...; docs/formats/journal.md §2);
/// the journal records them and never a secret.
struct Attribution {
  std::string actor;
  std::string origin;  // the replica the write went through; "" on a single node
};

/// One row. `hash` covers prev_hash and every other field with
/// length-prefixed framing (docs/formats/journal.md); rows are never
/// rewritten. Format 1 rows (written before attribution) have an empty
/// actor and origin, and neither is hashed.
struct Row {
  uint32_t format_version = 2;
  uint64_t seq = 0;            // 1, 2, 3, ... with no holes
  int64_t time_ms = 0;         // wall clock when appended
  std::string kind;            // e.g. "worker.drain", "lease.transition", "config"
  std::string subject;         // what it is about: a worker, lease, directive id
  std::string actor;           // who made the write (format 2)
  std::string origin;          // the replica it went through (format 2)
  std::string payload_digest;  // hex SHA-256 of the payload
  std::string payload;         // the decision itself, JSON
  std::string prev_hash;       // hash of row seq-1; 64 zeros for seq 1
  std::string hash;
  friend bool operator==(const Row&, const Row&) = default;
};

/// The row format this build writes (the row's version byte); it reads
/// format 1 as well, so a journal begun by an older kvgov still verifies.
inline constexpr uint32_t kRowFormatVersion = 2;
/// The largest encoded row; Append refuses a payload that would exceed it.
inline constexpr size_t kMaxRowBytes = size_t{1} << 20;

/// ResourceExhausted when a row of these fields would exceed kMaxRowBytes:
/// the check Append makes first, for a caller that must know before it
/// commits the row elsewhere (a replica, before its log append).
Status CheckRowFits(std::string_view kind, std::string_view subject, const Attribution& by,
                    std::string_view payload);

/// The hash of a row from its other fields (what `hash` must equal).
std::string RowHash(const Row& row);

/// Encodes and decodes a row for the store (docs/formats/journal.md).
/// DecodeRow returns Corruption naming what is wrong.
std::string EncodeRow(const Row& row);
Result<Row> DecodeRow(std::string_view bytes);

/// The hash chain over the store's journal column.
///
/// Thread-safe. Appends are chained in one total order under a mutex and
/// committed in groups: the appends that arrive while one synced write is
/// under way wait for it, and the first of them then writes them all in
/// one synced write (at most kMaxGroupRows), so concurrent writers share
/// an fsync. Each Append still returns only once its row is durable, and a
/// failed write fails every append of its group and moves nothing. Reads
/// go to the store directly.
class Journal {
 public:
  /// Loads the chain head from `store` (which must outlive the journal),
  /// verifying the last row. Corruption when the head does not verify.
  static Result<std::unique_ptr<Journal>> Open(store::Store* store);

  /// The most appends one synced write commits.
  static constexpr size_t kMaxGroupRows = 256;

  /// Appends a row and, in the same atomic store write, `extra` (the state
  /// change the row records), synced before returning. Returns the row.
  /// ResourceExhausted when the row would exceed kMaxRowBytes;
  /// InvalidArgument when an `extra` op targets the journal column; the store's error when the
  /// write fails, and then the head does not move.
  Result<Row> Append(std::string_view kind, std::string_view subject, const Attribution& by,
                     std::string_view payload, int64_t time_ms,
                     std::span<const store::WriteOp> extra = {});

  /// Moves the head to (`seq`, `hash`) without the rows between: a replica
  /// that rejoins the fleet from a snapshot adopts the fleet's chain head,
  /// and the rows it never had stay on every replica that applied them.
  /// Recorded as an adopted span (docs/formats/journal.md §4) that Verify
  /// accepts and reports, in one synced write with `extra`.
  /// FailedPrecondition when `seq` is behind the head, or at it with
  /// another hash (this journal is not a prefix of that chain).
  Status AdoptHead(uint64_t seq, std::string_view hash, std::string_view source,
                   std::span<const store::WriteOp> extra = {});

  /// Rows with seq >= since, at most `limit` of them, in order. Corruption
  /// when a stored row does not decode (rows are not re-hashed here: that
  /// is Verify's job).
  Result<std::vector<Row>> Read(uint64_t since, size_t limit) const;

  /// The last appended row's seq and hash (0 and 64 zeros when empty).
  uint64_t head_seq() const;
  std::string head_hash() const;

  /// The time of the last row this journal holds (0 when none): writers
  /// stamp no earlier time, so journal times stay ordered. An adopted head
  /// does not move it (its row is not here).
  int64_t head_time_ms() const;

 private:
  explicit Journal(store::Store* store) : store_(store) {}

  struct PendingAppend;
  // Writes `group` (the queue's front) as one synced write and settles each
  // append. REQUIRES: committing_ is set; releases mu_ during the write.
  void CommitGroup(std::vector<PendingAppend*> group) KVGOV_REQUIRES(mu_);

  store::Store* const store_;
  mutable Mutex mu_;
  std::condition_variable_any settled_;                     // a group was committed (or failed)
  std::deque<PendingAppend*> queue_ KVGOV_GUARDED_BY(mu_);  // appends not yet written
  bool committing_ KVGOV_GUARDED_BY(mu_) = false;           // a group's write is under way
  uint64_t head_seq_ KVGOV_GUARDED_BY(mu_) = 0;
  std::string head_hash_ KVGOV_GUARDED_BY(mu_);
  int64_t head_time_ms_ KVGOV_GUARDED_BY(mu_) = 0;
};

/// Rows this journal never held, whose chain it adopted (AdoptHead).
struct AdoptedSpan {
  uint64_t first_seq = 0;
  uint64_t last_seq = 0;
  std::string hash;    // the hash of row last_seq, which the next row chains to
  std::string source;  // where the head came from ("snapshot 1700000000000-0")
  friend bool operator==(const AdoptedSpan&, const AdoptedSpan&) = default;
};

/// What `kvgov journal verify` reports.
struct VerifyReport {
  uint64_t rows = 0;                         // rows that verified, before the first broken one
  std::vector<AdoptedSpan> adopted;          // spans crossed by an adopted head
  std::optional<uint64_t> first_broken_seq;  // the first row that does not verify
  std::string problem;                       // why, naming the field
};

/// Walks the whole chain: every row decodes, seqs run 1..N without holes
/// but the adopted spans,
/// each prev_hash equals the previous row's hash, each hash and payload
/// digest recompute. Returns the report (an error only when the store
/// cannot be read at all).
Result<VerifyReport> Verify(const store::Store& store);

/// Where a walk of the chain stands: what it verified, and the row it
/// expects next with the hash that row must chain to.
struct VerifyCursor {
  VerifyReport report;
  uint64_t next_seq = 1;
  std::string prev_hash = std::string(64, '0');
};

/// Verify, from `cursor` on: the rows from cursor.next_seq are checked as
/// Verify checks them, and the returned cursor stands after the last one
/// (or at the first broken row, which its report names). Resuming from a
/// returned cursor checks only the rows appended since: the same report a
/// whole walk would give, for what is new. A broken cursor is returned as
/// it is.
Result<VerifyCursor> VerifyFrom(const store::Store& store, VerifyCursor cursor);

}  // namespace kvgov::journal
