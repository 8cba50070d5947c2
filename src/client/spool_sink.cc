#include "kvgov/client/spool_sink.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <thread>

#include "kvgov/core/mutex.h"

namespace kvgov::client {
namespace {

using Clock = std::chrono::steady_clock;

// Names must be unique in the spool directory; two sinks of one process
// may open files in the same millisecond, so the sequence is process-wide.
std::atomic<uint64_t> g_next_file_seq{0};

std::string ErrnoText(int error) { return std::strerror(error); }

Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::IOError("open " + dir + ": " + ErrnoText(errno));
  const int synced = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (synced != 0) return Status::IOError("fsync " + dir + ": " + ErrnoText(error));
  return Status::Ok();
}

}  // namespace

struct SpoolSink::Impl {
  explicit Impl(SpoolSinkOptions o) : options(std::move(o)) {}

  // The file being written, opened on demand.
  Status OpenLocked() KVGOV_REQUIRES(mu);
  // Syncs (per policy) and renames the open file into view; a file whose
  // sync or rename failed stays open and is tried again next time.
  Status PublishLocked() KVGOV_REQUIRES(mu);
  // Writes one line; cuts the file back to its last whole line on failure.
  // A file must be open.
  Status AppendLocked(std::string& line) KVGOV_REQUIRES(mu);
  void RunTimer();

  const SpoolSinkOptions options;
  mutable Mutex mu;
  std::condition_variable_any wake;  // the timer: a file opened, or closing
  int fd KVGOV_GUARDED_BY(mu) = -1;  // the open .tmp, or -1
  std::string tmp_path KVGOV_GUARDED_BY(mu);
  std::string final_path KVGOV_GUARDED_BY(mu);
  size_t file_bytes KVGOV_GUARDED_BY(mu) = 0;  // whole lines written to the open file
  Clock::time_point opened_at KVGOV_GUARDED_BY(mu);
  bool closed KVGOV_GUARDED_BY(mu) = false;
  SinkStats counters KVGOV_GUARDED_BY(mu);
  std::thread timer;  // runs only with a max_file_age
};

Status SpoolSink::Impl::OpenLocked() {
  const auto unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  char name[96];
  std::snprintf(name, sizeof(name), "-%013lld-%d-%06llu.ndjson", static_cast<long long>(unix_ms),
                static_cast<int>(::getpid()),
                static_cast<unsigned long long>(g_next_file_seq.fetch_add(1)));
  final_path = options.dir + "/" + options.prefix + name;
  tmp_path = final_path + ".tmp";
  fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0) return Status::IOError("open " + tmp_path + ": " + ErrnoText(errno));
  file_bytes = 0;
  opened_at = Clock::now();
  wake.notify_one();
  return Status::Ok();
}

Status SpoolSink::Impl::AppendLocked(std::string& line) {
  size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = ::write(fd, line.data() + written, line.size() - written);
    if (n >= 0) {
      written += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    const int error = errno;
    // A torn line would run into the next one and take it down too.
    if (written > 0 && ::ftruncate(fd, static_cast<off_t>(file_bytes)) != 0) {
      // Cannot cut it: publish what is there (the reader rejects the torn
      // tail by its line number) and start a clean file next time.
      file_bytes += written;
      (void)PublishLocked();
    }
    return Status::IOError("write " + tmp_path + ": " + ErrnoText(error));
  }
  file_bytes += written;
  if (options.fsync == FsyncPolicy::kEveryEvent && ::fdatasync(fd) != 0) {
    return Status::IOError("fdatasync " + tmp_path + ": " + ErrnoText(errno));
  }
  return Status::Ok();
}

Status SpoolSink::Impl::PublishLocked() {
  if (fd < 0) return Status::Ok();
  if (file_bytes == 0) {
    // Nothing whole was written: no empty file for the reader.
    ::close(fd);
    fd = -1;
    ::unlink(tmp_path.c_str());
    return Status::Ok();
  }
  const bool sync = options.fsync != FsyncPolicy::kNever;
  if (sync && ::fdatasync(fd) != 0) {
    return Status::IOError("fdatasync " + tmp_path + ": " + ErrnoText(errno));
  }
  if (::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    return Status::IOError("rename " + tmp_path + ": " + ErrnoText(errno));
  }
  ::close(fd);
  fd = -1;
  ++counters.batches;
  // The rename is durable only once the directory is.
  if (sync) KVGOV_RETURN_IF_ERROR(SyncDirectory(options.dir));
  return Status::Ok();
}

void SpoolSink::Impl::RunTimer() {
  MutexLock lock(mu);
  while (!closed) {
    if (fd < 0) {
      wake.wait(lock);
      continue;
    }
    const Clock::time_point due = opened_at + options.max_file_age;
    if (Clock::now() < due) {
      wake.wait_until(lock, due);
      continue;
    }
    if (Status published = PublishLocked(); !published.ok()) {
      counters.last_error = published.message();
      // Not again at once: the next try is one age later.
      opened_at = Clock::now();
    }
  }
}

Result<std::unique_ptr<SpoolSink>> SpoolSink::Create(SpoolSinkOptions options) {
  if (options.prefix.empty() || options.prefix.size() > 64) {
    return Status::InvalidArgument("prefix: want 1 to 64 characters");
  }
  for (char c : options.prefix) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return Status::InvalidArgument("prefix: letters, digits, '_' and '-' only");
  }
  struct stat info {};
  if (options.dir.empty() || ::stat(options.dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return Status::FailedPrecondition("dir: '" + options.dir + "' is not a directory");
  }
  if (::access(options.dir.c_str(), W_OK | X_OK) != 0) {
    return Status::FailedPrecondition("dir: '" + options.dir +
                                      "' is not writable: " + ErrnoText(errno));
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  if (impl->options.max_file_age.count() > 0) {
    try {
      impl->timer = std::thread([raw = impl.get()] { raw->RunTimer(); });
    } catch (const std::system_error& error) {
      return Status::ResourceExhausted(std::string("cannot start the timer thread: ") +
                                       error.what());
    }
  }
  return std::unique_ptr<SpoolSink>(new SpoolSink(std::move(impl)));
}

SpoolSink::SpoolSink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SpoolSink::~SpoolSink() { (void)Close(); }

Status SpoolSink::Emit(const Event& event) noexcept {
  Impl& s = *impl_;
  Result<std::string> json = EncodeEvent(event);
  if (json.ok() && json->size() > kMaxSpoolLineBytes) {
    json = Status::InvalidArgument("event is " + std::to_string(json->size()) +
                                   " bytes, over the spool line limit of " +
                                   std::to_string(kMaxSpoolLineBytes));
  }
  MutexLock lock(s.mu);
  if (!json.ok()) {
    ++s.counters.invalid;
    s.counters.last_error = json.status().message();
    return json.status();
  }
  if (s.closed) {
    ++s.counters.dropped;
    return Status::FailedPrecondition("sink is closed");
  }
  ++s.counters.queued;
  json->push_back('\n');
  Status written = s.fd >= 0 ? Status::Ok() : s.OpenLocked();
  if (written.ok()) written = s.AppendLocked(*json);
  if (!written.ok()) {
    ++s.counters.failed;
    s.counters.last_error = written.message();
    return written;
  }
  ++s.counters.sent;
  if (s.options.max_file_bytes > 0 && s.file_bytes >= s.options.max_file_bytes) {
    if (Status published = s.PublishLocked(); !published.ok()) {
      // The line is written; only its file's publication is late.
      s.counters.last_error = published.message();
    }
  }
  return Status::Ok();
}

Status SpoolSink::Flush(std::chrono::milliseconds) noexcept {
  MutexLock lock(impl_->mu);
  Status published = impl_->PublishLocked();
  if (!published.ok()) impl_->counters.last_error = published.message();
  return published;
}

SinkStats SpoolSink::stats() const noexcept {
  MutexLock lock(impl_->mu);
  return impl_->counters;
}

Status SpoolSink::Close() noexcept {
  Impl& s = *impl_;
  Status published;
  {
    MutexLock lock(s.mu);
    if (s.closed) return Status::Ok();
    s.closed = true;
    published = s.PublishLocked();
    if (!published.ok()) {
      // Nothing will write to it again: leave the .tmp for the operator
      // (docs/formats/spool.md) rather than leak the descriptor.
      s.counters.last_error = published.message();
      ::close(s.fd);
      s.fd = -1;
    }
  }
  s.wake.notify_one();
  if (s.timer.joinable()) s.timer.join();
  return published;
}

}  // namespace kvgov::client
