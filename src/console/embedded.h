#pragma once

// Internal to kvgov_console: the table cmake/EmbedAssets.cmake generates.

#include <span>
#include <string_view>

namespace kvgov::console::internal {

struct EmbeddedFile {
  std::string_view name;  // relative to src/console/static
  std::string_view bytes;
};

extern const std::span<const EmbeddedFile> kEmbedded;

}  // namespace kvgov::console::internal
