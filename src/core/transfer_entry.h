#pragma once

#include "kvgov/core/kv_transfer.h"

namespace kvgov::core_internal {

// Builds the kv_transfer entry without validating the report. FromKVTransfer
// validates first; FromNIXLLease uses this directly because an unidentified
// lease (no span digest) must still lower, to an entry that never serves.
Entry BuildTransferEntry(const KVTransfer& transfer);

}  // namespace kvgov::core_internal
