#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <variant>

#include "kvgov/core/mutex.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/index/worker_capture.h"
#include "kvgov/ingest/engine_stream.h"
#include "kvgov/store/store.h"

namespace kvgov::ingest {

/// Makes engine streams' residency durable: every applied batch is logged
/// (unsynced; the daemon's group commit syncs the WAL), and now and then
/// the worker's index is snapshotted straight into a table file and then
/// the log before it dropped with a synced write (docs/adr/0040): once at
/// least `snapshot_every` batches are logged since
/// the last snapshot and the blocks they changed reach `snapshot_log_ratio`
/// times the blocks that snapshot held. So rewriting a big worker costs at
/// most 1 / ratio block written per block ingested, and a recovery replays
/// at most about ratio times the snapshot's blocks (or `snapshot_every`
/// batches, when more). After a crash, Recover loads the
/// snapshot, re-applies the log after it and resumes the stream from the
/// last batch kvgov had, so the engine's replay socket fills the rest.
/// Layout: docs/formats/store.md; why a writer thread: docs/adr/0038.
///
/// The stream's thread only hands work over: the batch's log record, and
/// at a snapshot the copy of the worker's residency (the index's
/// CaptureWorker, taken right after the batch it is labelled with, so it
/// is exactly the state at that seq). One writer thread, in the order work
/// was handed over, writes consecutive log records as one write and
/// encodes and writes each snapshot, then deletes the log it covers (from
/// the worker's first epoch, so what a failed deletion left goes too). Log records waiting for the
/// writer are bounded
/// (`max_queued_bytes`, well below what an engine's replay buffer holds):
/// a stream hands over more only once the writer has caught up below it.
/// A worker has at most one snapshot waiting; the next is taken once it
/// is written. So a kill -9 loses at most the records still waiting,
/// which the engine's replay brings back, besides what a machine crash
/// loses of the unsynced WAL.
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
/// different workers (each worker from one thread at a time); one mutex
/// guards the per-worker counters and the writer's queue.
class StreamStore : public StreamDurability {
 public:
  struct Options {
    // A worker is snapshotted once at least this many of its batches were
    // logged since its last snapshot, and the blocks they stored or removed
    // reach the ratio times the resident blocks that snapshot held.
    uint64_t snapshot_every = 10'000;
    double snapshot_log_ratio = 0.25;
    // Log records handed over and not yet written, at most.
    size_t max_queued_bytes = 16ull << 20;
  };
  StreamStore(store::Store* store, index::ResidencyIndex* index, Options options);
  /// Writes what was handed over, then stops the writer.
  ~StreamStore() override;
  StreamStore(const StreamStore&) = delete;
  StreamStore& operator=(const StreamStore&) = delete;

  void OnApplied(std::string_view worker, uint64_t seq, double ts, std::string_view payload,
                 uint64_t blocks) override;
  void OnRestart(std::string_view worker) override;

  /// Brings `stream`'s worker back to what the store holds. Adds what it
  /// recovered to `stats`; Corruption naming the worker for a damaged
  /// snapshot or log record. Streams of different workers may recover at
  /// once, into the same `stats`, before any of them applies a batch.
  struct RecoveryStats {
    uint64_t snapshot_blocks = 0;
    uint64_t logged_batches = 0;
  };
  Status Recover(EngineStream& stream, RecoveryStats* stats);

  /// Returns once everything handed over before the call is written (or
  /// failed, which the writer logs).
  void Flush();

  /// Bytes of log records handed over and not yet written.
  size_t pending_bytes() const;

  /// Snapshots every worker that has logged batches (clean shutdown, once
  /// the streams are stopped), so the next start does not replay the log.
  /// Synced.
  Status SnapshotAll();

 private:
  struct Progress {
    uint64_t epoch = 0;
    bool has_seq = false;
    uint64_t seq = 0;
    double ts = 0;
    uint64_t since_snapshot = 0;         // batches logged since the last snapshot
    uint64_t blocks_since_snapshot = 0;  // blocks those batches stored or removed
    uint64_t snapshot_blocks = 0;        // resident blocks the last snapshot held
    bool snapshot_pending = false;       // a capture waits for the writer
    std::string last_digest;             // Sha256Hex of the last applied batch; "" unknown
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

  // Work for the writer, in the order it was handed over.
  struct LogRecord {
    std::string key;
    std::string value;
    size_t bytes() const { return key.size() + value.size(); }
  };
  struct SnapshotJob {
    Progress progress;  // what the capture is the state after
    index::WorkerCapture capture;
    // Log records to delete with the snapshot: [begin, end); none if empty.
    std::string delete_begin;
    std::string delete_end;
    // The first snapshot of an engine's new epoch: until one is written,
    // the epoch's log follows nothing Recover reads.
    bool starts_epoch = false;
  };
  // The worker's log has a hole from here (its new epoch has no snapshot).
  struct Unlogged {};
  struct Job {
    std::string worker;
    std::variant<LogRecord, SnapshotJob, Unlogged> work;
  };

  // The worker's state right now as a snapshot job at `progress` that also
  // drops its log records in [delete_begin, delete_end); nullopt (logged)
  // when the index does not know the worker, or an Unlogged job if the
  // snapshot was to start an epoch. REQUIRES: the caller is the worker's
  // stream thread, or the streams are stopped.
  std::optional<Job> CaptureSnapshot(std::string_view worker, Progress progress,
                                     std::string delete_begin, std::string delete_end,
                                     bool starts_epoch) const;
  // The worker's resident blocks, over all tiers (0 if unknown).
  uint64_t ResidentBlocks(std::string_view worker) const;
  // Queues `job`, first waiting while the log records queued are over
  // their bound if it is one.
  void HandOver(Job job);
  void WriterLoop();
  // Writes `job`'s snapshot and the log deletions, synced.
  Status WriteSnapshot(const std::string& worker, SnapshotJob job);

  store::Store* const store_;
  index::ResidencyIndex* const index_;
  const Options options_;

  mutable Mutex mu_;
  std::condition_variable_any changed_;  // the queue, written_ or stopping_ changed
  std::map<std::string, Progress, std::less<>> progress_ KVGOV_GUARDED_BY(mu_);
  std::deque<Job> queue_ KVGOV_GUARDED_BY(mu_);
  // Of the log records in queue_ or being written.
  size_t queued_bytes_ KVGOV_GUARDED_BY(mu_) = 0;
  uint64_t handed_over_ KVGOV_GUARDED_BY(mu_) = 0;  // jobs ever queued
  uint64_t written_ KVGOV_GUARDED_BY(mu_) = 0;      // jobs the writer finished
  bool stopping_ KVGOV_GUARDED_BY(mu_) = false;
  // Workers whose log has a hole since a failed write: their records are
  // dropped until a snapshot of theirs is written. The writer thread's
  // own, and SnapshotAll's once Flush has returned with the streams
  // stopped.
  std::set<std::string, std::less<>> unlogged_;
  std::thread writer_;  // last: started once everything above exists
};

}  // namespace kvgov::ingest
