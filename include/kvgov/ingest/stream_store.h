#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "kvgov/index/residency_index.h"
#include "kvgov/ingest/engine_stream.h"
#include "kvgov/store/store.h"

namespace kvgov::ingest {

/// Makes engine streams' residency durable: every applied batch is logged
/// (unsynced; the daemon's group commit syncs the WAL), and every
/// `snapshot_every` batches the worker's index is snapshotted and the log
/// before it dropped, in one synced write. After a crash, Recover loads the
/// snapshot, re-applies the log after it and resumes the stream from the
/// last batch kvgov had, so the engine's replay socket fills the rest.
/// Layout: docs/formats/store.md.
///
/// A restart of the engine starts a new epoch: the log of the old process
/// can never be mistaken for the new one's, whose seqs start over.
///
/// A batch the store refuses (a full disk) is applied but not logged, and
/// the worker's later batches are not logged either until a snapshot, tried
/// at the usual cadence, covers them: the log never has a hole for Recover
/// to step over. A crash before that snapshot resumes from the last logged
/// batch, and the engine's replay brings the rest.
///
/// Thread-safe: stream threads call OnApplied/OnRestart concurrently for
/// different workers; one mutex guards the per-worker counters.
class StreamStore : public StreamDurability {
 public:
  StreamStore(store::Store* store, index::ResidencyIndex* index, uint64_t snapshot_every)
      : store_(store), index_(index), snapshot_every_(snapshot_every) {}

  void OnApplied(std::string_view worker, uint64_t seq, double ts,
                 std::string_view payload) override;
  void OnRestart(std::string_view worker) override;

  /// Brings `stream`'s worker back to what the store holds. Adds what it
  /// recovered to `stats`; Corruption naming the worker for a damaged
  /// snapshot or log record. Streams of different workers may recover at
  /// once, into the same `stats`.
  struct RecoveryStats {
    uint64_t snapshot_blocks = 0;
    uint64_t logged_batches = 0;
  };
  Status Recover(EngineStream& stream, RecoveryStats* stats);

  /// Snapshots every worker that has logged batches (clean shutdown), so
  /// the next start does not replay the log. Synced.
  Status SnapshotAll();

 private:
  struct Progress {
    uint64_t epoch = 0;
    bool has_seq = false;
    uint64_t seq = 0;
    double ts = 0;
    uint64_t since_snapshot = 0;
    // A batch since the last snapshot could not be logged: log nothing
    // more until a snapshot succeeds.
    bool unlogged = false;
    std::string last_digest;  // Sha256Hex of the last applied batch; "" unknown
    // The last applied batch's bytes, while its digest is not computed:
    // only a snapshot record needs the digest, and hashing every batch cost
    // about four times applying it (docs/benchmarks.md).
    std::optional<std::string> undigested;

    // An epoch's start: nothing applied in it yet.
    static Progress Epoch(uint64_t epoch) {
      Progress progress;
      progress.epoch = epoch;
      return progress;
    }
    // Sha256Hex of the last applied batch; "" unknown.
    std::string Digest() const;
  };

  // Writes the worker's snapshot at its current progress and drops its log,
  // synced. REQUIRES: the caller is the worker's stream thread, or the
  // streams are stopped (the index must not change under the snapshot).
  Status Snapshot(std::string_view worker, const Progress& progress);

  store::Store* const store_;
  index::ResidencyIndex* const index_;
  const uint64_t snapshot_every_;
  std::mutex mu_;
  std::map<std::string, Progress, std::less<>> progress_;  // guarded by mu_
};

}  // namespace kvgov::ingest
