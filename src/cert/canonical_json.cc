#include "cert/canonical_json.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "kvgov/core/json_string.h"

namespace kvgov::cert_internal {
namespace {

bool IsIdentifier(std::string_view key) {
  if (key.empty()) return false;
  for (size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// Length of the valid UTF-8 sequence starting at text[at], or 0 when the
// bytes there are not one (RFC 3629: no overlong forms, no surrogates, no
// code point past U+10FFFF).
size_t Utf8SequenceLength(std::string_view text, size_t at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char low = 0x80;  // bounds of the second byte
  unsigned char high = 0xbf;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;   // overlong
    if (lead == 0xed) high = 0x9f;  // surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;   // overlong
    if (lead == 0xf4) high = 0x8f;  // past U+10FFFF
  } else {
    return 0;
  }
  if (text.size() - at < length) return 0;
  if (byte(at + 1) < low || byte(at + 1) > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(at + i) < 0x80 || byte(at + i) > 0xbf) return 0;
  }
  return length;
}

Status Canonicalize(const Json& value, const std::string& path, std::string& out) {
  switch (value.type()) {
    case Json::value_t::object: {
      std::vector<std::pair<std::string_view, const Json*>> members;
      members.reserve(value.size());
      for (auto it = value.begin(); it != value.end(); ++it) {
        const std::string& key = it.key();
        for (const char c : key) {
          if (static_cast<unsigned char>(c) >= 0x80) {
            return PathError(ChildPath(path, key),
                             "key is not ASCII (canonical keys must sort by byte order)");
          }
        }
        members.emplace_back(key, &it.value());
      }
      // For ASCII keys, UTF-16 code-unit order (RFC 8785 section 3.2.3) is
      // byte order.
      std::sort(members.begin(), members.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      out.push_back('{');
      for (size_t i = 0; i < members.size(); ++i) {
        if (i > 0) out.push_back(',');
        KVGOV_RETURN_IF_ERROR(AppendCanonicalString(members[i].first, out));
        out.push_back(':');
        KVGOV_RETURN_IF_ERROR(
            Canonicalize(*members[i].second, ChildPath(path, members[i].first), out));
      }
      out.push_back('}');
      return Status::Ok();
    }
    case Json::value_t::array:
      out.push_back('[');
      for (size_t i = 0; i < value.size(); ++i) {
        if (i > 0) out.push_back(',');
        KVGOV_RETURN_IF_ERROR(Canonicalize(value[i], IndexPath(path, i), out));
      }
      out.push_back(']');
      return Status::Ok();
    case Json::value_t::string: {
      Status status = AppendCanonicalString(value.get_ref<const std::string&>(), out);
      return status.ok() ? status : PathError(path, status.message());
    }
    case Json::value_t::boolean:
      out += value.get<bool>() ? "true" : "false";
      return Status::Ok();
    case Json::value_t::number_unsigned: {
      const auto number = value.get<uint64_t>();
      if (number > kMaxSafeInteger) {
        return PathError(path, "integer " + std::to_string(number) + " is over 2^53-1");
      }
      out += std::to_string(number);
      return Status::Ok();
    }
    case Json::value_t::number_integer: {
      const auto number = value.get<int64_t>();
      // Compare magnitudes without negating INT64_MIN.
      const uint64_t magnitude =
          number < 0 ? uint64_t{0} - static_cast<uint64_t>(number) : static_cast<uint64_t>(number);
      if (magnitude > kMaxSafeInteger) {
        return PathError(path, "integer " + std::to_string(number) + " is outside +-(2^53-1)");
      }
      out += std::to_string(number);
      return Status::Ok();
    }
    case Json::value_t::number_float:
      return PathError(path, "floats have no canonical form here; want an integer");
    case Json::value_t::null:
      return PathError(path, "null is not part of the signed value space");
    case Json::value_t::binary:
    case Json::value_t::discarded:
      break;
  }
  return PathError(path, "value has no JSON form");
}

// nlohmann's what() reads "[json.exception.parse_error.101] parse error at
// line 1, column 7: ...; last read: '<input>'; expected ...". The echoed
// input may be invalid UTF-8 or a control character, so it goes, and any
// byte left outside printable ASCII becomes '?'.
std::string ParseErrorText(std::string_view what) {
  if (const auto end = what.find("] "); end != std::string_view::npos) what.remove_prefix(end + 2);
  std::string text(what);
  if (const auto start = text.find("; last read: "); start != std::string::npos) {
    const auto stop = text.find("; expected", start);
    text.erase(start, stop == std::string::npos ? std::string::npos : stop - start);
  }
  for (char& c : text) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return text;
}

// Thrown out of the parser callback to stop at once; caught in ParseJson.
struct Reject {
  Status status;
};

// Tracks the open containers while nlohmann parses, for the depth limit,
// duplicate keys, and the path of the value being parsed.
class ParseGuard {
 public:
  explicit ParseGuard(const ParseLimits& limits) : limits_(limits) {}

  bool operator()(Json::parse_event_t event, const Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        CountItem();
        if (frames_.size() >= limits_.max_depth) {
          throw Reject{Status::ResourceExhausted(Path(frames_.size()) + ": nesting deeper than " +
                                                 std::to_string(limits_.max_depth))};
        }
        frames_.emplace_back().array = event == Json::parse_event_t::array_start;
        break;
      case Json::parse_event_t::key: {
        Frame& frame = frames_.back();
        frame.key = parsed.get<std::string>();
        if (!frame.keys.insert(frame.key).second) {
          throw Reject{PathError(Path(frames_.size()), "duplicate key")};
        }
        break;
      }
      case Json::parse_event_t::value:
        CountItem();
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        frames_.pop_back();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool array = false;
    size_t items = 0;            // arrays: elements seen so far
    std::string key;             // objects: the key being parsed
    std::set<std::string> keys;  // objects: every key seen
  };

  void CountItem() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().items;
  }

  std::string Path(size_t depth) const {
    std::string path = "$";
    for (size_t i = 0; i < depth; ++i) {
      const Frame& frame = frames_[i];
      path = frame.array ? IndexPath(path, frame.items - 1) : ChildPath(path, frame.key);
    }
    return path;
  }

  const ParseLimits& limits_;
  std::vector<Frame> frames_;
};

}  // namespace

Status AppendCanonicalString(std::string_view text, std::string& out) {
  // RFC 8785 escapes only what JSON requires; everything else, UTF-8
  // included, is copied. So the one check left here is that it is UTF-8.
  for (size_t at = 0; at < text.size();) {
    if (static_cast<unsigned char>(text[at]) < 0x80) {
      ++at;
      continue;
    }
    const size_t length = Utf8SequenceLength(text, at);
    if (length == 0) return Status::InvalidArgument("invalid UTF-8 at byte " + std::to_string(at));
    at += length;
  }
  AppendJsonString(out, text);
  return Status::Ok();
}

Result<std::string> CanonicalJson(const Json& value) {
  std::string out;
  KVGOV_RETURN_IF_ERROR(Canonicalize(value, "$", out));
  return out;
}

Result<Json> ParseJson(std::string_view text, const ParseLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return Status::ResourceExhausted("$: document is " + std::to_string(text.size()) +
                                     " bytes, over the limit of " +
                                     std::to_string(limits.max_bytes));
  }
  ParseGuard guard(limits);
  try {
    return Json::parse(text.begin(), text.end(),
                       [&guard](int /*depth*/, Json::parse_event_t event, Json& parsed) {
                         return guard(event, parsed);
                       });
  } catch (const Reject& reject) {
    return reject.status;
  } catch (const Json::exception& e) {
    return PathError("$", "malformed JSON: " + ParseErrorText(e.what()));
  }
}

std::string ChildPath(std::string_view parent, std::string_view key) {
  std::string path(parent);
  if (IsIdentifier(key)) {
    path += '.';
    path += key;
    return path;
  }
  // An untrusted key goes into an error message: printable ASCII only, at
  // most 64 bytes of it.
  constexpr size_t kMaxEcho = 64;
  path += "[\"";
  for (size_t i = 0; i < key.size() && i < kMaxEcho; ++i) {
    const char c = key[i];
    if (c == '"' || c == '\\') path += '\\';
    path += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (key.size() > kMaxEcho) path += "...";
  path += "\"]";
  return path;
}

std::string IndexPath(std::string_view parent, size_t index) {
  std::string path(parent);
  path += '[';
  path += std::to_string(index);
  path += ']';
  return path;
}

Status PathError(std::string_view path, std::string_view problem) {
  std::string message(path);
  message += ": ";
  message += problem;
  return Status::InvalidArgument(std::move(message));
}

}  // namespace kvgov::cert_internal
