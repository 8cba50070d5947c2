#include "replication/redis_values.h"

#include <algorithm>
#include <charconv>
#include <exception>
#include <limits>

namespace kvgov::replication::redis_values {
namespace {

// Entries nest three levels (entry, writes, write); anything much deeper is
// not ours and is refused before it is built.
constexpr int kMaxJsonDepth = 8;
// Bounds on one PeerTotals scan: a keyspace that needs more is either
// shared with far too much else or not Redis.
constexpr size_t kMaxLoadKeys = 65536;
constexpr size_t kMaxScanRounds = size_t{1} << 20;
constexpr size_t kMgetBatch = 100;

// SCAN MATCH treats these as pattern syntax; a prefix is matched literally.
std::string GlobEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace

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
      return FieldError(std::string(name) + "[" + std::to_string(i) + "]", "want [string, string]");
    }
    pairs.emplace_back(pair[0].get<std::string>(), pair[1].get<std::string>());
  }
  return pairs;
}

Status UnexpectedReply(std::string_view command, std::string_view problem) {
  return Status::FailedPrecondition(std::string(command) +
                                    ": unexpected reply: " + std::string(problem));
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

Result<std::set<std::string>> ScanKeys(RedisConnection& connection, const std::string& prefix,
                                       const std::string& skip) {
  const std::string pattern = GlobEscape(prefix) + "*";
  std::set<std::string> keys;  // SCAN may return a key more than once
  std::string cursor = "0";
  size_t rounds = 0;
  do {
    if (++rounds > kMaxScanRounds) {
      return Status::ResourceExhausted("SCAN did not finish in " + std::to_string(kMaxScanRounds) +
                                       " rounds");
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
  args.emplace_back("MGET");
  for (const std::string& key : keys) {
    args.push_back(key);
    if (args.size() - 1 == kMgetBatch) KVGOV_RETURN_IF_ERROR(flush());
  }
  return flush();
}

}  // namespace kvgov::replication::redis_values
