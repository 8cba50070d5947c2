#pragma once

// Internal to kvgov: the one bounded JSON parser behind every JSON input
// kvgov reads (API bodies in kvgov_codec, certificates in kvgov_cert), so
// their limits, duplicate-key rule and error paths are the same. Not a
// public header: it carries nlohmann's type, so only modules that link
// nlohmann_json privately include it.

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kvgov/core/status.h"

namespace kvgov::json_internal {

using Json = nlohmann::json;

struct ParseLimits {
  std::size_t max_bytes = std::size_t{1} << 20;        // checked before parsing
  std::size_t max_depth = 32;                          // nested containers; the top level is 1
  std::size_t max_array_items = std::size_t{1} << 20;  // per array
  std::string_view noun = "document";                  // what the size error calls the input
};

/// Parses one JSON document under `limits`: size before parsing, depth and
/// array length while parsing (the document is never built past a limit),
/// and a key repeated in one object, which nlohmann would otherwise resolve
/// silently. Returns ResourceExhausted over a limit and InvalidArgument
/// naming where for a malformed document (trailing content and invalid
/// UTF-8 included) or a duplicate key; the message never echoes input
/// bytes outside printable ASCII. Never throws.
Result<Json> ParseJson(std::string_view text, const ParseLimits& limits);

/// "$.a.key" for `key` under `parent`; `$.a["odd key"]` when the key is not
/// an identifier, with at most 64 printable ASCII bytes of it, so a path
/// names one value and cannot carry hostile bytes into a message.
std::string ChildPath(std::string_view parent, std::string_view key);

/// "$.a[3]".
std::string IndexPath(std::string_view parent, std::size_t index);

/// InvalidArgument "<path>: <problem>", the one error format of kvgov's
/// JSON readers.
Status PathError(std::string_view path, std::string_view problem);

}  // namespace kvgov::json_internal
