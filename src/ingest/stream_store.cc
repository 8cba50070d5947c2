#include "kvgov/log/log.h"
#include "kvgov/ingest/stream_store.h"

#include <bit>
#include <cstring>
#include <vector>

#include "kvgov/core/digest.h"

namespace kvgov::ingest {
namespace {

using store::Column;
using store::KeyU64;
using store::ParseKeyU64;
using store::WriteOp;

// Event log keys: worker, NUL, epoch, seq (worker ids never hold a NUL), so
// one worker's records of one epoch are contiguous and in seq order.
std::string LogPrefix(std::string_view worker, uint64_t epoch) {
  std::string key(worker);
  key.push_back('\0');
  key += KeyU64(epoch);
  return key;
}

std::string LogKey(std::string_view worker, uint64_t epoch, uint64_t seq) {
  return LogPrefix(worker, epoch) + KeyU64(seq);
}

// The log a snapshot at `seq` of `epoch` holds: every batch up to it, and
// whatever earlier epochs left. A snapshot is durable before its log is
// deleted (WriteSnapshot), so a crash between the two leaves batches behind,
// even of an epoch no later snapshot would otherwise name; the next takes them.
struct LogRange {
  std::string begin;
  std::string end;
};
LogRange LogThrough(std::string_view worker, uint64_t epoch, uint64_t seq) {
  return {LogPrefix(worker, 0), LogKey(worker, epoch, seq + 1)};
}

std::string EncodeDouble(double value) { return KeyU64(std::bit_cast<uint64_t>(value)); }

Result<double> DecodeDouble(std::string_view bytes) {
  KVGOV_ASSIGN_OR_RETURN(uint64_t bits, ParseKeyU64(bytes));
  return std::bit_cast<double>(bits);
}

// Snapshot record: epoch | has_seq | seq | ts | last batch digest (64 hex,
// or 64 '-' when unknown) | index snapshot.
constexpr size_t kDigestChars = 64;
constexpr size_t kSnapshotHeader = 32 + kDigestChars;

std::string EncodeSnapshotRecord(uint64_t epoch, bool has_seq, uint64_t seq, double ts,
                                 const std::string& last_digest, std::string_view snapshot) {
  const std::string digest =
      last_digest.size() == kDigestChars ? last_digest : std::string(kDigestChars, '-');
  return KeyU64(epoch) + KeyU64(has_seq ? 1 : 0) + KeyU64(seq) + EncodeDouble(ts) + digest +
         std::string(snapshot);
}

}  // namespace

uint64_t StreamStore::ResidentBlocks(std::string_view worker) const {
  uint64_t resident = 0;
  if (std::optional<index::WorkerResidency> known = index_->Worker(worker)) {
    for (uint64_t blocks : known->blocks) resident += blocks;
  }
  return resident;
}

std::string StreamStore::Progress::Digest() const {
  return undigested.has_value() ? Sha256Hex(*undigested) : last_digest;
}

StreamStore::StreamStore(store::Store* store, index::ResidencyIndex* index, Options options)
    : store_(store), index_(index), options_(options), writer_([this] { WriterLoop(); }) {}

StreamStore::~StreamStore() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  writer_.join();
}

void StreamStore::OnApplied(std::string_view worker, uint64_t seq, double ts,
                            std::string_view payload, uint64_t blocks) {
  uint64_t epoch = 0;
  std::optional<Progress> snapshot_at;  // when this batch is the one to snapshot after
  {
    MutexLock lock(mu_);
    auto it = progress_.find(worker);
    if (it == progress_.end()) it = progress_.emplace(std::string(worker), Progress{}).first;
    Progress& current = it->second;
    current.has_seq = true;
    current.seq = seq;
    current.ts = ts;
    if (!current.undigested.has_value()) current.undigested.emplace();
    current.undigested->assign(payload);  // reuses the buffer: no allocation once grown
    epoch = current.epoch;
    ++current.since_snapshot;
    current.blocks_since_snapshot += blocks;
    if (current.since_snapshot >= options_.snapshot_every && !current.snapshot_pending &&
        static_cast<double>(current.blocks_since_snapshot) >=
            options_.snapshot_log_ratio * static_cast<double>(current.snapshot_blocks)) {
      snapshot_at = current;
      current.since_snapshot = 0;
      current.blocks_since_snapshot = 0;
    }
  }
  LogRecord record{LogKey(worker, epoch, seq), std::string()};
  record.value.reserve(8 + payload.size());
  record.value.append(EncodeDouble(ts)).append(payload);
  HandOver(Job{std::string(worker), std::move(record)});
  if (snapshot_at.has_value()) {
    // Taken here, between this batch and the next, so the capture is the
    // state at exactly this seq; the writer encodes it.
    LogRange held = LogThrough(worker, epoch, seq);
    std::optional<Job> snapshot =
        CaptureSnapshot(worker, std::move(*snapshot_at), std::move(held.begin), std::move(held.end),
                        /*starts_epoch=*/false);
    if (!snapshot.has_value()) return;
    const uint64_t resident = ResidentBlocks(worker);
    {
      // Only this thread changes the worker's progress until the writer
      // has the job, so it cannot be due again before this.
      MutexLock lock(mu_);
      Progress& current = progress_[std::string(worker)];
      current.snapshot_pending = true;
      current.snapshot_blocks = resident;
    }
    HandOver(*std::move(snapshot));
  }
}

void StreamStore::OnRestart(std::string_view worker) {
  Progress progress;
  uint64_t old_epoch = 0;
  {
    MutexLock lock(mu_);
    Progress& current = progress_[std::string(worker)];
    old_epoch = current.epoch;
    current = Progress::Epoch(old_epoch + 1);
    progress = current;
    current.snapshot_pending = true;  // the epoch's first, handed over below
  }
  // Never nullopt: a capture that fails starts the epoch unlogged.
  HandOver(*CaptureSnapshot(worker, std::move(progress), LogPrefix(worker, 0),
                            LogPrefix(worker, old_epoch + 1), /*starts_epoch=*/true));
}

std::optional<StreamStore::Job> StreamStore::CaptureSnapshot(std::string_view worker,
                                                             Progress progress,
                                                             std::string delete_begin,
                                                             std::string delete_end,
                                                             bool starts_epoch) const {
  Result<index::WorkerCapture> capture = index_->CaptureWorker(worker);
  if (!capture.ok()) {
    log::Line(log::Level::kError,
              starts_epoch ? "store.restart_not_recorded" : "store.snapshot_failed")
        .Field("worker", worker)
        .Field("error", capture.status().ToString());
    // Without its snapshot a new epoch's log would follow nothing Recover
    // reads; an old epoch's goes on from the last snapshot.
    if (!starts_epoch) return std::nullopt;
    return Job{std::string(worker), Unlogged{}};
  }
  return Job{std::string(worker),
             SnapshotJob{std::move(progress), *std::move(capture), std::move(delete_begin),
                         std::move(delete_end), starts_epoch}};
}

void StreamStore::HandOver(Job job) {
  {
    MutexLock lock(mu_);
    if (const auto* record = std::get_if<LogRecord>(&job.work)) {
      // A record is let through while the queue is under the bound, so
      // one larger than the bound cannot wait forever.
      while (queued_bytes_ >= options_.max_queued_bytes && !stopping_) changed_.wait(lock);
      queued_bytes_ += record->bytes();
    }
    queue_.push_back(std::move(job));
    ++handed_over_;
  }
  changed_.notify_all();
}

size_t StreamStore::pending_bytes() const {
  MutexLock lock(mu_);
  return queued_bytes_;
}

void StreamStore::Flush() {
  MutexLock lock(mu_);
  const uint64_t target = handed_over_;
  while (written_ < target) changed_.wait(lock);
}

void StreamStore::WriterLoop() {
  MutexLock lock(mu_);
  while (true) {
    while (queue_.empty() && !stopping_) changed_.wait(lock);
    if (queue_.empty()) return;  // stopping, and everything handed over is written
    std::deque<Job> jobs;
    jobs.swap(queue_);
    lock.unlock();

    uint64_t done = 0;            // jobs finished and not yet counted in written_
    size_t logged_bytes = 0;      // of the records in `logged` and those dropped
    std::vector<WriteOp> logged;  // consecutive log records: one write
    std::vector<std::string_view> logged_workers;
    // Counts what is done, so Flush and HandOver waiters see it.
    auto release = [&] {
      MutexLock relock(mu_);
      queued_bytes_ -= logged_bytes;
      written_ += done;
      logged_bytes = 0;
      done = 0;
      changed_.notify_all();
    };
    auto write_logged = [&] {
      if (logged.empty()) return;
      if (Status written = store_->Write(logged, /*sync=*/false); !written.ok()) {
        // The write was all or nothing: every worker in it has a hole now.
        for (std::string_view worker : logged_workers) {
          if (!unlogged_.emplace(worker).second) continue;
          log::Line(log::Level::kError, "store.batch_not_logged")
              .Field("worker", worker)
              .Field("detail", "applied in memory; not logged again until a snapshot is written")
              .Field("error", written.ToString());
        }
      }
      logged.clear();
      logged_workers.clear();
    };
    for (Job& job : jobs) {
      if (auto* record = std::get_if<LogRecord>(&job.work)) {
        ++done;  // counted once written, at the next release
        logged_bytes += record->bytes();
        if (unlogged_.contains(job.worker)) continue;
        logged.push_back(
            WriteOp{Column::kEventLog, std::move(record->key), std::move(record->value)});
        if (logged_workers.empty() || logged_workers.back() != job.worker) {
          logged_workers.push_back(job.worker);
        }
      } else if (auto* snapshot = std::get_if<SnapshotJob>(&job.work)) {
        write_logged();  // the records it covers go first
        release();       // and streams waiting on them need not wait for the snapshot
        const bool starts_epoch = snapshot->starts_epoch;
        Status written = WriteSnapshot(job.worker, std::move(*snapshot));
        {
          MutexLock relock(mu_);
          progress_[job.worker].snapshot_pending = false;
        }
        if (written.ok()) {
          if (unlogged_.erase(job.worker) > 0) {
            log::Line(log::Level::kInfo, "store.batches_logged_again").Field("worker", job.worker);
          }
        } else {
          log::Line(log::Level::kError,
                    starts_epoch ? "store.restart_not_recorded" : "store.snapshot_failed")
              .Field("worker", job.worker)
              .Field("error", written.ToString());
          // The stored snapshot is of the old epoch: the new one's log
          // would follow nothing Recover reads.
          if (starts_epoch) unlogged_.insert(job.worker);
        }
        ++done;
      } else if (std::holds_alternative<Unlogged>(job.work)) {
        ++done;
        unlogged_.insert(job.worker);
      }
    }
    write_logged();
    release();
    lock.lock();
  }
}

Status StreamStore::WriteSnapshot(const std::string& worker, SnapshotJob job) {
  const std::string digest = job.progress.Digest();
  // Into a table file, not the write-ahead log (docs/formats/store.md). It
  // is durable before the log it covers is deleted: a crash between the
  // two leaves batches the snapshot already holds, which Recover skips.
  KVGOV_RETURN_IF_ERROR(store_->PutFlushed(
      Column::kSnapshots, worker,
      EncodeSnapshotRecord(job.progress.epoch, job.progress.has_seq, job.progress.seq,
                           job.progress.ts, digest,
                           index::EncodeWorkerSnapshot(std::move(job.capture)))));
  if (job.delete_begin.empty()) return Status::Ok();
  // One range tombstone: nothing of the log is read to delete it.
  const WriteOp deletion{Column::kEventLog, std::move(job.delete_begin), std::nullopt,
                         std::move(job.delete_end)};
  return store_->Write(std::span(&deletion, 1), /*sync=*/true);
}

Status StreamStore::Recover(EngineStream& stream, RecoveryStats* stats) {
  const std::string& worker = stream.worker();
  Progress progress;
  RecoveryStats recovered;  // this worker's, added to `stats` at the end
  bool dropped = false;     // the snapshot no longer fits the worker
  // Read where RocksDB holds it: a copy of tens of MB would cost as much
  // again in page faults as the restore itself.
  KVGOV_ASSIGN_OR_RETURN(
      const bool found,
      store_->ReadPinned(Column::kSnapshots, worker, [&](std::string_view bytes) -> Status {
        if (bytes.size() < kSnapshotHeader) {
          return Status::Corruption("snapshot of worker '" + worker +
                                    "': " + std::to_string(bytes.size()) +
                                    " bytes, want at least " + std::to_string(kSnapshotHeader));
        }
        KVGOV_ASSIGN_OR_RETURN(progress.epoch, ParseKeyU64(bytes.substr(0, 8)));
        KVGOV_ASSIGN_OR_RETURN(uint64_t has_seq, ParseKeyU64(bytes.substr(8, 8)));
        KVGOV_ASSIGN_OR_RETURN(progress.seq, ParseKeyU64(bytes.substr(16, 8)));
        KVGOV_ASSIGN_OR_RETURN(progress.ts, DecodeDouble(bytes.substr(24, 8)));
        progress.has_seq = has_seq == 1;
        const std::string_view digest = bytes.substr(32, kDigestChars);
        if (digest.find('-') == std::string_view::npos) progress.last_digest = std::string(digest);
        Status restore = index_->RestoreWorker(worker, bytes.substr(kSnapshotHeader));
        if (restore.code() == StatusCode::kFailedPrecondition) {
          // The worker's model, block size or kvgov's hash seed changed
          // since the snapshot: its keys mean nothing now. Start the worker
          // empty and let the engine's replay (or staleness) take it from
          // there.
          log::Line(log::Level::kWarn, "store.snapshot_dropped")
              .Field("worker", worker)
              .Field("error", restore.message());
          dropped = true;
          return Status::Ok();
        }
        return restore.WithContext("snapshot of worker '" + worker + "'");
      }));
  if (dropped) {
    // A new epoch, so the old log is never re-applied on top.
    MutexLock lock(mu_);
    progress_[worker] = Progress::Epoch(progress.epoch + 1);
    return Status::Ok();
  }
  if (found) {
    recovered.snapshot_blocks = ResidentBlocks(worker);
    progress.snapshot_blocks = recovered.snapshot_blocks;
  }
  // From the first batch after the snapshot: the ones before it were
  // deleted when it was taken (a range tombstone, which a scan from the
  // epoch's start would only step over).
  const std::string first = progress.has_seq ? LogKey(worker, progress.epoch, progress.seq + 1)
                                             : LogPrefix(worker, progress.epoch);
  std::string last_batch;  // digested once, after the scan
  Status scanned = store_->Scan(Column::kEventLog, first, LogPrefix(worker, progress.epoch + 1),
                                [&](std::string_view key, std::string_view value) {
                                  Result<uint64_t> seq = ParseKeyU64(key.substr(key.size() - 8));
                                  Result<double> ts = DecodeDouble(value.substr(0, 8));
                                  if (!seq.ok() || !ts.ok() || value.size() < 8)
                                    return true;  // counted below as skipped
                                  if (progress.has_seq && *seq <= progress.seq)
                                    return true;  // already in the snapshot
                                  progress.blocks_since_snapshot +=
                                      stream.Reapply(*seq, value.substr(8));
                                  progress.has_seq = true;
                                  progress.seq = *seq;
                                  progress.ts = *ts;
                                  last_batch.assign(value.substr(8));
                                  ++recovered.logged_batches;
                                  return true;
                                });
  KVGOV_RETURN_IF_ERROR(scanned);
  if (recovered.logged_batches > 0) progress.last_digest = Sha256Hex(last_batch);
  if (progress.has_seq) stream.Resume(progress.seq, progress.ts, progress.last_digest);
  MutexLock lock(mu_);
  progress.since_snapshot = recovered.logged_batches;
  progress_[worker] = progress;
  stats->snapshot_blocks += recovered.snapshot_blocks;
  stats->logged_batches += recovered.logged_batches;
  return Status::Ok();
}

Status StreamStore::SnapshotAll() {
  Flush();  // the writer is idle from here: the streams are stopped
  std::map<std::string, Progress, std::less<>> all;
  {
    MutexLock lock(mu_);
    all = progress_;
  }
  for (auto& [worker, progress] : all) {
    if (progress.since_snapshot == 0 && !unlogged_.contains(worker)) continue;
    KVGOV_ASSIGN_OR_RETURN(index::WorkerCapture capture, index_->CaptureWorker(worker));
    LogRange held;
    if (progress.has_seq) held = LogThrough(worker, progress.epoch, progress.seq);
    KVGOV_RETURN_IF_ERROR(WriteSnapshot(
        worker, SnapshotJob{std::move(progress), std::move(capture), std::move(held.begin),
                            std::move(held.end), /*starts_epoch=*/false}));
    unlogged_.erase(worker);
  }
  return Status::Ok();
}

}  // namespace kvgov::ingest
