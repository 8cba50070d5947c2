// The governance log (docs/formats/governance-log.md): its entries'
// encoding and the Redis stream they are appended to and read from.

#include "kvgov/replication/governance_log.h"

#include <algorithm>
#include <iterator>

#include "kvgov/core/utf8.h"
#include "replication/redis_values.h"

namespace kvgov::replication {
namespace {

using redis_values::FieldError;
using redis_values::IntegerAsBool;
using redis_values::IntegerField;
using redis_values::Json;
using redis_values::ParseBounded;
using redis_values::ParseUint64;
using redis_values::Quoted;
using redis_values::StringField;
using redis_values::UnexpectedReply;

constexpr std::string_view kColumns[] = {"governance", "tokens"};

bool KnownColumn(std::string_view column) {
  return std::find(std::begin(kColumns), std::end(kColumns), column) != std::end(kColumns);
}

Result<LogWrite> DecodeWrite(const Json& value, const std::string& path) {
  if (!value.is_object()) return FieldError(path, "want an object");
  for (const auto& [key, unused] : value.items()) {
    if (key != "column" && key != "key" && key != "value" && key != "erase") {
      return FieldError(path + "." + Quoted(key), "unknown field");
    }
  }
  LogWrite write;
  KVGOV_ASSIGN_OR_RETURN(write.column, StringField(value, "column", path + ".column"));
  if (!KnownColumn(write.column)) {
    return FieldError(path + ".column", "unknown column " + Quoted(write.column));
  }
  KVGOV_ASSIGN_OR_RETURN(write.key, StringField(value, "key", path + ".key"));
  const bool has_value = value.contains("value");
  const auto erase = value.find("erase");
  if (erase != value.end() && !(erase->is_boolean() && erase->get<bool>())) {
    return FieldError(path + ".erase", "want true (leave it out to write a value)");
  }
  if (has_value && erase != value.end()) return FieldError(path, "has both 'value' and 'erase'");
  if (!has_value && erase == value.end()) return FieldError(path, "want 'value' or 'erase': true");
  if (has_value) {
    KVGOV_ASSIGN_OR_RETURN(write.value, StringField(value, "value", path + ".value"));
  }
  return write;
}

// A write id is the writer's own choice, compared byte for byte: short
// printable ASCII keeps it safe in keys and log lines.
Status CheckWriteId(std::string_view write_id) {
  if (write_id.empty() || write_id.size() > kMaxWriteIdBytes) {
    return FieldError("write_id", "want 1 to " + std::to_string(kMaxWriteIdBytes) + " characters");
  }
  const bool plain = std::all_of(write_id.begin(), write_id.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' ||
           c == '_' || c == '.';
  });
  if (!plain) return FieldError("write_id", "want letters, digits, '-', '_' or '.' only");
  return Status::Ok();
}

// What Append refuses so that every entry it writes decodes on every
// replica: JSON strings must be UTF-8, columns must be known, and the write
// id must be one a reader accepts.
Status CheckForAppend(const LogEntry& entry) {
  KVGOV_RETURN_IF_ERROR(CheckWriteId(entry.write_id));
  const std::pair<std::string_view, const std::string*> fields[] = {{"origin", &entry.origin},
                                                                    {"actor", &entry.actor},
                                                                    {"kind", &entry.kind},
                                                                    {"subject", &entry.subject},
                                                                    {"payload", &entry.payload}};
  for (const auto& [name, text] : fields) {
    if (!IsValidUtf8(*text)) return FieldError(name, "not valid UTF-8");
  }
  for (size_t i = 0; i < entry.writes.size(); ++i) {
    const LogWrite& write = entry.writes[i];
    const std::string path = "writes[" + std::to_string(i) + "]";
    if (!KnownColumn(write.column)) {
      return FieldError(path + ".column", "unknown column " + Quoted(write.column));
    }
    if (!IsValidUtf8(write.key)) return FieldError(path + ".key", "not valid UTF-8");
    if (write.value.has_value() && !IsValidUtf8(*write.value)) {
      return FieldError(path + ".value", "not valid UTF-8");
    }
  }
  return Status::Ok();
}

// One stream entry of an XREAD/XREVRANGE reply: [id, [field, value, ...]].
struct RawEntry {
  std::string id;
  Result<std::string> field = Status::InvalidArgument("e: missing");
};

Result<std::vector<RawEntry>> ParseEntries(const RedisReply& reply, std::string_view command) {
  if (reply.type != RedisReply::Type::kArray)
    return UnexpectedReply(command, "entries: want an array");
  std::vector<RawEntry> entries;
  entries.reserve(reply.elements.size());
  for (const RedisReply& item : reply.elements) {
    if (item.type != RedisReply::Type::kArray || item.elements.size() != 2 ||
        item.elements[0].type != RedisReply::Type::kString) {
      return UnexpectedReply(command, "entry: want [id, fields]");
    }
    RawEntry entry;
    entry.id = item.elements[0].text;
    if (!ParseStreamId(entry.id).ok()) {
      return UnexpectedReply(command, "entry id " + Quoted(entry.id) + " is not MS-SEQ");
    }
    const RedisReply& fields = item.elements[1];
    // A nil field list (an entry deleted under a reader) carries no `e`.
    if (fields.type == RedisReply::Type::kArray) {
      if (fields.elements.size() % 2 != 0) {
        entry.field = Status::InvalidArgument("fields: odd number of field and value strings");
      } else {
        bool seen = false;
        for (size_t i = 0; i < fields.elements.size(); i += 2) {
          const RedisReply& name = fields.elements[i];
          const RedisReply& value = fields.elements[i + 1];
          if (name.type != RedisReply::Type::kString || name.text != "e") continue;
          if (seen) {
            entry.field = Status::InvalidArgument("e: appears twice");
            break;
          }
          seen = true;
          entry.field = value.type == RedisReply::Type::kString
                            ? Result<std::string>(value.text)
                            : Result<std::string>(Status::InvalidArgument("e: want a string"));
        }
      }
    } else if (fields.type != RedisReply::Type::kNil) {
      return UnexpectedReply(command, "entry fields: want an array");
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

// Trims below ARGV[1] and records it as the mark, unless the mark is there
// already: a housekeeper that was paused must not move it back. Ids are
// compared as (ms, seq) of decimal strings without leading zeros.
constexpr std::string_view kTrimScript = R"lua(
local function less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local function id_less(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  if ams ~= bms then return less(ams, bms) end
  return less(aseq, bseq)
end
local mark = redis.call('GET', KEYS[2])
if mark and not id_less(mark, ARGV[1]) then return 0 end
redis.call('XTRIM', KEYS[1], 'MINID', ARGV[1])
redis.call('SET', KEYS[2], ARGV[1])
return 1
)lua";

}  // namespace

std::string EncodeLogEntry(const LogEntry& entry) {
  // ordered_json keeps the documented field order, which makes the stream
  // readable with redis-cli.
  nlohmann::ordered_json object;
  object["v"] = kLogEntryVersion;
  // Only an entry read from an older version has none (Append refuses it).
  if (!entry.write_id.empty()) object["write_id"] = entry.write_id;
  object["origin"] = entry.origin;
  object["actor"] = entry.actor;
  object["kind"] = entry.kind;
  object["subject"] = entry.subject;
  object["payload"] = entry.payload;
  object["time_ms"] = entry.time_ms;
  nlohmann::ordered_json writes = nlohmann::ordered_json::array();
  for (const LogWrite& write : entry.writes) {
    nlohmann::ordered_json item;
    item["column"] = write.column;
    item["key"] = write.key;
    if (write.value.has_value()) {
      item["value"] = *write.value;
    } else {
      item["erase"] = true;
    }
    writes.push_back(std::move(item));
  }
  object["writes"] = std::move(writes);
  // `replace` keeps dump() from throwing on invalid UTF-8; Append refuses
  // such entries before encoding, so nothing it writes is altered.
  return object.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

Result<LogEntry> DecodeLogEntry(std::string_view bytes, std::string_view id) {
  if (bytes.size() > kMaxLogEntryBytes) {
    return Status::InvalidArgument("entry: " + std::to_string(bytes.size()) +
                                   " bytes, over the limit of " +
                                   std::to_string(kMaxLogEntryBytes));
  }
  KVGOV_ASSIGN_OR_RETURN(Json value, ParseBounded(bytes, "entry"));
  if (!value.is_object()) return FieldError("entry", "want an object");

  // The version first: an entry of another version is reported as such,
  // not as whatever field it happens to have changed.
  KVGOV_ASSIGN_OR_RETURN(int64_t version, IntegerField(value, "v", "v"));
  if (version < 1 || version > kLogEntryVersion) {
    return FieldError("v", "version " + std::to_string(version) + " is not supported (want 1 to " +
                               std::to_string(kLogEntryVersion) + ")");
  }
  // Version 2 is version 3 without the write id, version 1 version 2
  // without the actor.
  static constexpr std::string_view kFields[] = {"v",       "write_id", "origin",  "actor", "kind",
                                                 "subject", "payload",  "time_ms", "writes"};
  for (const auto& [key, unused] : value.items()) {
    if (std::find(std::begin(kFields), std::end(kFields), key) == std::end(kFields) ||
        (version < 3 && key == "write_id") || (version == 1 && key == "actor")) {
      return FieldError(Quoted(key), "unknown field");
    }
  }

  LogEntry entry;
  entry.id = std::string(id);
  if (version >= 3 && value.contains("write_id")) {
    KVGOV_ASSIGN_OR_RETURN(entry.write_id, StringField(value, "write_id", "write_id"));
    KVGOV_RETURN_IF_ERROR(CheckWriteId(entry.write_id));
  }
  KVGOV_ASSIGN_OR_RETURN(entry.origin, StringField(value, "origin", "origin"));
  if (version != 1) {
    KVGOV_ASSIGN_OR_RETURN(entry.actor, StringField(value, "actor", "actor"));
  }
  KVGOV_ASSIGN_OR_RETURN(entry.kind, StringField(value, "kind", "kind"));
  KVGOV_ASSIGN_OR_RETURN(entry.subject, StringField(value, "subject", "subject"));
  KVGOV_ASSIGN_OR_RETURN(entry.payload, StringField(value, "payload", "payload"));
  KVGOV_ASSIGN_OR_RETURN(entry.time_ms, IntegerField(value, "time_ms", "time_ms"));
  const auto writes = value.find("writes");
  if (writes == value.end()) return FieldError("writes", "missing");
  if (!writes->is_array()) return FieldError("writes", "want an array");
  entry.writes.reserve(writes->size());
  for (size_t i = 0; i < writes->size(); ++i) {
    KVGOV_ASSIGN_OR_RETURN(LogWrite write,
                           DecodeWrite((*writes)[i], "writes[" + std::to_string(i) + "]"));
    entry.writes.push_back(std::move(write));
  }
  return entry;
}

std::string StreamId::ToString() const { return std::to_string(ms) + "-" + std::to_string(seq); }

Result<StreamId> ParseStreamId(std::string_view text) {
  const size_t dash = text.find('-');
  StreamId id;
  if (dash == std::string_view::npos || !ParseUint64(text.substr(0, dash), &id.ms) ||
      !ParseUint64(text.substr(dash + 1), &id.seq)) {
    return Status::InvalidArgument("stream id " + Quoted(text) +
                                   ": want MS-SEQ, two unsigned 64-bit integers");
  }
  return id;
}

GovernanceLog::GovernanceLog(const RedisEndpoint& endpoint, std::string stream_key,
                             std::chrono::milliseconds timeout)
    : stream_key_(std::move(stream_key)),
      timeout_(timeout),
      append_(endpoint, timeout),
      read_(endpoint, timeout) {}

Result<std::string> GovernanceLog::Append(const LogEntry& entry) {
  KVGOV_RETURN_IF_ERROR(CheckForAppend(entry));
  std::string encoded = EncodeLogEntry(entry);
  if (encoded.size() > kMaxLogEntryBytes) {
    return Status::InvalidArgument("entry: " + std::to_string(encoded.size()) +
                                   " bytes encoded, over the limit of " +
                                   std::to_string(kMaxLogEntryBytes));
  }
  const std::string args[] = {"XADD", stream_key_, "*", "e", std::move(encoded)};
  Result<RedisReply> reply = [&] {
    MutexLock lock(append_mu_);
    return append_.Command(args);
  }();
  if (!reply.ok()) return reply.status();
  if (reply->type != RedisReply::Type::kString) return UnexpectedReply("XADD", "want an id");
  if (!ParseStreamId(reply->text).ok()) {
    return UnexpectedReply("XADD", "id " + Quoted(reply->text) + " is not MS-SEQ");
  }
  return std::move(reply->text);
}

Result<LogBatch> GovernanceLog::ReadAfter(std::string_view after_id, size_t count,
                                          std::chrono::milliseconds block) {
  KVGOV_ASSIGN_OR_RETURN(StreamId after, ParseStreamId(after_id));
  if (count == 0) return Status::InvalidArgument("count: want at least 1");
  std::vector<std::string> args = {"XREAD", "COUNT", std::to_string(count)};
  // BLOCK 0 would wait forever; no block means a plain, non-blocking read.
  if (block.count() > 0) {
    args.emplace_back("BLOCK");
    args.push_back(std::to_string(block.count()));
  }
  args.emplace_back("STREAMS");
  args.push_back(stream_key_);
  args.emplace_back(after_id);

  Result<RedisReply> reply = [&] {
    MutexLock lock(read_mu_);
    return block.count() > 0 ? read_.BlockingCommand(args, block + timeout_) : read_.Command(args);
  }();
  if (!reply.ok()) return reply.status();

  LogBatch batch;
  batch.last_id = std::string(after_id);
  if (reply->type == RedisReply::Type::kNil) return batch;
  // [[key, [entry, ...]]]: one stream asked for, one answered.
  if (reply->type != RedisReply::Type::kArray || reply->elements.size() != 1 ||
      reply->elements[0].type != RedisReply::Type::kArray ||
      reply->elements[0].elements.size() != 2 ||
      reply->elements[0].elements[0].type != RedisReply::Type::kString ||
      reply->elements[0].elements[0].text != stream_key_) {
    return UnexpectedReply("XREAD", "want [[stream key, entries]]");
  }
  KVGOV_ASSIGN_OR_RETURN(std::vector<RawEntry> raw,
                         ParseEntries(reply->elements[0].elements[1], "XREAD"));
  if (raw.size() > count) return UnexpectedReply("XREAD", "more entries than COUNT");

  StreamId previous = after;
  for (RawEntry& item : raw) {
    // Ids must grow, or a reader resuming from last_id could loop or skip.
    const StreamId id = *ParseStreamId(item.id);
    if (!(previous < id)) {
      return UnexpectedReply("XREAD", "id " + item.id + " does not follow " + previous.ToString());
    }
    previous = id;
    Result<LogEntry> entry = item.field.ok() ? DecodeLogEntry(*item.field, item.id)
                                             : Result<LogEntry>(item.field.status());
    if (entry.ok()) {
      batch.entries.push_back(std::move(entry).value());
    } else {
      batch.rejected.emplace_back(item.id, entry.status());
    }
    batch.last_id = std::move(item.id);
  }
  return batch;
}

Result<std::string> GovernanceLog::LastId() {
  const std::string args[] = {"XREVRANGE", stream_key_, "+", "-", "COUNT", "1"};
  Result<RedisReply> reply = [&] {
    MutexLock lock(read_mu_);
    return read_.Command(args);
  }();
  if (!reply.ok()) return reply.status();
  KVGOV_ASSIGN_OR_RETURN(std::vector<RawEntry> raw, ParseEntries(*reply, "XREVRANGE"));
  if (raw.empty()) return std::string("0-0");
  return std::move(raw.front().id);
}

Result<bool> GovernanceLog::TrimBelow(const StreamId& below) {
  const std::string args[] = {"EVAL",      std::string(kTrimScript), "2",
                              stream_key_, stream_key_ + ":trimmed", below.ToString()};
  MutexLock lock(append_mu_);
  return IntegerAsBool(append_.Command(args), "EVAL");
}

Result<std::optional<StreamId>> GovernanceLog::TrimmedBelow() {
  MutexLock lock(read_mu_);
  KVGOV_ASSIGN_OR_RETURN(RedisReply reply, read_.Command({"GET", stream_key_ + ":trimmed"}));
  if (reply.type == RedisReply::Type::kNil) return std::optional<StreamId>();
  if (reply.type != RedisReply::Type::kString) return UnexpectedReply("GET", "want a string");
  KVGOV_ASSIGN_OR_RETURN(StreamId mark, ParseStreamId(reply.text));
  return std::optional<StreamId>(mark);
}

Result<uint64_t> GovernanceLog::Length() {
  MutexLock lock(read_mu_);
  KVGOV_ASSIGN_OR_RETURN(RedisReply reply, read_.Command({"XLEN", stream_key_}));
  if (reply.type != RedisReply::Type::kInteger || reply.integer < 0) {
    return UnexpectedReply("XLEN", "want a count");
  }
  return static_cast<uint64_t>(reply.integer);
}

// Both on the append connection: the read connection is held through a
// blocking read, and the heartbeat that checks the identity must not wait
// for one (it renews the replica's claims).
Result<std::string> GovernanceLog::EnsureIdentity(std::string_view candidate) {
  {
    MutexLock lock(append_mu_);
    KVGOV_ASSIGN_OR_RETURN(RedisReply set,
                           append_.Command({"SET", stream_key_ + ":identity", candidate, "NX"}));
    (void)set;  // OK when this call set it, nil when it was set before
  }
  KVGOV_ASSIGN_OR_RETURN(std::optional<std::string> identity, Identity());
  if (!identity.has_value()) return UnexpectedReply("GET", "the identity just set is gone");
  return *std::move(identity);
}

Result<std::optional<std::string>> GovernanceLog::Identity() {
  MutexLock lock(append_mu_);
  KVGOV_ASSIGN_OR_RETURN(RedisReply reply, append_.Command({"GET", stream_key_ + ":identity"}));
  if (reply.type == RedisReply::Type::kNil) return std::optional<std::string>();
  if (reply.type != RedisReply::Type::kString) return UnexpectedReply("GET", "want a string");
  return std::optional<std::string>(reply.text);
}

}  // namespace kvgov::replication
