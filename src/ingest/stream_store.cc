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

// Deletes every log record of `worker` in [begin, end) into `ops`.
Status CollectLogDeletes(const store::Store& store, const std::string& begin,
                         const std::string& end, std::vector<WriteOp>* ops) {
  return store.Scan(Column::kEventLog, begin, end, [&](std::string_view key, std::string_view) {
    ops->push_back(WriteOp{Column::kEventLog, std::string(key), std::nullopt});
    return true;
  });
}

}  // namespace

std::string StreamStore::Progress::Digest() const {
  return undigested.has_value() ? Sha256Hex(*undigested) : last_digest;
}

void StreamStore::OnApplied(std::string_view worker, uint64_t seq, double ts,
                            std::string_view payload) {
  uint64_t epoch = 0;
  bool unlogged = false;
  std::optional<Progress> snapshot_at;  // when this batch is the one to snapshot after
  {
    std::lock_guard lock(mu_);
    auto it = progress_.find(worker);
    if (it == progress_.end()) it = progress_.emplace(std::string(worker), Progress{}).first;
    Progress& current = it->second;
    current.has_seq = true;
    current.seq = seq;
    current.ts = ts;
    if (!current.undigested.has_value()) current.undigested.emplace();
    current.undigested->assign(payload);  // reuses the buffer: no allocation once grown
    epoch = current.epoch;
    unlogged = current.unlogged;
    if (++current.since_snapshot >= snapshot_every_) {
      current.since_snapshot = 0;
      snapshot_at = current;
    }
  }
  if (!unlogged) {
    std::string value;
    value.reserve(8 + payload.size());
    value.append(EncodeDouble(ts)).append(payload);
    WriteOp op{Column::kEventLog, LogKey(worker, epoch, seq), std::move(value)};
    Status logged = store_->Write({&op, 1}, /*sync=*/false);
    if (!logged.ok()) {
      {
        std::lock_guard lock(mu_);
        progress_[std::string(worker)].unlogged = true;
      }
      log::Line(log::Level::kError, "store.batch_not_logged")
          .Field("worker", worker)
          .Field("seq", seq)
          .Field("detail", "applied in memory; not logged again until a snapshot is written")
          .Field("error", logged.ToString());
      return;
    }
  }
  if (snapshot_at.has_value()) {
    Status snapped = Snapshot(worker, *snapshot_at);
    if (!snapped.ok()) {
      log::Line(log::Level::kError, "store.snapshot_failed")
          .Field("worker", worker)
          .Field("error", snapped.ToString());
    } else if (unlogged) {
      std::lock_guard lock(mu_);
      progress_[std::string(worker)].unlogged = false;
      log::Line(log::Level::kInfo, "store.batches_logged_again").Field("worker", worker);
    }
  }
}

void StreamStore::OnRestart(std::string_view worker) {
  Progress progress;
  uint64_t old_epoch = 0;
  {
    std::lock_guard lock(mu_);
    Progress& current = progress_[std::string(worker)];
    old_epoch = current.epoch;
    current = Progress::Epoch(old_epoch + 1);
    progress = current;
  }
  std::vector<WriteOp> ops;
  Status collected = CollectLogDeletes(*store_, LogPrefix(worker, old_epoch),
                                       LogPrefix(worker, old_epoch + 1), &ops);
  Status snapped = collected.ok() ? Snapshot(worker, progress) : collected;
  if (snapped.ok() && !ops.empty()) snapped = store_->Write(ops, /*sync=*/true);
  if (!snapped.ok()) {
    {
      std::lock_guard lock(mu_);
      progress_[std::string(worker)].unlogged = true;  // the new epoch has no snapshot yet
    }
    log::Line(log::Level::kError, "store.restart_not_recorded")
        .Field("worker", worker)
        .Field("error", snapped.ToString());
  }
}

Status StreamStore::Snapshot(std::string_view worker, const Progress& progress) {
  KVGOV_ASSIGN_OR_RETURN(std::string snapshot, index_->SnapshotWorker(worker));
  std::vector<WriteOp> ops;
  ops.push_back(WriteOp{Column::kSnapshots, std::string(worker),
                        EncodeSnapshotRecord(progress.epoch, progress.has_seq, progress.seq,
                                             progress.ts, progress.Digest(), snapshot)});
  if (progress.has_seq) {
    KVGOV_RETURN_IF_ERROR(CollectLogDeletes(*store_, LogPrefix(worker, progress.epoch),
                                            LogKey(worker, progress.epoch, progress.seq + 1),
                                            &ops));
  }
  return store_->Write(ops, /*sync=*/true);
}

Status StreamStore::Recover(EngineStream& stream, RecoveryStats* stats) {
  const std::string& worker = stream.worker();
  Progress progress;
  RecoveryStats recovered;  // this worker's, added to `stats` at the end
  KVGOV_ASSIGN_OR_RETURN(std::optional<std::string> record,
                         store_->Get(Column::kSnapshots, worker));
  if (record.has_value()) {
    if (record->size() < kSnapshotHeader) {
      return Status::Corruption("snapshot of worker '" + worker + "': " +
                                std::to_string(record->size()) + " bytes, want at least " +
                                std::to_string(kSnapshotHeader));
    }
    std::string_view bytes(*record);
    KVGOV_ASSIGN_OR_RETURN(progress.epoch, ParseKeyU64(bytes.substr(0, 8)));
    KVGOV_ASSIGN_OR_RETURN(uint64_t has_seq, ParseKeyU64(bytes.substr(8, 8)));
    KVGOV_ASSIGN_OR_RETURN(progress.seq, ParseKeyU64(bytes.substr(16, 8)));
    KVGOV_ASSIGN_OR_RETURN(progress.ts, DecodeDouble(bytes.substr(24, 8)));
    progress.has_seq = has_seq == 1;
    const std::string_view digest = bytes.substr(32, kDigestChars);
    if (digest.find('-') == std::string_view::npos) progress.last_digest = std::string(digest);
    Status restore = index_->RestoreWorker(worker, bytes.substr(kSnapshotHeader));
    if (restore.code() == StatusCode::kFailedPrecondition) {
      // The worker's model, block size or kvgov's hash seed changed since
      // the snapshot: its keys mean nothing now. Start the worker empty and
      // let the engine's replay (or staleness) take it from there.
      // A new epoch, so the old log is never re-applied on top.
      log::Line(log::Level::kWarn, "store.snapshot_dropped")
          .Field("worker", worker)
          .Field("error", restore.message());
      std::lock_guard lock(mu_);
      progress_[worker] = Progress::Epoch(progress.epoch + 1);
      return Status::Ok();
    }
    KVGOV_RETURN_IF_ERROR(restore.WithContext("snapshot of worker '" + worker + "'"));
    if (std::optional<index::WorkerResidency> restored = index_->Worker(worker)) {
      for (uint64_t blocks : restored->blocks) recovered.snapshot_blocks += blocks;
    }
  }
  // From the first batch after the snapshot: the ones before it were
  // deleted when it was taken, and a scan from the epoch's start would walk
  // their tombstones (and read the blocks still holding them) until a
  // compaction drops them: seconds at a million blocks a worker.
  const std::string first = progress.has_seq ? LogKey(worker, progress.epoch, progress.seq + 1)
                                             : LogPrefix(worker, progress.epoch);
  std::string last_batch;  // digested once, after the scan
  Status scanned = store_->Scan(
      Column::kEventLog, first, LogPrefix(worker, progress.epoch + 1),
      [&](std::string_view key, std::string_view value) {
        Result<uint64_t> seq = ParseKeyU64(key.substr(key.size() - 8));
        Result<double> ts = DecodeDouble(value.substr(0, 8));
        if (!seq.ok() || !ts.ok() || value.size() < 8) return true;  // counted below as skipped
        if (progress.has_seq && *seq <= progress.seq) return true;   // already in the snapshot
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
  std::lock_guard lock(mu_);
  progress.since_snapshot = recovered.logged_batches;
  progress_[worker] = progress;
  stats->snapshot_blocks += recovered.snapshot_blocks;
  stats->logged_batches += recovered.logged_batches;
  return Status::Ok();
}

Status StreamStore::SnapshotAll() {
  std::map<std::string, Progress, std::less<>> all;
  {
    std::lock_guard lock(mu_);
    all = progress_;
  }
  for (const auto& [worker, progress] : all) {
    if (progress.since_snapshot == 0 && !progress.unlogged) continue;
    KVGOV_RETURN_IF_ERROR(Snapshot(worker, progress));
  }
  return Status::Ok();
}

}  // namespace kvgov::ingest
