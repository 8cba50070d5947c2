#include "kvgov/replication/governance_log.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "kvgov/core/digest.h"
#include "kvgov/core/utf8.h"

namespace kvgov::replication {
namespace {

using Json = nlohmann::json;

// Entries nest three levels (entry, writes, write); anything much deeper is
// not ours and is refused before it is built.
constexpr int kMaxJsonDepth = 8;
// A load board value is a handful of worker counts.
constexpr size_t kMaxLoadValueBytes = size_t{1} << 20;
// Bounds on one PeerTotals scan: a keyspace that needs more is either
// shared with far too much else or not Redis.
constexpr size_t kMaxLoadKeys = 65536;
constexpr size_t kMaxScanRounds = size_t{1} << 20;
constexpr size_t kMgetBatch = 100;

constexpr std::string_view kColumns[] = {"governance", "tokens"};

// For messages: at most 64 bytes of untrusted text, printable ASCII only,
// so a hostile entry cannot put control bytes into a log line.
std::string Quoted(std::string_view text) {
  std::string out = "'";
  for (char c : text.substr(0, 64)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  if (text.size() > 64) out += "...";
  out += "'";
  return out;
}

Status FieldError(std::string_view path, std::string_view problem) {
  return Status::InvalidArgument(std::string(path) + ": " + std::string(problem));
}

bool KnownColumn(std::string_view column) {
  return std::find(std::begin(kColumns), std::end(kColumns), column) != std::end(kColumns);
}

// Parses untrusted JSON: the caller checks the size first; depth is bounded
// here and a key repeated in one object is refused (nlohmann would keep
// the last silently). Never throws.
Result<Json> ParseBounded(std::string_view text, std::string_view noun) {
  bool too_deep = false;
  std::string repeated;
  std::vector<std::set<std::string>> keys;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (too_deep || !repeated.empty()) return false;
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) {
          too_deep = true;
          return false;
        }
        if (event == Json::parse_event_t::object_start) keys.emplace_back();
        return true;
      case Json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        return true;
      case Json::parse_event_t::key:
        if (!keys.empty() && parsed.is_string() &&
            !keys.back().insert(parsed.get_ref<const std::string&>()).second) {
          repeated = parsed.get_ref<const std::string&>();
          return false;
        }
        return true;
      default:
        return true;
    }
  };
  Json value;
  try {
    value = Json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/false);
  } catch (const std::exception&) {
    // allow_exceptions=false covers syntax errors; this is for anything else
    // nlohmann might throw, which must not leave the module.
    return Status::InvalidArgument(std::string(noun) + ": not valid JSON");
  }
  if (too_deep) {
    return Status::InvalidArgument(std::string(noun) + ": nested deeper than " +
                                   std::to_string(kMaxJsonDepth) + " levels");
  }
  if (!repeated.empty()) return FieldError(Quoted(repeated), "key appears twice in one object");
  if (value.is_discarded()) return Status::InvalidArgument(std::string(noun) + ": not valid JSON");
  return value;
}

Result<std::string> StringField(const Json& object, std::string_view name, std::string_view path) {
  const auto it = object.find(name);
  if (it == object.end()) return FieldError(path, "missing");
  if (!it->is_string()) return FieldError(path, "want a string");
  return it->get_ref<const std::string&>();
}

Result<int64_t> IntegerField(const Json& object, std::string_view name, std::string_view path) {
  const auto it = object.find(name);
  if (it == object.end()) return FieldError(path, "missing");
  if (it->is_number_unsigned()) {
    const auto value = it->get<uint64_t>();
    if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return FieldError(path, "out of range for a signed 64-bit integer");
    }
    return static_cast<int64_t>(value);
  }
  if (it->is_number_integer()) return it->get<int64_t>();
  return FieldError(path, "want an integer");
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
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           c == '-' || c == '_' || c == '.';
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

Status UnexpectedReply(std::string_view command, std::string_view problem) {
  return Status::FailedPrecondition(std::string(command) +
                                    ": unexpected reply: " + std::string(problem));
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

bool ParseUint64(std::string_view text, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  if (!std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

Result<bool> IntegerAsBool(const Result<RedisReply>& reply, std::string_view command) {
  if (!reply.ok()) return reply.status();
  if (reply->type != RedisReply::Type::kInteger) return UnexpectedReply(command, "want an integer");
  return reply->integer == 1;
}

Status CheckTtl(std::chrono::milliseconds ttl) {
  if (ttl.count() < 1) return Status::InvalidArgument("ttl: want at least 1 ms");
  return Status::Ok();
}

// SCAN MATCH treats these as pattern syntax; a prefix is matched literally.
std::string GlobEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// A peer's published load, or nullopt when it is not what Publish writes.
std::optional<std::map<std::string, uint64_t, std::less<>>> DecodeLoad(std::string_view text) {
  if (text.size() > kMaxLoadValueBytes) return std::nullopt;
  Result<Json> parsed = ParseBounded(text, "load");
  if (!parsed.ok() || !parsed->is_object()) return std::nullopt;
  std::map<std::string, uint64_t, std::less<>> load;
  for (const auto& [worker, blocks] : parsed->items()) {
    if (!blocks.is_number_unsigned()) return std::nullopt;
    load[worker] = blocks.get<uint64_t>();
  }
  return load;
}

// Claim scripts: each compares the holder with the caller before it
// touches the key, atomically, so a replica whose claim lapsed and was
// taken by another never extends or drops the new holder's claim.
constexpr std::string_view kAcquireScript = R"lua(
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
)lua";

constexpr std::string_view kRenewScript = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
)lua";

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

constexpr size_t kSnapshotChunkBytes = size_t{1} << 20;
constexpr size_t kMaxManifestBytes = 4096;

// SCAN MATCH of `prefix*` until the cursor is 0, leaving out `skip`; each
// key once, bounded.
Result<std::set<std::string>> ScanKeys(RedisConnection& connection, const std::string& prefix,
                                       const std::string& skip) {
  const std::string pattern = GlobEscape(prefix) + "*";
  std::set<std::string> keys;  // SCAN may return a key more than once
  std::string cursor = "0";
  size_t rounds = 0;
  do {
    if (++rounds > kMaxScanRounds) {
      return Status::ResourceExhausted("SCAN did not finish in " +
                                       std::to_string(kMaxScanRounds) + " rounds");
    }
    KVGOV_ASSIGN_OR_RETURN(RedisReply reply,
                           connection.Command({"SCAN", cursor, "MATCH", pattern, "COUNT", "100"}));
    uint64_t unused = 0;
    if (reply.type != RedisReply::Type::kArray || reply.elements.size() != 2 ||
        reply.elements[0].type != RedisReply::Type::kString ||
        !ParseUint64(reply.elements[0].text, &unused) ||
        reply.elements[1].type != RedisReply::Type::kArray) {
      return UnexpectedReply("SCAN", "want [cursor, keys]");
    }
    cursor = reply.elements[0].text;
    for (RedisReply& key : reply.elements[1].elements) {
      if (key.type != RedisReply::Type::kString) return UnexpectedReply("SCAN", "want key strings");
      if (key.text == skip || !key.text.starts_with(prefix)) continue;
      keys.insert(std::move(key.text));
      if (keys.size() > kMaxLoadKeys) {
        return Status::ResourceExhausted("more than " + std::to_string(kMaxLoadKeys) +
                                         " keys under " + Quoted(prefix));
      }
    }
  } while (cursor != "0");
  return keys;
}

// MGET of `keys` in batches; `each` gets every string value (a key that
// expired in between answers nil and is left out).
Status MgetEach(RedisConnection& connection, const std::set<std::string>& keys,
                const std::function<void(const std::string&)>& each) {
  std::vector<std::string> args;
  auto flush = [&]() -> Status {
    if (args.size() <= 1) return Status::Ok();
    const size_t asked = args.size() - 1;
    KVGOV_ASSIGN_OR_RETURN(RedisReply reply, connection.Command(args));
    args.resize(1);
    if (reply.type != RedisReply::Type::kArray || reply.elements.size() != asked) {
      return UnexpectedReply("MGET", "want one value per key");
    }
    for (const RedisReply& value : reply.elements) {
      if (value.type == RedisReply::Type::kString) each(value.text);
    }
    return Status::Ok();
  };
  args.push_back("MGET");
  for (const std::string& key : keys) {
    args.push_back(key);
    if (args.size() - 1 == kMgetBatch) KVGOV_RETURN_IF_ERROR(flush());
  }
  return flush();
}

Result<std::vector<std::pair<std::string, std::string>>> StringPairs(const Json& object,
                                                                     std::string_view name) {
  const auto it = object.find(name);
  if (it == object.end()) return FieldError(name, "missing");
  if (!it->is_array()) return FieldError(name, "want an array of [string, string]");
  std::vector<std::pair<std::string, std::string>> pairs;
  pairs.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& pair = (*it)[i];
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) {
      return FieldError(std::string(name) + "[" + std::to_string(i) + "]",
                        "want [string, string]");
    }
    pairs.emplace_back(pair[0].get<std::string>(), pair[1].get<std::string>());
  }
  return pairs;
}

constexpr std::string_view kReleaseScript = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
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
    return FieldError("v", "version " + std::to_string(version) +
                               " is not supported (want 1 to " +
                               std::to_string(kLogEntryVersion) + ")");
  }
  // Version 2 is version 3 without the write id, version 1 version 2
  // without the actor.
  static constexpr std::string_view kFields[] = {"v",       "write_id", "origin",  "actor",
                                                 "kind",    "subject",  "payload", "time_ms",
                                                 "writes"};
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
    std::lock_guard<std::mutex> lock(append_mu_);
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
    args.push_back("BLOCK");
    args.push_back(std::to_string(block.count()));
  }
  args.push_back("STREAMS");
  args.push_back(stream_key_);
  args.push_back(std::string(after_id));

  Result<RedisReply> reply = [&] {
    std::lock_guard<std::mutex> lock(read_mu_);
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
    std::lock_guard<std::mutex> lock(read_mu_);
    return read_.Command(args);
  }();
  if (!reply.ok()) return reply.status();
  KVGOV_ASSIGN_OR_RETURN(std::vector<RawEntry> raw, ParseEntries(*reply, "XREVRANGE"));
  if (raw.empty()) return std::string("0-0");
  return std::move(raw.front().id);
}

Result<bool> GovernanceLog::TrimBelow(const StreamId& below) {
  const std::string args[] = {"EVAL", std::string(kTrimScript), "2", stream_key_,
                              stream_key_ + ":trimmed", below.ToString()};
  std::lock_guard<std::mutex> lock(append_mu_);
  return IntegerAsBool(append_.Command(args), "EVAL");
}

Result<std::optional<StreamId>> GovernanceLog::TrimmedBelow() {
  std::lock_guard<std::mutex> lock(read_mu_);
  KVGOV_ASSIGN_OR_RETURN(RedisReply reply, read_.Command({"GET", stream_key_ + ":trimmed"}));
  if (reply.type == RedisReply::Type::kNil) return std::optional<StreamId>();
  if (reply.type != RedisReply::Type::kString) return UnexpectedReply("GET", "want a string");
  KVGOV_ASSIGN_OR_RETURN(StreamId mark, ParseStreamId(reply.text));
  return std::optional<StreamId>(mark);
}

Result<uint64_t> GovernanceLog::Length() {
  std::lock_guard<std::mutex> lock(read_mu_);
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
    std::lock_guard<std::mutex> lock(append_mu_);
    KVGOV_ASSIGN_OR_RETURN(RedisReply set, append_.Command({"SET", stream_key_ + ":identity",
                                                            candidate, "NX"}));
    (void)set;  // OK when this call set it, nil when it was set before
  }
  KVGOV_ASSIGN_OR_RETURN(std::optional<std::string> identity, Identity());
  if (!identity.has_value()) return UnexpectedReply("GET", "the identity just set is gone");
  return *std::move(identity);
}

Result<std::optional<std::string>> GovernanceLog::Identity() {
  std::lock_guard<std::mutex> lock(append_mu_);
  KVGOV_ASSIGN_OR_RETURN(RedisReply reply, append_.Command({"GET", stream_key_ + ":identity"}));
  if (reply.type == RedisReply::Type::kNil) return std::optional<std::string>();
  if (reply.type != RedisReply::Type::kString) return UnexpectedReply("GET", "want a string");
  return std::optional<std::string>(reply.text);
}

ClaimStore::ClaimStore(const RedisEndpoint& endpoint, std::string key_prefix,
                       std::chrono::milliseconds timeout)
    : prefix_(std::move(key_prefix)), connection_(endpoint, timeout) {}

Result<bool> ClaimStore::Acquire(std::string_view name, std::string_view owner,
                                 std::chrono::milliseconds ttl) {
  KVGOV_RETURN_IF_ERROR(CheckTtl(ttl));
  if (owner.empty()) return Status::InvalidArgument("owner: empty");
  const std::string key = prefix_ + std::string(name);
  const std::string ttl_text = std::to_string(ttl.count());
  std::lock_guard<std::mutex> lock(mu_);
  // The common case, a free claim, takes one plain command; the script is
  // for a claim that is held, possibly by `owner` itself.
  KVGOV_ASSIGN_OR_RETURN(RedisReply set,
                         connection_.Command({"SET", key, owner, "NX", "PX", ttl_text}));
  if (set.type == RedisReply::Type::kStatus && set.text == "OK") return true;
  if (set.type != RedisReply::Type::kNil) return UnexpectedReply("SET", "want OK or nil");
  return IntegerAsBool(connection_.Command({"EVAL", kAcquireScript, "1", key, owner, ttl_text}),
                       "EVAL");
}

Result<bool> ClaimStore::Renew(std::string_view name, std::string_view owner,
                               std::chrono::milliseconds ttl) {
  KVGOV_RETURN_IF_ERROR(CheckTtl(ttl));
  const std::string key = prefix_ + std::string(name);
  const std::string ttl_text = std::to_string(ttl.count());
  std::lock_guard<std::mutex> lock(mu_);
  return IntegerAsBool(connection_.Command({"EVAL", kRenewScript, "1", key, owner, ttl_text}),
                       "EVAL");
}

Status ClaimStore::Release(std::string_view name, std::string_view owner) {
  const std::string key = prefix_ + std::string(name);
  std::lock_guard<std::mutex> lock(mu_);
  return IntegerAsBool(connection_.Command({"EVAL", kReleaseScript, "1", key, owner}), "EVAL")
      .status();
}

Result<std::optional<std::string>> ClaimStore::Holder(std::string_view name) {
  const std::string key = prefix_ + std::string(name);
  std::lock_guard<std::mutex> lock(mu_);
  KVGOV_ASSIGN_OR_RETURN(RedisReply reply, connection_.Command({"GET", key}));
  if (reply.type == RedisReply::Type::kNil) return std::optional<std::string>();
  if (reply.type != RedisReply::Type::kString)
    return UnexpectedReply("GET", "want a string or nil");
  return std::optional<std::string>(std::move(reply.text));
}

LoadBoard::LoadBoard(const RedisEndpoint& endpoint, std::string key_prefix, std::string replica_id,
                     std::chrono::milliseconds ttl, std::chrono::milliseconds timeout)
    : prefix_(std::move(key_prefix)),
      replica_id_(std::move(replica_id)),
      ttl_(ttl),
      connection_(endpoint, timeout) {}

Status LoadBoard::Publish(const std::map<std::string, uint64_t, std::less<>>& blocks_by_worker) {
  KVGOV_RETURN_IF_ERROR(CheckTtl(ttl_));
  Json object = Json::object();
  for (const auto& [worker, blocks] : blocks_by_worker) {
    if (!IsValidUtf8(worker)) {
      return FieldError("worker " + Quoted(worker), "not valid UTF-8");
    }
    object[worker] = blocks;
  }
  const std::string args[] = {"SET", prefix_ + replica_id_, object.dump(), "PX",
                              std::to_string(ttl_.count())};
  std::lock_guard<std::mutex> lock(mu_);
  KVGOV_ASSIGN_OR_RETURN(RedisReply reply, connection_.Command(args));
  if (reply.type != RedisReply::Type::kStatus || reply.text != "OK") {
    return UnexpectedReply("SET", "want OK");
  }
  return Status::Ok();
}

Result<std::map<std::string, uint64_t, std::less<>>> LoadBoard::PeerTotals() {
  std::lock_guard<std::mutex> lock(mu_);
  KVGOV_ASSIGN_OR_RETURN(std::set<std::string> keys,
                         ScanKeys(connection_, prefix_, prefix_ + replica_id_));
  std::map<std::string, uint64_t, std::less<>> totals;
  KVGOV_RETURN_IF_ERROR(MgetEach(connection_, keys, [&](const std::string& value) {
    const auto load = DecodeLoad(value);
    if (!load.has_value()) return;
    for (const auto& [worker, blocks] : *load) {
      uint64_t& total = totals[worker];
      total = blocks > std::numeric_limits<uint64_t>::max() - total
                  ? std::numeric_limits<uint64_t>::max()
                  : total + blocks;
    }
  }));
  return totals;
}

AppliedBoard::AppliedBoard(const RedisEndpoint& endpoint, std::string key_prefix,
                           std::string replica_id, std::chrono::milliseconds ttl,
                           std::chrono::milliseconds timeout)
    : prefix_(std::move(key_prefix)),
      replica_id_(std::move(replica_id)),
      ttl_(ttl),
      connection_(endpoint, timeout) {}

Status AppliedBoard::Publish(const StreamId& applied) {
  KVGOV_RETURN_IF_ERROR(CheckTtl(ttl_));
  std::lock_guard<std::mutex> lock(mu_);
  KVGOV_ASSIGN_OR_RETURN(RedisReply reply,
                         connection_.Command({"SET", prefix_ + replica_id_, applied.ToString(),
                                              "PX", std::to_string(ttl_.count())}));
  if (reply.type != RedisReply::Type::kStatus || reply.text != "OK") {
    return UnexpectedReply("SET", "want OK");
  }
  return Status::Ok();
}

Result<std::optional<StreamId>> AppliedBoard::Lowest() {
  std::lock_guard<std::mutex> lock(mu_);
  KVGOV_ASSIGN_OR_RETURN(std::set<std::string> keys, ScanKeys(connection_, prefix_, ""));
  std::optional<StreamId> lowest;
  KVGOV_RETURN_IF_ERROR(MgetEach(connection_, keys, [&](const std::string& value) {
    // A value that is not an id is not a replica's: it holds nothing back.
    Result<StreamId> id = ParseStreamId(value);
    if (id.ok() && (!lowest || *id < *lowest)) lowest = *id;
  }));
  return lowest;
}

std::string EncodeSnapshot(const GovernanceSnapshot& snapshot) {
  nlohmann::ordered_json object;
  object["v"] = 1;
  object["id"] = snapshot.id;
  object["journal"] = {{"seq", snapshot.journal_seq}, {"hash", snapshot.journal_hash}};
  auto pairs = [](const std::vector<std::pair<std::string, std::string>>& items) {
    nlohmann::ordered_json array = nlohmann::ordered_json::array();
    for (const auto& [key, value] : items) array.push_back({key, value});
    return array;
  };
  object["governance"] = pairs(snapshot.governance);
  object["tokens"] = pairs(snapshot.tokens);
  object["write_ids"] = pairs(snapshot.write_ids);
  return object.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

Result<GovernanceSnapshot> DecodeSnapshot(std::string_view bytes) {
  if (bytes.size() > kMaxSnapshotBytes) {
    return Status::InvalidArgument("snapshot: " + std::to_string(bytes.size()) +
                                   " bytes, over the limit of " +
                                   std::to_string(kMaxSnapshotBytes));
  }
  KVGOV_ASSIGN_OR_RETURN(Json value, ParseBounded(bytes, "snapshot"));
  if (!value.is_object()) return FieldError("snapshot", "want an object");
  for (const auto& [key, unused] : value.items()) {
    if (key != "v" && key != "id" && key != "journal" && key != "governance" && key != "tokens" &&
        key != "write_ids") {
      return FieldError(Quoted(key), "unknown field");
    }
  }
  KVGOV_ASSIGN_OR_RETURN(int64_t version, IntegerField(value, "v", "v"));
  if (version != 1) {
    return FieldError("v", "version " + std::to_string(version) + " is not supported (want 1)");
  }
  GovernanceSnapshot snapshot;
  KVGOV_ASSIGN_OR_RETURN(snapshot.id, StringField(value, "id", "id"));
  KVGOV_RETURN_IF_ERROR(ParseStreamId(snapshot.id).status().WithContext("id"));
  const auto journal = value.find("journal");
  if (journal == value.end() || !journal->is_object()) return FieldError("journal", "want an object");
  KVGOV_ASSIGN_OR_RETURN(int64_t seq, IntegerField(*journal, "seq", "journal.seq"));
  if (seq < 0) return FieldError("journal.seq", "negative");
  snapshot.journal_seq = static_cast<uint64_t>(seq);
  KVGOV_ASSIGN_OR_RETURN(snapshot.journal_hash, StringField(*journal, "hash", "journal.hash"));
  KVGOV_ASSIGN_OR_RETURN(snapshot.governance, StringPairs(value, "governance"));
  KVGOV_ASSIGN_OR_RETURN(snapshot.tokens, StringPairs(value, "tokens"));
  KVGOV_ASSIGN_OR_RETURN(snapshot.write_ids, StringPairs(value, "write_ids"));
  return snapshot;
}

SnapshotStore::SnapshotStore(const RedisEndpoint& endpoint, std::string key_prefix,
                             std::chrono::milliseconds timeout)
    : prefix_(std::move(key_prefix)), connection_(endpoint, timeout) {}

namespace {

struct SnapshotManifest {
  std::string id;
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  std::string sha256;
};

Result<std::optional<SnapshotManifest>> ReadManifest(RedisConnection& connection,
                                                     const std::string& key) {
  KVGOV_ASSIGN_OR_RETURN(RedisReply reply, connection.Command({"GET", key}));
  if (reply.type == RedisReply::Type::kNil) return std::optional<SnapshotManifest>();
  if (reply.type != RedisReply::Type::kString) return UnexpectedReply("GET", "want a string");
  if (reply.text.size() > kMaxManifestBytes) return FieldError("snapshot manifest", "too long");
  KVGOV_ASSIGN_OR_RETURN(Json json, ParseBounded(reply.text, "snapshot manifest"));
  if (!json.is_object()) return FieldError("snapshot manifest", "want an object");
  SnapshotManifest manifest;
  KVGOV_ASSIGN_OR_RETURN(manifest.id, StringField(json, "id", "snapshot manifest.id"));
  KVGOV_RETURN_IF_ERROR(ParseStreamId(manifest.id).status().WithContext("snapshot manifest.id"));
  KVGOV_ASSIGN_OR_RETURN(int64_t chunks, IntegerField(json, "chunks", "snapshot manifest.chunks"));
  KVGOV_ASSIGN_OR_RETURN(int64_t bytes, IntegerField(json, "bytes", "snapshot manifest.bytes"));
  if (bytes < 0 || static_cast<uint64_t>(bytes) > kMaxSnapshotBytes) {
    return FieldError("snapshot manifest.bytes", "out of range");
  }
  const uint64_t needed = (static_cast<uint64_t>(bytes) + kSnapshotChunkBytes - 1) /
                          kSnapshotChunkBytes;
  if (chunks < 0 || static_cast<uint64_t>(chunks) != needed) {
    return FieldError("snapshot manifest.chunks", "does not match its bytes");
  }
  manifest.chunks = static_cast<uint64_t>(chunks);
  manifest.bytes = static_cast<uint64_t>(bytes);
  KVGOV_ASSIGN_OR_RETURN(manifest.sha256, StringField(json, "sha256", "snapshot manifest.sha256"));
  return std::optional<SnapshotManifest>(std::move(manifest));
}

std::string ChunkKey(const std::string& prefix, const std::string& id, uint64_t n) {
  return prefix + ":" + id + ":" + std::to_string(n);
}

}  // namespace

Status SnapshotStore::Put(const GovernanceSnapshot& snapshot) {
  const std::string encoded = EncodeSnapshot(snapshot);
  if (encoded.size() > kMaxSnapshotBytes) {
    return Status::InvalidArgument("snapshot: " + std::to_string(encoded.size()) +
                                   " bytes encoded, over the limit of " +
                                   std::to_string(kMaxSnapshotBytes));
  }
  std::lock_guard<std::mutex> lock(mu_);
  Result<std::optional<SnapshotManifest>> previous = ReadManifest(connection_, prefix_);
  const uint64_t chunks = (encoded.size() + kSnapshotChunkBytes - 1) / kSnapshotChunkBytes;
  for (uint64_t n = 0; n < chunks; ++n) {
    const std::string args[] = {"SET", ChunkKey(prefix_, snapshot.id, n),
                                encoded.substr(n * kSnapshotChunkBytes, kSnapshotChunkBytes)};
    KVGOV_ASSIGN_OR_RETURN(RedisReply reply, connection_.Command(args));
    if (reply.type != RedisReply::Type::kStatus) return UnexpectedReply("SET", "want OK");
  }
  const Json manifest = {{"id", snapshot.id},
                         {"chunks", chunks},
                         {"bytes", encoded.size()},
                         {"sha256", Sha256Hex(encoded)}};
  KVGOV_ASSIGN_OR_RETURN(RedisReply set, connection_.Command({"SET", prefix_, manifest.dump()}));
  if (set.type != RedisReply::Type::kStatus) return UnexpectedReply("SET", "want OK");
  // The old chunks go after the switch; a reader still on them sees a
  // mismatch and reads the new manifest.
  if (previous.ok() && previous->has_value() && (*previous)->id != snapshot.id) {
    for (uint64_t n = 0; n < (*previous)->chunks; ++n) {
      (void)connection_.Command({"DEL", ChunkKey(prefix_, (*previous)->id, n)});
    }
  }
  return Status::Ok();
}

Result<std::optional<GovernanceSnapshot>> SnapshotStore::Get() {
  std::lock_guard<std::mutex> lock(mu_);
  KVGOV_ASSIGN_OR_RETURN(std::optional<SnapshotManifest> manifest,
                         ReadManifest(connection_, prefix_));
  if (!manifest.has_value()) return std::optional<GovernanceSnapshot>();
  std::string encoded;
  encoded.reserve(manifest->bytes);
  for (uint64_t n = 0; n < manifest->chunks; ++n) {
    KVGOV_ASSIGN_OR_RETURN(RedisReply chunk,
                           connection_.Command({"GET", ChunkKey(prefix_, manifest->id, n)}));
    if (chunk.type != RedisReply::Type::kString ||
        chunk.text.size() > manifest->bytes - encoded.size()) {
      return Status::Unavailable("snapshot " + manifest->id + ": chunk " + std::to_string(n) +
                                 " is missing or too long (replaced while read)");
    }
    encoded += chunk.text;
  }
  if (encoded.size() != manifest->bytes || Sha256Hex(encoded) != manifest->sha256) {
    return Status::Unavailable("snapshot " + manifest->id +
                               ": chunks do not match the manifest (replaced while read)");
  }
  KVGOV_ASSIGN_OR_RETURN(GovernanceSnapshot snapshot, DecodeSnapshot(encoded));
  if (snapshot.id != manifest->id) {
    return Status::InvalidArgument("snapshot: id " + Quoted(snapshot.id) +
                                   " is not the manifest's " + Quoted(manifest->id));
  }
  return std::optional<GovernanceSnapshot>(std::move(snapshot));
}

}  // namespace kvgov::replication
