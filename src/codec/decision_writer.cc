#include "codec/decision_writer.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>

#include "kvgov/core/json_string.h"
#include "kvgov/core/lookup_verdict.h"
#include "kvgov/index/residency_index.h"

namespace kvgov::codec_internal {
namespace {

// Every string the decision carries is ASCII in practice (ids, hex salts,
// fixed reasons); anything else goes the document path, whose escaping and
// replacement of invalid UTF-8 this writer need not copy.
bool Ascii(std::string_view text) {
  for (unsigned char c : text) {
    if (c >= 0x80) return false;
  }
  return true;
}

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}

  void Key(std::string_view key) {
    Comma();
    out_ += '"';
    out_ += key;  // the writer's own keys: no escaping needed
    out_ += "\":";
    first_ = false;
  }
  void String(std::string_view text) { AppendJsonString(out_, text); }
  void Uint(uint64_t value) {
    char buffer[24];
    out_.append(buffer, std::to_chars(buffer, buffer + sizeof(buffer), value).ptr);
  }
  void Int(int64_t value) {
    char buffer[24];
    out_.append(buffer, std::to_chars(buffer, buffer + sizeof(buffer), value).ptr);
  }
  void Bool(bool value) { out_ += value ? "true" : "false"; }
  // nlohmann's notation: the shortest digits that read back, as a decimal
  // with at least one fractional digit when the point falls within 15
  // digits (64.0, 0.001), else d.ddde+XX; null for NaN and infinities.
  void Double(double value) {
    if (!std::isfinite(value)) {
      out_ += "null";
      return;
    }
    if (value == 0) {
      out_ += std::signbit(value) ? "-0.0" : "0.0";
      return;
    }
    // Counts of blocks, most of a decision's doubles: the same text, sooner.
    if (std::abs(value) < 1e15 && std::trunc(value) == value) {
      Int(static_cast<int64_t>(value));
      out_ += ".0";
      return;
    }
    char buffer[40];
    const std::to_chars_result printed = std::to_chars(
        buffer, buffer + sizeof(buffer), std::abs(value), std::chars_format::scientific);
    // d[.ddd]e±XX: the digits without the point, and the exponent.
    char digit_buffer[24];
    int k = 0;
    const char* at = buffer;
    for (; at < printed.ptr && *at != 'e'; ++at) {
      if (*at != '.') digit_buffer[k++] = *at;
    }
    int exponent = 0;
    std::from_chars(at + (at[1] == '+' ? 2 : 1), printed.ptr, exponent);
    const std::string_view digits(digit_buffer, static_cast<size_t>(k));
    const int n = exponent + 1;  // where the point goes, counted from the first digit
    if (std::signbit(value)) out_ += '-';
    if (k <= n && n <= 15) {
      out_ += digits;
      out_.append(static_cast<size_t>(n - k), '0');
      out_ += ".0";
    } else if (0 < n && n <= 15) {
      out_ += digits.substr(0, static_cast<size_t>(n));
      out_ += '.';
      out_ += digits.substr(static_cast<size_t>(n));
    } else if (-4 < n && n <= 0) {
      out_ += "0.";
      out_.append(static_cast<size_t>(-n), '0');
      out_ += digits;
    } else {
      out_ += digits[0];
      if (k > 1) {
        out_ += '.';
        out_ += digits.substr(1);
      }
      const int shown = n - 1;
      out_ += shown < 0 ? "e-" : "e+";
      const int magnitude = std::abs(shown);
      if (magnitude < 10) out_ += '0';
      Int(magnitude);
    }
  }
  // A value, so it follows its key or Element() without a comma.
  void Open(char bracket) {
    out_ += bracket;
    first_ = true;
  }
  void Close(char bracket) {
    out_ += bracket;
    first_ = false;
  }
  // An element of an array.
  void Element() {
    Comma();
    first_ = false;
  }

 private:
  void Comma() {
    if (!first_) out_ += ',';
  }

  std::string& out_;
  bool first_ = true;
};

// Keys in byte order, as nlohmann's objects hold them.
void WriteTiers(Writer& w, const std::array<uint64_t, index::kIndexedTiers.size()>& counts) {
  // kIndexedTiers is hbm, dram, disk, remote, unknown.
  static constexpr std::array<std::pair<std::string_view, size_t>, 5> kSorted = {
      {{"disk", 2}, {"dram", 1}, {"hbm", 0}, {"remote", 3}, {"unknown", 4}}};
  static_assert(index::kIndexedTiers.size() == 5);
  w.Open('{');
  for (const auto& [name, at] : kSorted) {
    w.Key(name);
    w.Uint(counts[at]);
  }
  w.Close('}');
}

void WriteLoad(Writer& w, const router::WorkerLoad& load) {
  w.Open('{');
  w.Key("blocks");
  w.Double(load.blocks);
  w.Key("decoding_requests");
  w.Uint(load.decoding_requests);
  w.Key("in_flight_blocks");
  w.Uint(load.in_flight_blocks);
  w.Key("in_flight_requests");
  w.Uint(load.in_flight_requests);
  w.Key("peer_in_flight_blocks");
  w.Uint(load.peer_blocks);
  if (load.scraped) {
    w.Key("scraped");
    w.Open('{');
    w.Key("kv_usage");
    w.Double(load.scraped->kv_usage);
    w.Key("running");
    w.Double(load.scraped->running);
    w.Key("scraped_at_ms");
    w.Int(load.scraped->scraped_at_ms);
    w.Key("waiting");
    w.Double(load.scraped->waiting);
    w.Close('}');
  }
  w.Close('}');
}

void WriteCandidate(Writer& w, const router::Candidate& c) {
  w.Open('{');
  w.Key("cache_fullness");
  w.Double(c.cache_fullness);
  w.Key("cost");
  w.Double(c.cost);
  w.Key("credited_blocks");
  w.Double(c.credited_blocks);
  w.Key("eligible");
  w.Bool(c.eligible);
  w.Key("load");
  WriteLoad(w, c.load);
  w.Key("overlap_blocks");
  w.Uint(c.overlap_blocks);
  w.Key("prefilling_blocks");
  w.Uint(c.prefilling_blocks);
  if (!c.reason.empty()) {
    w.Key("reason");
    w.String(c.reason);
  }
  w.Key("resident_blocks");
  w.Uint(c.resident_blocks);
  w.Key("tier_overlap");
  WriteTiers(w, c.tier_overlap);
  w.Key("worker");
  w.String(c.worker);
  w.Close('}');
}

}  // namespace

std::optional<std::string> WriteDecisionJson(const router::RouteDecision& decision,
                                             std::string_view error_code,
                                             std::string_view error_message) {
  bool ascii = Ascii(decision.decision_id) && Ascii(decision.worker) &&
               Ascii(decision.cache_salt) && Ascii(error_code) && Ascii(error_message);
  for (const router::Candidate& c : decision.candidates) {
    ascii = ascii && Ascii(c.worker) && Ascii(c.reason);
  }
  if (!ascii) return std::nullopt;
  std::string out;
  out.reserve(256 + 360 * decision.candidates.size());
  Writer w(out);
  w.Open('{');
  w.Key("cache_salt");
  w.String(decision.cache_salt);
  w.Key("candidates");
  w.Open('[');
  for (const router::Candidate& c : decision.candidates) {
    w.Element();
    WriteCandidate(w, c);
  }
  w.Close(']');
  w.Key("decision_id");
  w.String(decision.decision_id);
  if (!error_code.empty()) {
    w.Key("error");
    w.Open('{');
    w.Key("code");
    w.String(error_code);
    w.Key("message");
    w.String(error_message);
    w.Close('}');
  }
  w.Key("overlap_blocks");
  w.Uint(decision.overlap_blocks);
  w.Key("prompt_blocks");
  w.Uint(decision.prompt_blocks);
  w.Key("verdict");
  w.Open('{');
  w.Key("kind");
  w.String(ToString(decision.verdict.kind));
  w.Key("reason");
  w.String(ToString(decision.verdict.reason));
  w.Close('}');
  w.Key("worker");
  w.String(decision.worker);
  w.Close('}');
  return out;
}

}  // namespace kvgov::codec_internal
