#include "kvgov/core/secret_file_mode.h"

#include <cstdio>
#include <string>

namespace kvgov {

Status CheckSecretFileMode(std::string_view what, uint32_t mode, uint32_t owner_uid) {
  constexpr uint32_t kGroupAndOthers = 077;
  constexpr uint32_t kGroupWriteExecAndOthers = 037;
  if ((mode & kGroupAndOthers) == 0) return Status::Ok();
  if (owner_uid == 0 && (mode & kGroupWriteExecAndOthers) == 0) return Status::Ok();
  char octal[8];
  std::snprintf(octal, sizeof(octal), "%04o", static_cast<unsigned>(mode & 07777));
  return Status::PermissionDenied(
      std::string(what) + " has mode " + octal + (owner_uid == 0 ? " (owner root)" : "") +
      ": group or others may use it; chmod 600 it (a file root owns may be 640)");
}

}  // namespace kvgov
