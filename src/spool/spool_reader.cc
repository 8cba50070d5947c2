#include "kvgov/spool/spool_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace kvgov::spool {
namespace {

// A line is decoded as the only element of a request body, so it meets
// exactly the decoder, closed schemas and limits of POST /v1/events.
constexpr std::string_view kOpen = "{\"events\":[";
constexpr std::string_view kClose = "]}";
constexpr std::string_view kElementPath = "$.events[0]";
constexpr std::string_view kColumn = "at line 1, column ";

bool IsBlank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

// Paths and columns of the wrapped body, restated for the line.
std::string ForLine(std::string message) {
  if (message.compare(0, kElementPath.size(), kElementPath) == 0) {
    message.replace(0, kElementPath.size(), "$");
    return message;
  }
  const size_t at = message.find(kColumn);
  if (message.compare(0, 2, "$:") == 0 && at != std::string::npos) {
    const size_t digits = at + kColumn.size();
    size_t column = 0;
    auto [end, ec] =
        std::from_chars(message.data() + digits, message.data() + message.size(), column);
    if (ec == std::errc() && column > kOpen.size()) {
      message.replace(digits, static_cast<size_t>(end - (message.data() + digits)),
                      std::to_string(column - kOpen.size()));
    }
  }
  return message;
}

Status Restate(const Status& error) {
  const std::string message = ForLine(error.message());
  switch (error.code()) {
    case StatusCode::kResourceExhausted:
      return Status::ResourceExhausted(message);
    case StatusCode::kInternal:
      return Status::Internal(message);
    default:
      return Status::InvalidArgument(message);
  }
}

}  // namespace

Result<IngestEvent> DecodeSpoolLine(std::string_view line) {
  if (line.size() > kMaxLineBytes) {
    return Status::ResourceExhausted("$: line is " + std::to_string(line.size()) +
                                     " bytes, over the limit of " + std::to_string(kMaxLineBytes));
  }
  std::string body;
  body.reserve(kOpen.size() + line.size() + kClose.size());
  body += kOpen;
  body += line;
  body += kClose;
  JsonLimits limits;
  limits.max_bytes = body.size();
  Result<IngestBatch> batch = DecodeIngestBatchJson(body, limits);
  if (!batch.ok()) return Restate(batch.status());
  if (batch->events.size() != 1) {
    // "{..},{..}": two elements would each be accepted from one line, and a
    // writer never means that.
    return Status::InvalidArgument("$: want one JSON object per line, got " +
                                   std::to_string(batch->events.size()) + " values");
  }
  Result<IngestEvent>& event = batch->events.front();
  if (!event.ok()) return Restate(event.status());
  return std::move(event).value();
}

Result<std::unique_ptr<SpoolReader>> SpoolReader::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError("open " + path + ": " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return Status::IOError(path + ": not a regular file");
  }
  return std::unique_ptr<SpoolReader>(new SpoolReader(fd, path));
}

SpoolReader::~SpoolReader() { ::close(fd_); }

Result<bool> SpoolReader::Fill() {
  if (eof_) return false;
  buffer_.erase(0, offset_);
  offset_ = 0;
  const size_t old_size = buffer_.size();
  constexpr size_t kChunk = 256 << 10;
  buffer_.resize(old_size + kChunk);
  for (;;) {
    const ssize_t got = ::read(fd_, buffer_.data() + old_size, kChunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      buffer_.resize(old_size);
      return Status::IOError("read " + path_ + ": " + std::strerror(errno));
    }
    buffer_.resize(old_size + static_cast<size_t>(got));
    if (got == 0) eof_ = true;
    return got > 0;
  }
}

Result<std::optional<SpoolLine>> SpoolReader::Next() {
  for (;;) {
    // Find the end of the next line, reading more as needed but never
    // holding more than the limit of one line.
    size_t newline;
    size_t skipped = 0;  // bytes of an over-long line already discarded
    while ((newline = buffer_.find('\n', offset_)) == std::string::npos) {
      if (buffer_.size() - offset_ > kMaxLineBytes) {
        skipped += buffer_.size() - offset_;
        offset_ = buffer_.size();
      }
      KVGOV_ASSIGN_OR_RETURN(const bool more, Fill());
      if (!more) break;
    }
    const bool at_end = newline == std::string::npos;
    if (at_end && offset_ == buffer_.size() && skipped == 0) {
      return std::optional<SpoolLine>();
    }
    const size_t end = at_end ? buffer_.size() : newline;
    const size_t length = skipped + (end - offset_);
    ++line_number_;
    if (length > kMaxLineBytes) {
      offset_ = at_end ? end : end + 1;
      return std::optional<SpoolLine>(SpoolLine{
          line_number_, std::string(),
          Status::ResourceExhausted("$: line is " + std::to_string(length) +
                                    " bytes, over the limit of " + std::to_string(kMaxLineBytes))});
    }
    std::string text = buffer_.substr(offset_, end - offset_);
    offset_ = at_end ? end : end + 1;
    if (IsBlank(text)) continue;
    Result<IngestEvent> event = DecodeSpoolLine(text);
    return std::optional<SpoolLine>(SpoolLine{line_number_, std::move(text), std::move(event)});
  }
}

}  // namespace kvgov::spool
