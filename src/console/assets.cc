#include "kvgov/console/assets.h"

#include "console/embedded.h"

namespace kvgov::console {
namespace {

std::string_view ContentType(std::string_view name) {
  if (name.ends_with(".html")) return "text/html; charset=utf-8";
  if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (name.ends_with(".css")) return "text/css; charset=utf-8";
  if (name.ends_with(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

}  // namespace

std::optional<Asset> FindAsset(std::string_view path) {
  const std::string_view name = path.empty() ? "index.html" : path;
  for (const internal::EmbeddedFile& file : internal::kEmbedded) {
    if (file.name == name) return Asset{file.bytes, ContentType(name)};
  }
  return std::nullopt;
}

}  // namespace kvgov::console
