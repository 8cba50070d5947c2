#pragma once

// The operator's console (GET /ui): a page of plain HTML, CSS and
// JavaScript compiled into the binary, so it is the same behind an air gap
// and nothing is fetched at run time. Its data comes from the API with the
// caller's own bearer token (docs/formats/console.md).

#include <optional>
#include <string_view>

namespace kvgov::console {

struct Asset {
  std::string_view body;
  std::string_view content_type;  // with charset for text
};

/// The file at `path` under /ui/ ("" is the page itself); nullopt for any
/// other path. Immutable; thread-safe.
std::optional<Asset> FindAsset(std::string_view path);

/// The Content-Security-Policy every console answer carries: its own
/// scripts, styles and API only; no inline script, no framing.
inline constexpr std::string_view kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

}  // namespace kvgov::console
