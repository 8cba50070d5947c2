#include "kvgov/prompts/prompt_lint.h"

#include <algorithm>
#include <map>
#include <optional>

namespace kvgov::prompts {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool IsAlnum(char c) { return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Digits at [at, at+n) as a number; nullopt when any is not a digit.
std::optional<int> Number(std::string_view text, size_t at, size_t n) {
  if (at + n > text.size()) return std::nullopt;
  int value = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (!IsDigit(text[i])) return std::nullopt;
    value = value * 10 + (text[i] - '0');
  }
  return value;
}

bool EndsWord(std::string_view text, size_t at) { return at >= text.size() || !IsAlnum(text[at]); }

// 8-4-4-4-12 hex digits.
size_t MatchUuid(std::string_view text, size_t at) {
  static constexpr size_t kGroups[] = {8, 4, 4, 4, 12};
  size_t i = at;
  for (size_t g = 0; g < 5; ++g) {
    if (g > 0) {
      if (i >= text.size() || text[i] != '-') return 0;
      ++i;
    }
    for (size_t n = 0; n < kGroups[g]; ++n, ++i) {
      if (i >= text.size() || !IsHex(text[i])) return 0;
    }
  }
  return EndsWord(text, i) ? i - at : 0;
}

// YYYY-MM-DD or YYYY/MM/DD, 1900..2099.
size_t MatchDate(std::string_view text, size_t at) {
  const std::optional<int> year = Number(text, at, 4);
  if (!year || *year < 1900 || *year > 2099 || at + 10 > text.size()) return 0;
  const char separator = text[at + 4];
  if ((separator != '-' && separator != '/') || text[at + 7] != separator) return 0;
  const std::optional<int> month = Number(text, at + 5, 2);
  const std::optional<int> day = Number(text, at + 8, 2);
  if (!month || !day || *month < 1 || *month > 12 || *day < 1 || *day > 31) return 0;
  return IsDigit(at + 10 < text.size() ? text[at + 10] : ' ') ? 0 : 10;
}

// H:MM or HH:MM, then :SS and a fraction if there.
size_t MatchTime(std::string_view text, size_t at) {
  size_t hour_digits = 0;
  while (hour_digits < 2 && at + hour_digits < text.size() && IsDigit(text[at + hour_digits])) {
    ++hour_digits;
  }
  const std::optional<int> hour = Number(text, at, hour_digits == 0 ? 1 : hour_digits);
  size_t i = at + hour_digits;
  if (!hour || *hour > 23 || i >= text.size() || text[i] != ':') return 0;
  const std::optional<int> minute = Number(text, i + 1, 2);
  if (!minute || *minute > 59) return 0;
  i += 3;
  if (i < text.size() && text[i] == ':') {
    const std::optional<int> second = Number(text, i + 1, 2);
    if (!second || *second > 60) return 0;
    i += 3;
    if (i + 1 < text.size() && text[i] == '.' && IsDigit(text[i + 1])) {
      for (++i; i < text.size() && IsDigit(text[i]); ++i) {
      }
    }
  }
  return i < text.size() && IsDigit(text[i]) ? 0 : i - at;
}

// A whole run of digits, 10 or 13 long, starting with 1: Unix seconds or
// milliseconds of 2001-2033.
size_t MatchUnixTime(std::string_view text, size_t at) {
  size_t end = at;
  while (end < text.size() && IsDigit(text[end])) ++end;
  const size_t length = end - at;
  if ((length != 10 && length != 13) || text[at] != '1' || !EndsWord(text, end)) return 0;
  return length;
}

// A whole run of 16 or more hex digits, letters and digits both: a request
// id, a hash, a trace id.
size_t MatchHexId(std::string_view text, size_t at) {
  size_t end = at;
  bool digit = false, letter = false;
  while (end < text.size() && IsHex(text[end])) {
    (IsDigit(text[end]) ? digit : letter) = true;
    ++end;
  }
  return end - at >= 16 && digit && letter && EndsWord(text, end) ? end - at : 0;
}

std::string Excerpt(std::string_view text, const VolatileSpan& span) {
  return std::string(text.substr(span.offset, std::min<size_t>(span.length, 40)));
}

}  // namespace

std::vector<VolatileSpan> FindVolatile(std::string_view text) {
  std::vector<VolatileSpan> spans;
  size_t i = 0;
  while (i < text.size()) {
    if (i > 0 && IsAlnum(text[i - 1])) {  // inside a word: spans start at word starts
      ++i;
      continue;
    }
    size_t length = 0;
    std::string_view kind;
    if ((length = MatchUuid(text, i)) > 0) {
      kind = "uuid";
    } else if ((length = MatchDate(text, i)) > 0) {
      kind = "date";
    } else if ((length = MatchTime(text, i)) > 0) {
      kind = "time";
    } else if ((length = MatchUnixTime(text, i)) > 0) {
      kind = "unix_time";
    } else if ((length = MatchHexId(text, i)) > 0) {
      kind = "hex_id";
    }
    if (length == 0) {
      ++i;
      continue;
    }
    spans.push_back({i, length, kind});
    i += length;
  }
  return spans;
}

std::string MaskVolatile(std::string_view text) {
  std::string masked;
  size_t from = 0;
  for (const VolatileSpan& span : FindVolatile(text)) {
    masked.append(text.substr(from, span.offset - from));
    masked += "<";
    masked += span.kind;
    masked += ">";
    from = span.offset + span.length;
  }
  masked.append(text.substr(from));
  return masked;
}

std::vector<LintFinding> LintPrompts(std::span<const LintRequest> requests) {
  std::vector<LintFinding> findings;
  for (size_t r = 0; r < requests.size(); ++r) {
    const std::vector<PromptPart>& parts = requests[r].parts;
    // Static characters from each part on, up to the final message.
    std::vector<size_t> static_from(parts.size() + 1, 0);
    for (size_t p = parts.size(); p-- > 0;) {
      static_from[p] = static_from[p + 1] + (parts[p].last_turn ? 0 : parts[p].text.size());
    }
    // The first volatile span with enough static prompt after it is the one
    // that costs: everything after it is recomputed anyway.
    bool reported = false;
    for (size_t p = 0; p < parts.size() && !reported; ++p) {
      if (parts[p].last_turn) continue;
      for (const VolatileSpan& span : FindVolatile(parts[p].text)) {
        const size_t after = parts[p].text.size() - span.offset - span.length + static_from[p + 1];
        if (after < kMinStaticAfterVolatile) break;
        findings.push_back(
            {"volatile_before_static", r, parts[p].where,
             "a " + std::string(span.kind) + " ('" + Excerpt(parts[p].text, span) +
                 "') at character " + std::to_string(span.offset) + " comes before " +
                 std::to_string(after) +
                 " characters of static prompt, which the engine then recomputes on every "
                 "request: move it after them (into the last message)"});
        reported = true;
        break;
      }
    }
    // A breakpoint caches the prefix through it: volatile content before
    // one means the cache written there is never read.
    for (size_t p = 0; p < parts.size(); ++p) {
      if (!parts[p].cache_breakpoint) continue;
      for (size_t q = 0; q <= p; ++q) {
        const std::vector<VolatileSpan> spans = FindVolatile(parts[q].text);
        if (spans.empty()) continue;
        findings.push_back({"breakpoint_changes", r, parts[p].where,
                            "the cache_control breakpoint here caches a prefix that holds a " +
                                std::string(spans.front().kind) + " ('" +
                                Excerpt(parts[q].text, spans.front()) + "') in " + parts[q].where +
                                ": it changes, so the cache written here is not read again"});
        break;
      }
    }
  }

  if (requests.size() < 2) return findings;
  const LintRequest& first = requests.front();
  // A tool whose keys come in another order than in the first request that
  // has it: the same definition, serialized two ways.
  std::map<std::string, std::pair<size_t, const ToolForm*>> seen_tools;
  for (size_t r = 0; r < requests.size(); ++r) {
    for (const ToolForm& tool : requests[r].tools) {
      const auto [it, inserted] = seen_tools.try_emplace(tool.name, r, &tool);
      if (inserted) continue;
      const ToolForm& earlier = *it->second.second;
      if (earlier.canonical == tool.canonical && earlier.as_sent != tool.as_sent) {
        findings.push_back(
            {"nondeterministic_json", r, requests[r].tools_where,
             "tool '" + tool.name + "' has the same definition as in request " +
                 std::to_string(it->second.first) +
                 " but its keys in another order: serialize tools with sorted keys"});
      }
    }
  }
  // The same tools in another order.
  auto names = [](const LintRequest& request) {
    std::vector<std::string> out;
    for (const ToolForm& tool : request.tools) out.push_back(tool.name);
    return out;
  };
  const std::vector<std::string> first_order = names(first);
  for (size_t r = 1; r < requests.size(); ++r) {
    std::vector<std::string> order = names(requests[r]);
    if (order == first_order) continue;
    std::vector<std::string> sorted_first = first_order, sorted_order = order;
    std::sort(sorted_first.begin(), sorted_first.end());
    std::sort(sorted_order.begin(), sorted_order.end());
    if (sorted_first == sorted_order) {
      findings.push_back({"tool_order", r, requests[r].tools_where,
                          "the same tools as request 0 in another order: send them in one "
                          "fixed order (sorted by name)"});
    }
  }
  // The content before a breakpoint at the same place, differing between
  // requests (beyond volatile spans, which are reported above).
  for (size_t r = 1; r < requests.size(); ++r) {
    const std::vector<PromptPart>& parts = requests[r].parts;
    for (size_t p = 0; p < parts.size() && p < first.parts.size(); ++p) {
      // The same breakpoint: the same part of each prompt carries one.
      if (!parts[p].cache_breakpoint || !first.parts[p].cache_breakpoint) continue;
      for (size_t q = 0; q <= p; ++q) {
        if (MaskVolatile(parts[q].text) == MaskVolatile(first.parts[q].text)) continue;
        findings.push_back({"breakpoint_changes", r, parts[p].where,
                            "the prefix cached at this breakpoint differs from request 0's in " +
                                parts[q].where + ": the cache written there is not read again"});
        break;
      }
    }
  }
  return findings;
}

}  // namespace kvgov::prompts
