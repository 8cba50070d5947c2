#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "kvgov/core/status.h"

namespace kvgov {

/// Every closed vocabulary in kvgov is an enum whose wire spelling is given by
/// one table: a specialisation of EnumSpelling<E> with
///   static constexpr std::string_view kName;           // "residency tier"
///   static constexpr std::array<std::pair<E, std::string_view>, N> kValues;
/// ToString and ParseEnum below are the only way spellings are turned into
/// values and back, so a spelling is written exactly once.
template <typename E>
struct EnumSpelling;

/// The wire spelling of `value`. Every enumerator is in its table (the tests
/// walk each table), so this never fails for a valid enumerator.
template <typename E>
constexpr std::string_view ToString(E value) {
  for (const auto& [candidate, spelling] : EnumSpelling<E>::kValues) {
    if (candidate == value) return spelling;
  }
  return "<invalid>";
}

/// "tainted, trusted, quarantined": the accepted spellings, for error text.
template <typename E>
std::string EnumChoices() {
  std::string out;
  for (const auto& [candidate, spelling] : EnumSpelling<E>::kValues) {
    if (!out.empty()) out += ", ";
    out += spelling.empty() ? std::string("\"\"") : std::string(spelling);
  }
  return out;
}

/// Parses an exact spelling. Unknown spellings are rejected, never mapped to a
/// default: returns InvalidArgument naming the vocabulary, the bad value and
/// the accepted ones.
template <typename E>
Result<E> ParseEnum(std::string_view text) {
  for (const auto& [candidate, spelling] : EnumSpelling<E>::kValues) {
    if (spelling == text) return candidate;
  }
  // The value is untrusted input: quote at most 64 bytes of it, printable
  // ASCII only, so an error message cannot smuggle newlines into a log.
  constexpr size_t kMaxEcho = 64;
  std::string msg = "unknown ";
  msg += EnumSpelling<E>::kName;
  msg += " '";
  for (size_t i = 0; i < text.size() && i < kMaxEcho; ++i) {
    const char c = text[i];
    msg += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (text.size() > kMaxEcho) msg += "...";
  msg += "' (want one of: ";
  msg += EnumChoices<E>();
  msg += ")";
  return Status::InvalidArgument(std::move(msg));
}

}  // namespace kvgov
