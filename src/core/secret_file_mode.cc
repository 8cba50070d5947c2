#include "kvgov/core/secret_file_mode.h"

#include <string>

namespace kvgov {

Status CheckSecretFileMode(std::string_view what, uint32_t mode, uint32_t owner_uid) {
  constexpr uint32_t kGroupAndOthers = 077;
  constexpr uint32_t kGroupWriteExecAndOthers = 037;
  if ((mode & kGroupAndOthers) == 0) return Status::Ok();
  if (owner_uid == 0 && (mode & kGroupWriteExecAndOthers) == 0) return Status::Ok();
  std::string octal(4, '0');  // the permission bits as chmod spells them
  for (int digit = 3, shift = 0; digit >= 0; --digit, shift += 3) {
    octal[digit] = static_cast<char>('0' + ((mode >> shift) & 07));
  }
  return Status::PermissionDenied(
      std::string(what) + " has mode " + octal + (owner_uid == 0 ? " (owner root)" : "") +
      ": group or others may use it; chmod 600 it (a file root owns may be 640)");
}

}  // namespace kvgov
