#include "kvgov/core/verdicts.h"

#include "kvgov/core/kv_prefix.h"
#include "kvgov/core/kv_transfer.h"
#include "kvgov/core/provider_cache.h"
#include "kvgov/core/tool_result.h"

namespace kvgov {

LookupVerdict FoldVerdict(const Entry& entry) {
  switch (entry.plane) {
    case Plane::kKVTransfer:
      return KVTransferVerdict(entry);
    case Plane::kProvider:
      return ProviderCacheVerdict(entry);
    case Plane::kKVPrefix:
      return KVPrefixVerdict(entry);
    case Plane::kToolResult:
      return ToolResultVerdict(entry);
    case Plane::kBlob:
    case Plane::kContextPage:
    case Plane::kKVArtifact:
    case Plane::kPromptPrefix:
    case Plane::kPolicy:
    case Plane::kPlanTemplate:
    case Plane::kSemanticIntent:
    case Plane::kMemoryView:
    case Plane::kAttentionIndex:
      return LookupVerdict::Miss(LookupReason::kAbsent);
  }
  return LookupVerdict::Miss(LookupReason::kAbsent);
}

}  // namespace kvgov
