#pragma once

// What the fuzz targets share: how an invariant fails, and the checks more
// than one decoder's output must pass. Fuzz code only; never linked into
// kvgov.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "kvgov/core/status.h"

// Fails the run at once when `cond` is false. __builtin_trap rather than
// abort() or assert(): it cannot be compiled out by NDEBUG, cannot be caught
// or handled by the code under test, and libFuzzer records the input as a
// crash artifact. The message names the invariant so a crash report says
// what broke before anyone opens a debugger.
#define FUZZ_CHECK(cond, ...)                                                                \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n  ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                     \
      std::fputc('\n', stderr);                                                              \
      __builtin_trap();                                                                      \
    }                                                                                        \
  } while (false)

namespace kvgov::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Whether `code` is one of `allowed`: decoders promise a closed set of
/// error codes (a Status of another code is a misreported failure, and
/// kInternal in particular means an exception the decoder did not expect).
template <typename... Codes>
bool CodeIsOneOf(const kvgov::Status& status, Codes... allowed) {
  return ((status.code() == allowed) || ...);
}

/// Well-formed UTF-8: no overlong forms, surrogates or code points past
/// U+10FFFF. Written here, not borrowed from kvgov, so that it is an
/// independent check of what the decoders let through.
inline bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    size_t length = 0;
    uint32_t code = 0;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
      code = lead & 0x1Fu;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      code = lead & 0x0Fu;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      code = lead & 0x07u;
    } else {
      return false;
    }
    if (text.size() - i < length) return false;
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code = (code << 6) | (next & 0x3Fu);
    }
    if ((length == 3 && code < 0x800) || (length == 4 && code < 0x10000) || code > 0x10FFFF ||
        (code >= 0xD800 && code <= 0xDFFF)) {
      return false;
    }
    i += length;
  }
  return true;
}

inline bool IsLowerHex(std::string_view text, size_t length) {
  if (text.size() != length) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

/// A status for a crash message; truncated, since a message may quote a
/// path built from fuzzer bytes.
inline std::string Describe(const kvgov::Status& status) {
  std::string text = status.ToString();
  if (text.size() > 512) text.resize(512);
  return text;
}

}  // namespace kvgov::fuzz
