#include "kvgov/store/store.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/status.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <stdlib.h>

#include <cstdarg>
#include <cstdio>

#include <algorithm>
#include <array>
#include <atomic>
#include <exception>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "kvgov/core/mutex.h"
#include "kvgov/log/log.h"

namespace kvgov::store {
namespace {

// On-disk column family names, in Column order (docs/formats/store.md).
// RocksDB also keeps its "default" family, which kvgov leaves empty.
constexpr std::array<std::string_view, 6> kColumnNames = {
    "meta", "journal", "governance", "streams", "event_log", "snapshots",
};
constexpr std::string_view kFormatVersionKey = "format_version";

size_t ColumnIndex(Column column) { return static_cast<size_t>(column); }

std::string ColumnName(Column column) {
  size_t index = ColumnIndex(column);
  if (index < kColumnNames.size()) return std::string(kColumnNames[index]);
  return "column " + std::to_string(index);
}

rocksdb::Slice ToSlice(std::string_view bytes) { return {bytes.data(), bytes.size()}; }
std::string_view ToView(const rocksdb::Slice& slice) { return {slice.data(), slice.size()}; }

std::string EncodeU32(uint32_t value) {
  std::string out(4, '\0');
  for (int i = 3; i >= 0; --i) {
    out[static_cast<size_t>(i)] = static_cast<char>(value & 0xff);
    value >>= 8;
  }
  return out;
}

// RocksDB's categories onto kvgov's. Corruption keeps RocksDB's message,
// which names the damaged file and offset; a lock held by another process
// (or by this one) is an IOError.
Status FromRocks(const rocksdb::Status& s, std::string_view context) {
  if (s.ok()) return Status::Ok();
  std::string message = std::string(context) + ": " + s.ToString();
  if (s.IsCorruption()) return Status::Corruption(std::move(message));
  if (s.IsIOError()) return Status::IOError(std::move(message));
  return Status::Internal(std::move(message));
}

// RocksDB is sized for a small box: the reference host has 2 cores and
// 24 GiB, shared with the serving engines' host-side work, and kvgov's own
// write rate is governance decisions and engine batches, not bulk loading.
// So two background jobs (one flush, one compaction) instead of RocksDB's
// per-core defaults, small memtables under one shared budget, and a small
// block cache: kvgov keeps its working state in memory and reads the store
// mainly at start-up.
rocksdb::ColumnFamilyOptions ColumnOptions(const std::shared_ptr<rocksdb::Cache>& cache,
                                           bool hold_compactions = false) {
  rocksdb::ColumnFamilyOptions options;
  options.write_buffer_size = 8 << 20;  // per memtable
  options.max_write_buffer_number = 2;
  // Held, RocksDB also stops counting level-0 files towards write stalls,
  // so the writes of a recovery are never stalled waiting for it.
  options.disable_auto_compactions = hold_compactions;
  options.target_file_size_base = 16 << 20;
  options.max_bytes_for_level_base = 64 << 20;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = cache;
  table.checksum = rocksdb::kXXH3;  // every block carries a checksum
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

// RocksDB's own log, as kvgov's log lines (event store.rocksdb), warnings
// and errors only, instead of a LOG file in the store's directory: that
// file is on the disk that fills up, and Debian's RocksDB (built with
// assertions) aborts the process on the write after one its info log
// failed. The last line is kept for Open's error, which RocksDB's status
// alone does not locate (a damaged WAL record's file and offset).
//
// Thread-safe: RocksDB logs from any thread.
class RocksLog final : public rocksdb::Logger {
 public:
  explicit RocksLog(std::string dir)
      : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL), dir_(std::move(dir)) {}

  using rocksdb::Logger::Logv;
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel() || level == rocksdb::InfoLogLevel::HEADER_LEVEL) return;
    std::array<char, 1024> line{};  // RocksDB's lines are short; a longer one is cut
    std::vsnprintf(line.data(), line.size(), format, ap);
    log::Line(level >= rocksdb::InfoLogLevel::ERROR_LEVEL ? log::Level::kError : log::Level::kWarn,
              "store.rocksdb")
        .Field("store", dir_)
        .Field("detail", line.data());
    MutexLock lock(mu_);
    last_ = line.data();
  }

  std::string last() const {
    MutexLock lock(mu_);
    return last_;
  }

 private:
  const std::string dir_;
  mutable Mutex mu_;
  std::string last_ KVGOV_GUARDED_BY(mu_);
};

rocksdb::DBOptions DatabaseOptions(std::shared_ptr<rocksdb::Logger> info_log) {
  rocksdb::DBOptions options;
  options.info_log = std::move(info_log);
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  options.paranoid_checks = true;  // refuse to open on any inconsistency
  options.max_background_jobs = 2;
  options.db_write_buffer_size = 32 << 20;  // all memtables together
  // The meta and snapshot families are written rarely; without a cap their
  // unflushed memtables would pin every old WAL file. Past 64 MiB of WAL,
  // RocksDB flushes the families holding the oldest one.
  options.max_total_wal_size = 64 << 20;
  // Not track_and_verify_wals_in_manifest: in RocksDB before 7.10 a
  // SyncWAL racing a flush can record a deleted WAL and then refuse every
  // later open with a false "Missing WAL" (facebook/rocksdb#10892); Debian
  // ships 7.8.3. docs/formats/store.md says what that leaves undetected.
  //
  // A WAL record cut short at the end of a log is a write that a crash
  // interrupted, never acknowledged: it is dropped. Any other damaged record
  // fails the open with Corruption. RocksDB's default (point-in-time) would
  // instead stop replaying at the damage and open without every later
  // record, acknowledged or not, and say nothing.
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  return options;
}

rocksdb::ReadOptions Reading() {
  rocksdb::ReadOptions options;
  options.verify_checksums = true;
  return options;
}

// A directory that holds RocksDB files but no CURRENT: with
// create_if_missing RocksDB would start a new, empty store over the old
// files. Refuse instead.
Status CheckNotOrphaned(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec) || std::filesystem::exists(dir + "/CURRENT", ec)) {
    return Status::Ok();
  }
  std::string store_file;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.starts_with("MANIFEST-") || name.ends_with(".sst") || name.ends_with(".log") ||
        name == "IDENTITY") {
      store_file = std::move(name);
      break;
    }
  }
  if (store_file.empty()) return Status::Ok();
  return Status::Corruption("store " + dir + ": CURRENT is missing but the directory holds " +
                            store_file + "; refusing to create a new store over it");
}

class RocksStore final : public Store {
 public:
  RocksStore(std::string dir, std::shared_ptr<rocksdb::Cache> cache, StoreOptions options)
      : dir_(std::move(dir)),
        cache_(std::move(cache)),
        on_fatal_(std::move(options.on_fatal)),
        compactions_held_(options.hold_compactions) {}

  ~RocksStore() override {
    if (db_ == nullptr) return;
    // Unsynced writes reach the disk on a clean close (best effort: there
    // is no one left to tell about a failure). Not after a failed write:
    // the WAL's writer holds the error, and Debian's RocksDB asserts on a
    // write to it.
    if (Writable()) (void)db_->FlushWAL(/*sync=*/true);
    for (rocksdb::ColumnFamilyHandle* handle : handles_) {
      (void)db_->DestroyColumnFamilyHandle(handle);
    }
    (void)db_->Close();
  }

  RocksStore(const RocksStore&) = delete;
  RocksStore& operator=(const RocksStore&) = delete;

  // Opens RocksDB read-write with every kvgov column. An existing store is
  // first checked read-only (see CheckExisting).
  Status OpenDb() {
    std::error_code ec;
    if (std::filesystem::exists(dir_ + "/CURRENT", ec)) {
      KVGOV_RETURN_IF_ERROR(CheckExisting());
    }
    rocksdb::ColumnFamilyOptions cf_options = ColumnOptions(cache_, compactions_held_);
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, cf_options);
    for (std::string_view name : kColumnNames) {
      descriptors.emplace_back(std::string(name), cf_options);
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    rocksdb::Status opened =
        rocksdb::DB::Open(DatabaseOptions(rocks_log_), dir_, descriptors, &handles, &db);
    if (!opened.ok()) return OpenError(opened);
    db_.reset(db);
    handles_ = std::move(handles);
    return Status::Ok();
  }

  // Writes the format version into a new store; checks it in an old one.
  Status CheckFormatVersion() {
    KVGOV_ASSIGN_OR_RETURN(std::optional<std::string> version,
                           Get(Column::kMeta, kFormatVersionKey));
    if (version.has_value()) return CheckVersionValue(*version);
    // A new store, or one that crashed before its version was written:
    // only acceptable while nothing else has been written either.
    for (size_t i = 0; i < kColumnNames.size(); ++i) {
      KVGOV_ASSIGN_OR_RETURN(std::optional<std::string> last, LastKey(static_cast<Column>(i)));
      if (last.has_value()) {
        return Status::Corruption("store " + dir_ + ": holds records in '" +
                                  std::string(kColumnNames[i]) + "' but no format version");
      }
    }
    WriteOp op{Column::kMeta, std::string(kFormatVersionKey), EncodeU32(kStoreFormatVersion)};
    return Write(std::span<const WriteOp>(&op, 1), /*sync=*/true);
  }

  Status Write(std::span<const WriteOp> ops, bool sync) override {
    try {
      rocksdb::WriteBatch batch;
      for (const WriteOp& op : ops) {
        rocksdb::ColumnFamilyHandle* handle = Handle(op.column);
        rocksdb::Status s;
        if (op.value.has_value()) {
          s = batch.Put(handle, ToSlice(op.key), ToSlice(*op.value));
        } else if (!op.range_end.empty()) {
          s = batch.DeleteRange(handle, ToSlice(op.key), ToSlice(op.range_end));
        } else {
          s = batch.Delete(handle, ToSlice(op.key));
        }
        if (!s.ok()) return FromRocks(s, "store " + dir_ + ": batch");
      }
      KVGOV_RETURN_IF_ERROR(ReadyToWrite());
      rocksdb::WriteOptions options;
      options.sync = sync;
      return AfterWrite(db_->Write(options, &batch), "write");
    } catch (const std::exception& e) {
      return Status::Internal("store " + dir_ + ": write: " + e.what());
    }
  }

  Status PutFlushed(Column column, std::string_view key, std::string_view value) override {
    try {
      KVGOV_RETURN_IF_ERROR(ReadyToWrite());
      rocksdb::WriteOptions unlogged;
      unlogged.disableWAL = true;
      KVGOV_RETURN_IF_ERROR(
          AfterWrite(db_->Put(unlogged, Handle(column), ToSlice(key), ToSlice(value)), "put"));
      rocksdb::FlushOptions flush;
      flush.wait = true;
      // Otherwise RocksDB waits for level-0 files to be compacted first,
      // which never happens while compactions are held.
      flush.allow_write_stall = true;
      return AfterWrite(db_->Flush(flush, Handle(column)), "flush");
    } catch (const std::exception& e) {
      return Status::Internal(Where("put", column) + ": " + e.what());
    }
  }

  Result<std::optional<std::string>> Get(Column column, std::string_view key) const override {
    try {
      std::string value;
      rocksdb::Status s = db_->Get(Reading(), Handle(column), ToSlice(key), &value);
      if (s.IsNotFound()) return std::optional<std::string>();
      if (!s.ok()) return FromRocks(s, Where("get", column));
      return std::optional<std::string>(std::move(value));
    } catch (const std::exception& e) {
      return Status::Internal(Where("get", column) + ": " + e.what());
    }
  }

  Result<bool> ReadPinned(
      Column column, std::string_view key,
      const std::function<Status(std::string_view value)>& read) const override {
    rocksdb::PinnableSlice value;
    try {
      rocksdb::Status s = db_->Get(Reading(), Handle(column), ToSlice(key), &value);
      if (s.IsNotFound()) return false;
      if (!s.ok()) return FromRocks(s, Where("get", column));
    } catch (const std::exception& e) {
      return Status::Internal(Where("get", column) + ": " + e.what());
    }
    KVGOV_RETURN_IF_ERROR(read(ToView(value)));
    return true;
  }

  Status Scan(Column column, std::string_view begin, std::string_view end,
              const std::function<bool(std::string_view key, std::string_view value)>& visit)
      const override {
    try {
      rocksdb::ReadOptions options = Reading();
      rocksdb::Slice upper = ToSlice(end);  // must outlive the iterator
      if (!end.empty()) options.iterate_upper_bound = &upper;
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options, Handle(column)));
      for (it->Seek(ToSlice(begin)); it->Valid(); it->Next()) {
        if (!visit(ToView(it->key()), ToView(it->value()))) break;
      }
      return FromRocks(it->status(), Where("scan", column));
    } catch (const std::exception& e) {
      return Status::Internal(Where("scan", column) + ": " + e.what());
    }
  }

  Result<std::optional<std::string>> LastKey(Column column) const override {
    try {
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(Reading(), Handle(column)));
      it->SeekToLast();
      if (it->Valid()) return std::optional<std::string>(it->key().ToString());
      KVGOV_RETURN_IF_ERROR(FromRocks(it->status(), Where("last key", column)));
      return std::optional<std::string>();
    } catch (const std::exception& e) {
      return Status::Internal(Where("last key", column) + ": " + e.what());
    }
  }

  Status SyncWal() override {
    try {
      KVGOV_RETURN_IF_ERROR(ReadyToWrite());
      return AfterWrite(db_->SyncWAL(), "sync WAL");
    } catch (const std::exception& e) {
      return Status::Internal("store " + dir_ + ": sync WAL: " + e.what());
    }
  }

  Status ResumeCompactions() override {
    if (!compactions_held_.exchange(false)) return Status::Ok();
    try {
      for (rocksdb::ColumnFamilyHandle* handle : handles_) {
        KVGOV_RETURN_IF_ERROR(
            FromRocks(db_->SetOptions(handle, {{"disable_auto_compactions", "false"}}),
                      "store " + dir_ + ": resume compactions of '" + handle->GetName() + "'"));
      }
      return Status::Ok();
    } catch (const std::exception& e) {
      return Status::Internal("store " + dir_ + ": resume compactions: " + e.what());
    }
  }

  Status FlushForTest() override {
    try {
      rocksdb::FlushOptions options;
      options.wait = true;
      std::vector<rocksdb::ColumnFamilyHandle*> handles(handles_.begin() + 1, handles_.end());
      return FromRocks(db_->Flush(options, handles), "store " + dir_ + ": flush");
    } catch (const std::exception& e) {
      return Status::Internal("store " + dir_ + ": flush: " + e.what());
    }
  }

  const std::string& dir() const override { return dir_; }

 private:
  // Neither failed nor waiting for space.
  bool Writable() {
    MutexLock lock(health_mu_);
    return fatal_.ok() && !out_of_space_.has_value();
  }

  // Refuses a write while the store is failed, or while the disk is full
  // and RocksDB cannot resume yet (asked at most every kResumeInterval:
  // a resume flushes memtables, which a full disk refuses too).
  Status ReadyToWrite() {
    rocksdb::Status resumed;
    {
      MutexLock lock(health_mu_);
      if (!fatal_.ok()) return fatal_;
      if (!out_of_space_.has_value()) return Status::Ok();
      const auto now = std::chrono::steady_clock::now();
      if (now < next_resume_) return *out_of_space_;
      next_resume_ = now + kResumeInterval;
      resumed = db_->Resume();
      if (resumed.ok()) {
        out_of_space_.reset();
        return Status::Ok();
      }
      // Busy: RocksDB's own recovery is under way (it waits for a
      // memtable's worth of free space); the next write asks again.
      if (resumed.IsBusy() || resumed.IsNoSpace()) return *out_of_space_;
    }
    return AfterWrite(resumed, "resume after the disk filled");
  }

  // Sorts a failed write: a full disk is waited out, any other I/O error is
  // fatal (see Store::Open), and on_fatal_ hears of it once, unlocked.
  Status AfterWrite(const rocksdb::Status& s, std::string_view what) {
    if (s.ok()) return Status::Ok();
    Status failed;
    bool became_fatal = false;
    {
      MutexLock lock(health_mu_);
      if (s.IsNoSpace()) {
        out_of_space_ = Status::Unavailable(
            "store " + dir_ + ": no space left on device (" + std::string(what) + ": " +
            s.ToString() + "); not acknowledged; writes are taken again once space is freed");
        next_resume_ = std::chrono::steady_clock::now() + kResumeInterval;
        return *out_of_space_;
      }
      if (!s.IsIOError()) return FromRocks(s, "store " + dir_ + ": " + std::string(what));
      became_fatal = fatal_.ok();
      if (became_fatal) {
        fatal_ = Status::IOError(
            "store " + dir_ + ": " + std::string(what) + ": " + s.ToString() +
            "; not acknowledged. After a failed write or fsync the disk's state is unknown, so "
            "the store takes no more writes: restart kvgov to recover from its write-ahead log");
      }
      failed = fatal_;
    }
    if (became_fatal && on_fatal_) on_fatal_(failed);
    return failed;
  }

  // handles_[0] is RocksDB's default family; the kvgov columns follow.
  // Throws std::out_of_range for a value outside the enum (caught by the
  // caller and reported as Internal).
  rocksdb::ColumnFamilyHandle* Handle(Column column) const {
    return handles_.at(ColumnIndex(column) + 1);
  }

  std::string Where(std::string_view what, Column column) const {
    return "store " + dir_ + ": " + std::string(what) + " " + ColumnName(column);
  }

  Status OpenError(const rocksdb::Status& s) const {
    if (s.IsCorruption()) {
      // A damaged WAL record's status does not name the log; RocksDB's
      // last log line does.
      const std::string detail = rocks_log_->last();
      return Status::Corruption("store " + dir_ + ": open: " + s.ToString() +
                                (detail.empty() ? "" : " (RocksDB: " + detail + ")"));
    }
    return FromRocks(s, "store " + dir_ + ": open");
  }

  Status CheckVersionValue(std::string_view version) const {
    if (version.size() != 4) {
      return Status::Corruption("store " + dir_ + ": format version record is " +
                                std::to_string(version.size()) + " bytes, not 4");
    }
    uint32_t found = 0;
    for (char c : version) found = (found << 8) | static_cast<uint8_t>(c);
    if (found != kStoreFormatVersion) {
      return Status::Corruption("store " + dir_ + ": format version " + std::to_string(found) +
                                ", this kvgov reads " + std::to_string(kStoreFormatVersion));
    }
    return Status::Ok();
  }

  // Checks an existing store before RocksDB opens it read-write, because a
  // read-write open deletes every table and WAL file its MANIFEST does not
  // list. RocksDB reads a MANIFEST cut short as if the writer had crashed
  // mid-record and recovers an older state silently; when the cut takes the
  // format version with it, the read-write open would reset the store and
  // delete its data. Read-only, nothing is deleted, so kvgov refuses here:
  //  - a column family kvgov does not know (a newer format);
  //  - a format version other than kStoreFormatVersion;
  //  - no format version while table or non-empty WAL files exist.
  // RocksDB's LOCK is held meanwhile (a read-only open takes none), so a
  // second kvgov fails here on the lock as it would in DB::Open.
  Status CheckExisting() {
    rocksdb::Env* env = rocksdb::Env::Default();
    rocksdb::FileLock* lock = nullptr;
    rocksdb::Status locked = env->LockFile(dir_ + "/LOCK", &lock);
    if (!locked.ok()) {
      return Status::IOError("store " + dir_ +
                             " is in use: another process (a kvgov daemon on this data dir?) "
                             "holds its lock; stop it, or point at a copy of the data dir (" +
                             locked.ToString() + ")");
    }
    Status checked = CheckExistingLocked();
    rocksdb::Status unlocked = env->UnlockFile(lock);
    KVGOV_RETURN_IF_ERROR(checked);
    return FromRocks(unlocked, "store " + dir_ + ": unlock");
  }

  Status CheckExistingLocked() {
    rocksdb::DBOptions db_options = DatabaseOptions(rocks_log_);
    std::vector<std::string> existing;
    rocksdb::Status listed = rocksdb::DB::ListColumnFamilies(db_options, dir_, &existing);
    if (!listed.ok()) return FromRocks(listed, "store " + dir_ + ": open");
    for (const std::string& name : existing) {
      bool known = name == rocksdb::kDefaultColumnFamilyName ||
                   std::find(kColumnNames.begin(), kColumnNames.end(), name) != kColumnNames.end();
      if (!known) {
        return Status::Corruption("store " + dir_ + ": unknown column family '" + name +
                                  "', this kvgov reads format " +
                                  std::to_string(kStoreFormatVersion));
      }
    }

    const bool has_meta =
        std::find(existing.begin(), existing.end(), kColumnNames[0]) != existing.end();
    // First without the write-ahead log, which only a store whose version
    // was never flushed needs: replaying it (tens of MB after a crash under
    // ingest) would double what the read-write open replays next.
    KVGOV_ASSIGN_OR_RETURN(std::optional<std::string> version,
                           ReadFormatVersion(db_options, has_meta, /*replay_wal=*/false));
    if (!version.has_value()) {
      KVGOV_ASSIGN_OR_RETURN(version, ReadFormatVersion(db_options, has_meta, /*replay_wal=*/true));
    }
    if (version.has_value()) return CheckVersionValue(*version);

    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
      std::string name = entry.path().filename().string();
      bool data =
          name.ends_with(".sst") || (name.ends_with(".log") && entry.file_size(ec) > 0 && !ec);
      if (data) {
        return Status::Corruption("store " + dir_ + ": no format version record, but " + name +
                                  " holds data: the MANIFEST is damaged or truncated; not "
                                  "opening it (RocksDB would delete the files it does not list)");
      }
    }
    return Status::Ok();
  }

  // Opens the store read-only (only the default and meta columns) and reads
  // the format version: nullopt when the store holds none. Without
  // `replay_wal` the write-ahead log is left out: RocksDB is pointed at an
  // empty directory for it.
  Result<std::optional<std::string>> ReadFormatVersion(rocksdb::DBOptions db_options, bool has_meta,
                                                       bool replay_wal) {
    std::string empty_wal_dir;
    if (!replay_wal) {
      std::string pattern =
          (std::filesystem::temp_directory_path() / "kvgov-store-check-XXXXXX").string();
      if (::mkdtemp(pattern.data()) == nullptr) {
        return Status::IOError("store " + dir_ + ": cannot make a scratch directory for its check");
      }
      empty_wal_dir = pattern;
      db_options.wal_dir = empty_wal_dir;
    }
    rocksdb::ColumnFamilyOptions cf_options = ColumnOptions(cache_);
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, cf_options);
    if (has_meta) descriptors.emplace_back(std::string(kColumnNames[0]), cf_options);
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    rocksdb::Status opened =
        rocksdb::DB::OpenForReadOnly(db_options, dir_, descriptors, &handles, &raw);
    if (!empty_wal_dir.empty()) {
      std::error_code ignored;
      std::filesystem::remove(empty_wal_dir, ignored);
    }
    if (!opened.ok()) return OpenError(opened);
    std::unique_ptr<rocksdb::DB> db(raw);
    std::string version;
    rocksdb::Status read = rocksdb::Status::NotFound();
    if (has_meta) read = db->Get(Reading(), handles[1], ToSlice(kFormatVersionKey), &version);
    for (rocksdb::ColumnFamilyHandle* handle : handles) {
      (void)db->DestroyColumnFamilyHandle(handle);
    }
    if (read.IsNotFound()) return std::optional<std::string>();
    if (!read.ok()) return FromRocks(read, "store " + dir_ + ": get format version");
    return std::optional<std::string>(std::move(version));
  }

  const std::string dir_;
  std::shared_ptr<rocksdb::Cache> cache_;
  const std::function<void(const Status&)> on_fatal_;
  std::atomic<bool> compactions_held_;  // until ResumeCompactions
  const std::shared_ptr<RocksLog> rocks_log_ = std::make_shared<RocksLog>(dir_);
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;

  Mutex health_mu_;
  Status fatal_ KVGOV_GUARDED_BY(health_mu_);                        // ok until a fatal error
  std::optional<Status> out_of_space_ KVGOV_GUARDED_BY(health_mu_);  // while the disk is full
  std::chrono::steady_clock::time_point next_resume_ KVGOV_GUARDED_BY(health_mu_);
};

}  // namespace

std::string KeyU64(uint64_t value) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i) {
    out[static_cast<size_t>(i)] = static_cast<char>(value & 0xff);
    value >>= 8;
  }
  return out;
}

Result<uint64_t> ParseKeyU64(std::string_view key) {
  if (key.size() != 8) {
    return Status::InvalidArgument("u64 key is " + std::to_string(key.size()) + " bytes, not 8");
  }
  uint64_t value = 0;
  for (char c : key) value = (value << 8) | static_cast<uint8_t>(c);
  return value;
}

Result<std::unique_ptr<Store>> Store::Open(const std::string& dir, StoreOptions options) {
  try {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::IOError("store " + dir + ": create directory: " + ec.message());
    KVGOV_RETURN_IF_ERROR(CheckNotOrphaned(dir));
    // 16 MiB of uncompressed blocks, shared by every column.
    auto store =
        std::make_unique<RocksStore>(dir, rocksdb::NewLRUCache(16 << 20), std::move(options));
    KVGOV_RETURN_IF_ERROR(store->OpenDb());
    KVGOV_RETURN_IF_ERROR(store->CheckFormatVersion());
    return std::unique_ptr<Store>(std::move(store));
  } catch (const std::exception& e) {
    return Status::Internal("store " + dir + ": open: " + e.what());
  }
}

}  // namespace kvgov::store
