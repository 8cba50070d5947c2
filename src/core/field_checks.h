#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvgov/core/status.h"

namespace kvgov::core_internal {

// Field checks shared by the lowerings, so every record reports a bad field
// with the same wording: "<field>: <problem>".

inline Status RequireNonEmpty(std::string_view field, std::string_view value) {
  if (!value.empty()) return Status::Ok();
  return Status::InvalidArgument(std::string(field) + ": required, got empty");
}

inline Status RequireNonNegative(std::string_view field, int64_t value) {
  if (value >= 0) return Status::Ok();
  return Status::InvalidArgument(std::string(field) + ": must be >= 0, got " +
                                 std::to_string(value));
}

}  // namespace kvgov::core_internal
