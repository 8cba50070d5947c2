#pragma once

// Strict UTF-8 (RFC 3629): what kvgov's JSON parsers, Prometheus' parser
// and the engines' msgpack strings are held to. One implementation for
// every module. Pure functions; thread-safe.

#include <cstddef>
#include <string_view>

namespace kvgov {

/// The length of the well-formed UTF-8 sequence at `text[at]`, or 0 when
/// the bytes there form none (an overlong form, a surrogate, a code point
/// past U+10FFFF, a stray or truncated byte). REQUIRES: at < text.size().
size_t Utf8SequenceLength(std::string_view text, size_t at);

/// True when `text` is well-formed UTF-8.
bool IsValidUtf8(std::string_view text);

}  // namespace kvgov
