#pragma once

#include "kvgov/core/envelope.h"
#include "kvgov/core/lookup_verdict.h"

namespace kvgov {

/// The verdict fold of the entry's own plane: kv_transfer ->
/// KVTransferVerdict, provider -> ProviderCacheVerdict, kv_prefix ->
/// KVPrefixVerdict, tool_result -> ToolResultVerdict. A plane kvgov has no
/// fold for yet folds to miss/absent: an entry nobody can judge never serves.
LookupVerdict FoldVerdict(const Entry& entry);

}  // namespace kvgov
