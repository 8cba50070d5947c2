#pragma once

#include <string>

#include "kvgov/core/status.h"

namespace kvgov::auth {

/// The deployment's tenant-salt secret: exactly 32 bytes read from `path`,
/// or, when the file does not exist, 32 bytes from the kernel's random
/// source written there with mode 0600 (created exclusively, so two starts
/// cannot race to different secrets). Returns IOError when the file cannot
/// be read or created, Corruption when it does not hold exactly 32 bytes,
/// and PermissionDenied when it is readable by group or others. The secret
/// is never logged.
Result<std::string> LoadOrCreateTenantSecret(const std::string& path);

}  // namespace kvgov::auth
