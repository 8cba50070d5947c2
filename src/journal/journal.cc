#include "kvgov/journal/journal.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <utility>

#include "kvgov/core/digest.h"

namespace kvgov::journal {
namespace {

// Each format hashes under its own domain, so a row cannot be re-read as
// the other format with the same hash.
constexpr std::string_view kRowDomainV1 = "kvgov.journal.row.v1";
constexpr std::string_view kRowDomainV2 = "kvgov.journal.row.v2";
// Hashes and digests are stored as lowercase hex.
constexpr size_t kHexHashBytes = 64;

// prev_hash of row 1, and the head hash of an empty journal.
std::string ZeroHash() { return std::string(kHexHashBytes, '0'); }

// Fixed part of an encoded row: version byte, seq, time_ms.
constexpr size_t kFixedBytes = 1 + 8 + 8;
// Eight length-framed fields (six in format 1), each with a 4-byte length.
constexpr size_t kFieldCount = 8;
constexpr size_t kMinRowBytes = kFixedBytes + kFieldCount * 4;

std::string BigEndian(uint64_t value, size_t width) {
  std::string out(width, '\0');
  for (size_t i = width; i-- > 0;) {
    out[i] = static_cast<char>(value & 0xff);
    value >>= 8;
  }
  return out;
}

uint64_t ReadBigEndian(std::string_view bytes) {
  uint64_t value = 0;
  for (char c : bytes) value = (value << 8) | static_cast<uint8_t>(c);
  return value;
}

void AppendField(std::string& out, std::string_view field) {
  out += BigEndian(field.size(), 4);
  out += field;
}

size_t EncodedSize(size_t kind, size_t subject, const Attribution& by, size_t payload) {
  return kMinRowBytes + kind + subject + by.actor.size() + by.origin.size() + payload +
         3 * kHexHashBytes;
}

// Walks an encoded row, naming the offset of whatever is wrong.
class RowReader {
 public:
  explicit RowReader(std::string_view bytes) : bytes_(bytes) {}

  Status Fixed(std::string_view what, size_t width, std::string_view& out) {
    if (bytes_.size() - offset_ < width) {
      return Status::Corruption("journal row: " + std::string(what) + " at offset " +
                                std::to_string(offset_) + " runs past the end (" +
                                std::to_string(bytes_.size()) + " bytes)");
    }
    out = bytes_.substr(offset_, width);
    offset_ += width;
    return Status::Ok();
  }

  Status Field(std::string_view name, std::string& out) {
    size_t at = offset_;
    std::string_view length_bytes;
    KVGOV_RETURN_IF_ERROR(Fixed("length of " + std::string(name), 4, length_bytes));
    uint64_t length = ReadBigEndian(length_bytes);
    if (length > bytes_.size() - offset_) {
      return Status::Corruption("journal row: field " + std::string(name) + " at offset " +
                                std::to_string(at) + " has length " + std::to_string(length) +
                                ", past the end (" + std::to_string(bytes_.size()) + " bytes)");
    }
    out.assign(bytes_.substr(offset_, length));
    offset_ += length;
    return Status::Ok();
  }

  size_t offset() const { return offset_; }
  size_t remaining() const { return bytes_.size() - offset_; }

 private:
  std::string_view bytes_;
  size_t offset_ = 0;
};

// The checks a row must pass by itself (its chain links are the caller's).
std::string RowProblem(const Row& row) {
  if (row.payload_digest != Sha256Hex(row.payload)) {
    return "payload digest mismatch: row says " + row.payload_digest + ", payload hashes to " +
           Sha256Hex(row.payload);
  }
  std::string hash = RowHash(row);
  if (row.hash != hash) {
    return "hash mismatch: row says " + row.hash + ", fields hash to " + hash;
  }
  return "";
}

}  // namespace

std::string RowHash(const Row& row) {
  std::string version = BigEndian(row.format_version, 4);
  std::string seq = BigEndian(row.seq, 8);
  std::string time = BigEndian(static_cast<uint64_t>(row.time_ms), 8);
  if (row.format_version == 1) {
    return DigestFields(kRowDomainV1, {version, seq, time, row.kind, row.subject,
                                       row.payload_digest, row.prev_hash});
  }
  return DigestFields(kRowDomainV2, {version, seq, time, row.kind, row.subject, row.actor,
                                     row.origin, row.payload_digest, row.prev_hash});
}

std::string EncodeRow(const Row& row) {
  std::string out;
  out.reserve(EncodedSize(row.kind.size(), row.subject.size(), {row.actor, row.origin},
                          row.payload.size()));
  out += static_cast<char>(static_cast<uint8_t>(row.format_version));
  out += BigEndian(row.seq, 8);
  out += BigEndian(static_cast<uint64_t>(row.time_ms), 8);
  AppendField(out, row.kind);
  AppendField(out, row.subject);
  if (row.format_version != 1) {
    AppendField(out, row.actor);
    AppendField(out, row.origin);
  }
  AppendField(out, row.payload_digest);
  AppendField(out, row.payload);
  AppendField(out, row.prev_hash);
  AppendField(out, row.hash);
  return out;
}

Result<Row> DecodeRow(std::string_view bytes) {
  if (bytes.size() > kMaxRowBytes) {
    return Status::Corruption("journal row: " + std::to_string(bytes.size()) + " bytes, over the " +
                              std::to_string(kMaxRowBytes) + "-byte limit");
  }
  RowReader reader(bytes);
  Row row;
  std::string_view fixed;
  KVGOV_RETURN_IF_ERROR(reader.Fixed("format version", 1, fixed));
  row.format_version = static_cast<uint8_t>(fixed[0]);
  if (row.format_version != 1 && row.format_version != kRowFormatVersion) {
    return Status::Corruption("journal row: format version " + std::to_string(row.format_version) +
                              " at offset 0, this kvgov reads 1 and " +
                              std::to_string(kRowFormatVersion));
  }
  KVGOV_RETURN_IF_ERROR(reader.Fixed("seq", 8, fixed));
  row.seq = ReadBigEndian(fixed);
  KVGOV_RETURN_IF_ERROR(reader.Fixed("time_ms", 8, fixed));
  row.time_ms = static_cast<int64_t>(ReadBigEndian(fixed));
  KVGOV_RETURN_IF_ERROR(reader.Field("kind", row.kind));
  KVGOV_RETURN_IF_ERROR(reader.Field("subject", row.subject));
  if (row.format_version != 1) {
    KVGOV_RETURN_IF_ERROR(reader.Field("actor", row.actor));
    KVGOV_RETURN_IF_ERROR(reader.Field("origin", row.origin));
  }
  KVGOV_RETURN_IF_ERROR(reader.Field("payload_digest", row.payload_digest));
  KVGOV_RETURN_IF_ERROR(reader.Field("payload", row.payload));
  KVGOV_RETURN_IF_ERROR(reader.Field("prev_hash", row.prev_hash));
  KVGOV_RETURN_IF_ERROR(reader.Field("hash", row.hash));
  if (reader.remaining() != 0) {
    return Status::Corruption("journal row: " + std::to_string(reader.remaining()) +
                              " trailing bytes at offset " + std::to_string(reader.offset()));
  }
  return row;
}

namespace {

constexpr std::string_view kAdoptedPrefix = "journal/adopted/";

bool IsHex64(std::string_view text) {
  return text.size() == kHexHashBytes && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// "<first_seq> <last_seq> <hash> <source>": the source may hold spaces.
std::string EncodeAdopted(const AdoptedSpan& span) {
  return std::to_string(span.first_seq) + " " + std::to_string(span.last_seq) + " " + span.hash +
         " " + span.source;
}

bool ParseDecimal(std::string_view text, uint64_t* out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

Result<AdoptedSpan> DecodeAdopted(std::string_view key, std::string_view value) {
  const Result<uint64_t> at = store::ParseKeyU64(key.substr(kAdoptedPrefix.size()));
  const auto bad = [&](std::string_view what) {
    return Status::Corruption("adopted span " + (at.ok() ? std::to_string(*at) : "?") + ": " +
                              std::string(what));
  };
  AdoptedSpan span;
  const size_t first_end = value.find(' ');
  const size_t last_end =
      first_end == std::string_view::npos ? first_end : value.find(' ', first_end + 1);
  if (last_end == std::string_view::npos || value.size() < last_end + 1 + kHexHashBytes) {
    return bad("want '<first_seq> <last_seq> <hash> <source>'");
  }
  if (!ParseDecimal(value.substr(0, first_end), &span.first_seq) ||
      !ParseDecimal(value.substr(first_end + 1, last_end - first_end - 1), &span.last_seq)) {
    return bad("seqs are not decimal numbers");
  }
  span.hash = std::string(value.substr(last_end + 1, kHexHashBytes));
  const std::string_view rest = value.substr(last_end + 1 + kHexHashBytes);
  if (!rest.empty()) {
    if (rest.front() != ' ') return bad("no space after the hash");
    span.source = std::string(rest.substr(1));
  }
  if (span.first_seq == 0 || span.last_seq < span.first_seq || !IsHex64(span.hash)) {
    return bad("seqs or hash out of shape");
  }
  return span;
}

// Every adopted span, by first seq.
Result<std::map<uint64_t, AdoptedSpan>> AdoptedSpans(const store::Store& store) {
  std::map<uint64_t, AdoptedSpan> spans;
  Status bad;
  KVGOV_RETURN_IF_ERROR(store.Scan(store::Column::kMeta, kAdoptedPrefix,
                                   std::string(kAdoptedPrefix.substr(0, 15)) + "0",
                                   [&](std::string_view key, std::string_view value) {
                                     Result<AdoptedSpan> span = DecodeAdopted(key, value);
                                     if (!span.ok()) {
                                       bad = span.status();
                                       return false;
                                     }
                                     const uint64_t first_seq = span->first_seq;
                                     spans.emplace(first_seq, std::move(span).value());
                                     return true;
                                   }));
  KVGOV_RETURN_IF_ERROR(bad);
  return spans;
}

}  // namespace

Result<std::unique_ptr<Journal>> Journal::Open(store::Store* store) {
  std::unique_ptr<Journal> journal(new Journal(store));
  // Nobody else has it yet; held so that every access is under the lock.
  MutexLock lock(journal->mu_);
  journal->head_hash_ = ZeroHash();
  KVGOV_ASSIGN_OR_RETURN(std::optional<std::string> last, store->LastKey(store::Column::kJournal));
  // An adopted span past the last row is the head (no row appended since).
  KVGOV_ASSIGN_OR_RETURN(auto spans, AdoptedSpans(*store));
  if (!spans.empty()) {
    const AdoptedSpan& newest = spans.rbegin()->second;
    journal->head_seq_ = newest.last_seq;
    journal->head_hash_ = newest.hash;
  }
  if (!last.has_value()) return journal;

  Result<uint64_t> seq = store::ParseKeyU64(*last);
  if (!seq.ok()) return Status::Corruption("journal head: " + seq.status().message());
  std::string where = "journal head (seq " + std::to_string(*seq) + "): ";
  KVGOV_ASSIGN_OR_RETURN(std::optional<std::string> bytes,
                         store->Get(store::Column::kJournal, *last));
  if (!bytes.has_value()) return Status::Corruption(where + "vanished while opening");
  Result<Row> row = DecodeRow(*bytes);
  if (!row.ok()) return Status::Corruption(where + row.status().message());
  if (row->seq != *seq) {
    return Status::Corruption(where + "holds a row with seq " + std::to_string(row->seq));
  }
  if (std::string problem = RowProblem(*row); !problem.empty()) {
    return Status::Corruption(where + problem);
  }
  if (row->seq > journal->head_seq_) {
    journal->head_seq_ = row->seq;
    journal->head_hash_ = row->hash;
  }
  journal->head_time_ms_ = row->time_ms;
  return journal;
}

Status Journal::AdoptHead(uint64_t seq, std::string_view hash, std::string_view source,
                          std::span<const store::WriteOp> extra) {
  if (!IsHex64(hash)) return Status::InvalidArgument("journal: adopted hash is not 64 hex digits");
  MutexLock lock(mu_);
  // Not under a group's write: the head it chains from must not move.
  while (committing_) settled_.wait(lock);
  if (seq < head_seq_ || (seq == head_seq_ && hash != head_hash_)) {
    return Status::FailedPrecondition("journal: cannot adopt head " + std::to_string(seq) + "/" +
                                      std::string(hash) + " over this journal's head " +
                                      std::to_string(head_seq_) + "/" + head_hash_ +
                                      ": it is not a prefix of that chain");
  }
  std::vector<store::WriteOp> ops(extra.begin(), extra.end());
  if (seq > head_seq_) {
    const AdoptedSpan span{head_seq_ + 1, seq, std::string(hash), std::string(source)};
    ops.push_back({store::Column::kMeta,
                   std::string(kAdoptedPrefix) + store::KeyU64(span.first_seq),
                   EncodeAdopted(span)});
  }
  KVGOV_RETURN_IF_ERROR(store_->Write(ops, /*sync=*/true).WithContext("journal: adopt head"));
  head_seq_ = seq;
  head_hash_ = std::string(hash);
  return Status::Ok();
}

Status CheckRowFits(std::string_view kind, std::string_view subject, const Attribution& by,
                    std::string_view payload) {
  const size_t size = EncodedSize(kind.size(), subject.size(), by, payload.size());
  if (size > kMaxRowBytes) {
    return Status::ResourceExhausted("journal: a " + std::string(kind) + " row would be " +
                                     std::to_string(size) + " bytes, over the " +
                                     std::to_string(kMaxRowBytes) + "-byte limit");
  }
  return Status::Ok();
}

// One caller's Append while it waits in the queue: its input (the caller's,
// alive while it waits) and, once its group is written, its outcome.
struct Journal::PendingAppend {
  std::string_view kind;
  std::string_view subject;
  const Attribution& by;
  std::string_view payload;
  int64_t time_ms;
  std::span<const store::WriteOp> extra;
  bool settled;
  Result<Row> outcome;
};

Result<Row> Journal::Append(std::string_view kind, std::string_view subject, const Attribution& by,
                            std::string_view payload, int64_t time_ms,
                            std::span<const store::WriteOp> extra) {
  KVGOV_RETURN_IF_ERROR(CheckRowFits(kind, subject, by, payload));
  for (const store::WriteOp& op : extra) {
    if (op.column == store::Column::kJournal) {
      return Status::InvalidArgument(
          "journal: an appended row's extra ops may not write "
          "the journal column");
    }
  }

  PendingAppend mine{kind,
                     subject,
                     by,
                     payload,
                     time_ms,
                     extra,
                     /*settled=*/false,
                     Status::Internal("journal: append not settled")};
  MutexLock lock(mu_);
  queue_.push_back(&mine);
  while (!mine.settled && (committing_ || queue_.front() != &mine)) settled_.wait(lock);
  if (!mine.settled) {
    // This append leads: it writes every one queued behind it too.
    const size_t rows = std::min(queue_.size(), kMaxGroupRows);
    const auto end = queue_.begin() + static_cast<ptrdiff_t>(rows);
    std::vector<PendingAppend*> group(queue_.begin(), end);
    queue_.erase(queue_.begin(), end);
    committing_ = true;
    CommitGroup(std::move(group));
  }
  return std::move(mine.outcome);
}

void Journal::CommitGroup(std::vector<PendingAppend*> group) {
  std::vector<Row> rows;
  rows.reserve(group.size());
  std::vector<store::WriteOp> ops;
  uint64_t seq = head_seq_;
  std::string prev_hash = head_hash_;
  for (const PendingAppend* pending : group) {
    Row& row = rows.emplace_back();
    row.format_version = kRowFormatVersion;
    row.seq = ++seq;
    row.time_ms = pending->time_ms;
    row.kind = pending->kind;
    row.subject = pending->subject;
    row.actor = pending->by.actor;
    row.origin = pending->by.origin;
    row.payload = pending->payload;
    row.payload_digest = Sha256Hex(pending->payload);
    row.prev_hash = prev_hash;
    row.hash = RowHash(row);
    prev_hash = row.hash;
    ops.push_back({store::Column::kJournal, store::KeyU64(row.seq), EncodeRow(row)});
    ops.insert(ops.end(), pending->extra.begin(), pending->extra.end());
  }

  mu_.unlock();  // appends arriving now queue up for the next group
  const Status written = store_->Write(ops, /*sync=*/true);
  mu_.lock();

  committing_ = false;
  if (written.ok()) {
    head_seq_ = rows.back().seq;
    head_hash_ = rows.back().hash;
    for (const Row& row : rows) head_time_ms_ = std::max(head_time_ms_, row.time_ms);
  }
  for (size_t i = 0; i < group.size(); ++i) {
    group[i]->outcome =
        written.ok() ? Result<Row>(std::move(rows[i]))
                     : written.WithContext("journal: append seq " + std::to_string(rows[i].seq));
    group[i]->settled = true;
  }
  settled_.notify_all();
}

Result<std::vector<Row>> Journal::Read(uint64_t since, size_t limit) const {
  std::vector<Row> rows;
  if (limit == 0) return rows;
  Status decode_error;
  Status scanned =
      store_->Scan(store::Column::kJournal, store::KeyU64(since), "",
                   [&](std::string_view key, std::string_view value) {
                     Result<Row> row = DecodeRow(value);
                     if (!row.ok()) {
                       Result<uint64_t> seq = store::ParseKeyU64(key);
                       std::string where = seq.ok() ? "journal row " + std::to_string(*seq) + ": "
                                                    : "journal row with a malformed key: ";
                       decode_error = Status::Corruption(where + row.status().message());
                       return false;
                     }
                     rows.push_back(std::move(row).value());
                     return rows.size() < limit;
                   });
  KVGOV_RETURN_IF_ERROR(scanned);
  KVGOV_RETURN_IF_ERROR(decode_error);
  return rows;
}

int64_t Journal::head_time_ms() const {
  MutexLock lock(mu_);
  return head_time_ms_;
}

uint64_t Journal::head_seq() const {
  MutexLock lock(mu_);
  return head_seq_;
}

std::string Journal::head_hash() const {
  MutexLock lock(mu_);
  return head_hash_;
}

Result<VerifyReport> Verify(const store::Store& store) {
  KVGOV_ASSIGN_OR_RETURN(VerifyCursor cursor, VerifyFrom(store, VerifyCursor{}));
  return std::move(cursor.report);
}

Result<VerifyCursor> VerifyFrom(const store::Store& store, VerifyCursor cursor) {
  if (cursor.report.first_broken_seq.has_value()) return cursor;
  VerifyReport& report = cursor.report;
  uint64_t& expected = cursor.next_seq;
  std::string& prev_hash = cursor.prev_hash;
  Result<std::map<uint64_t, AdoptedSpan>> spans = AdoptedSpans(store);
  if (!spans.ok()) {
    report.first_broken_seq = expected;
    report.problem = spans.status().message();
    return cursor;
  }
  // Steps over an adopted span that starts where the chain stands.
  auto cross_adopted = [&] {
    for (auto span = spans->find(expected); span != spans->end(); span = spans->find(expected)) {
      report.adopted.push_back(span->second);
      expected = span->second.last_seq + 1;
      prev_hash = span->second.hash;
    }
  };
  auto broken = [&](uint64_t seq, std::string problem) {
    report.first_broken_seq = seq;
    report.problem = std::move(problem);
    return false;
  };
  Status scanned = store.Scan(
      store::Column::kJournal, store::KeyU64(expected), "",
      [&](std::string_view key, std::string_view value) {
        Result<uint64_t> key_seq = store::ParseKeyU64(key);
        if (!key_seq.ok()) {
          return broken(expected, "malformed key after row " + std::to_string(expected - 1) + ": " +
                                      key_seq.status().message());
        }
        if (*key_seq != expected) cross_adopted();
        if (*key_seq != expected) {
          return broken(expected, "seq hole: row " + std::to_string(expected) +
                                      " is missing (the next row is " + std::to_string(*key_seq) +
                                      ")");
        }
        Result<Row> row = DecodeRow(value);
        if (!row.ok()) return broken(expected, row.status().message());
        if (row->seq != expected) {
          return broken(expected, "seq mismatch: key " + std::to_string(expected) +
                                      " holds row seq " + std::to_string(row->seq));
        }
        if (row->prev_hash != prev_hash) {
          return broken(expected, "prev_hash mismatch: row says " + row->prev_hash + ", row " +
                                      std::to_string(expected - 1) + " hashes to " + prev_hash);
        }
        if (std::string problem = RowProblem(*row); !problem.empty()) {
          return broken(expected, std::move(problem));
        }
        ++report.rows;
        ++expected;
        prev_hash = std::move(row->hash);
        return true;
      });
  // A damaged table block is a broken row too: the chain cannot be
  // followed past it. Anything else means the store cannot be read.
  if (scanned.code() == StatusCode::kCorruption && !report.first_broken_seq.has_value()) {
    broken(expected, scanned.message());
    return cursor;
  }
  KVGOV_RETURN_IF_ERROR(scanned);
  if (!report.first_broken_seq.has_value()) cross_adopted();  // a span after the last row
  return cursor;
}

}  // namespace kvgov::journal
