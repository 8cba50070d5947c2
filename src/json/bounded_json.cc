#include "json/bounded_json.h"

#include <set>
#include <utility>
#include <vector>

namespace kvgov::json_internal {
namespace {

bool IsIdentifier(std::string_view key) {
  if (key.empty()) return false;
  for (std::size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// nlohmann's what() reads "[json.exception.parse_error.101] parse error at
// line 1, column 7: ...; last read: '<input bytes>'; expected ...". The id
// means nothing to a reporter, and the echoed input may be invalid UTF-8
// that would break whoever puts this message in a JSON error body, so both
// go, and any byte left outside printable ASCII becomes '?'.
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

// Thrown out of the parser callback to stop parsing at once; caught in
// ParseJson and never seen outside it.
struct Reject {
  Status status;
};

// Parser callback state. nlohmann reports structure only as start/end/key/
// value events, so this keeps the stack of open containers itself: it gives
// the depth, per-array item counts, per-object key sets, and the path of
// the value being parsed for the error message.
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
    std::size_t items = 0;       // arrays: elements seen so far
    std::string key;             // objects: the key being parsed
    std::set<std::string> keys;  // objects: every key seen
  };

  void CountItem() {
    if (frames_.empty() || !frames_.back().array) return;
    if (++frames_.back().items > limits_.max_array_items) {
      throw Reject{Status::ResourceExhausted(Path(frames_.size() - 1) + ": array has more than " +
                                             std::to_string(limits_.max_array_items) + " items")};
    }
  }

  // The path of the value inside the first `depth` open containers.
  std::string Path(std::size_t depth) const {
    std::string path = "$";
    for (std::size_t i = 0; i < depth; ++i) {
      const Frame& frame = frames_[i];
      path = frame.array ? IndexPath(path, frame.items - 1) : ChildPath(path, frame.key);
    }
    return path;
  }

  const ParseLimits& limits_;
  std::vector<Frame> frames_;
};

}  // namespace

Result<Json> ParseJson(std::string_view text, const ParseLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return Status::ResourceExhausted("$: " + std::string(limits.noun) + " is " +
                                     std::to_string(text.size()) + " bytes, over the limit of " +
                                     std::to_string(limits.max_bytes));
  }
  // nlohmann's lexer takes a NUL byte for the end of the input and ignores
  // whatever follows it; JSON allows no raw NUL anywhere (in a string it
  // must be escaped), so a body with one is refused whole.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return PathError("$", "malformed JSON: a NUL byte at offset " + std::to_string(nul));
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
  constexpr std::size_t kMaxEcho = 64;
  path += "[\"";
  for (std::size_t i = 0; i < key.size() && i < kMaxEcho; ++i) {
    const char c = key[i];
    if (c == '"' || c == '\\') path += '\\';
    path += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (key.size() > kMaxEcho) path += "...";
  path += "\"]";
  return path;
}

std::string IndexPath(std::string_view parent, std::size_t index) {
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

}  // namespace kvgov::json_internal
