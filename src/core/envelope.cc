#include "kvgov/core/envelope.h"

#include <string>

namespace kvgov {

Status ValidateEntry(const Entry& entry) {
  if (entry.source != SourceForPlane(entry.plane)) {
    return Status::InvalidArgument("source: '" + std::string(ToString(entry.source)) +
                                   "' does not match plane '" + std::string(ToString(entry.plane)) +
                                   "' (want '" +
                                   std::string(ToString(SourceForPlane(entry.plane))) + "')");
  }
  if (entry.id.length < 0) {
    return Status::InvalidArgument("id.length: must be >= 0, got " +
                                   std::to_string(entry.id.length));
  }
  for (const auto& [key, value] : entry.labels) {
    if (key.empty()) return Status::InvalidArgument("labels: empty key");
  }
  return Status::Ok();
}

}  // namespace kvgov
