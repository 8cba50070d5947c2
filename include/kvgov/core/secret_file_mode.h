#pragma once

// Who may read a file that holds one of kvgov's secrets (the issuer key,
// the tenant-salt secret): the rule both readers apply to the file they
// opened, kept here so it is written once. Pure: the caller fstat()s.

#include <cstdint>
#include <string_view>

#include "kvgov/core/status.h"

namespace kvgov {

/// Ok when a secret file of mode `mode`, owned by `owner_uid`, is private
/// enough to trust: no permission for group or others (0600 or less), or,
/// when root owns the file, read for the group and nothing for others
/// (0640 or less). The second is PostgreSQL's rule for its key files: root
/// controls the group's members, and it is what a Kubernetes Secret volume
/// with an fsGroup makes (root:fsGroup, 0440). PermissionDenied otherwise,
/// naming `what` (e.g. "issuer key '/etc/kvgov/issuer.key'") and the fix.
Status CheckSecretFileMode(std::string_view what, uint32_t mode, uint32_t owner_uid);

}  // namespace kvgov
