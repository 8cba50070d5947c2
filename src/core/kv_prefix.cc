#include "kvgov/core/kv_prefix.h"

#include "core/field_checks.h"
#include "kvgov/core/digest.h"

namespace kvgov {

Result<Entry> FromKVPrefix(const KVPrefix& prefix) {
  KVGOV_RETURN_IF_ERROR(core_internal::RequireNonEmpty("model_id", prefix.model_id));
  KVGOV_RETURN_IF_ERROR(core_internal::RequireNonNegative("reused_tokens", prefix.reused_tokens));

  Entry entry;
  entry.id = EntryId{DigestTokenIds(prefix.token_ids), MediaType::kKVSpan,
                     static_cast<int64_t>(prefix.token_ids.size()), LengthUnit::kPositions};
  entry.plane = Plane::kKVPrefix;
  entry.source = SourceForPlane(entry.plane);
  entry.derivation.model_id = prefix.model_id;
  entry.derivation.tokenizer_id = prefix.tokenizer_id;
  entry.derivation.position_mode = PositionMode::kPrefixAligned;
  entry.residency.tier = prefix.tier;
  entry.residency.owner = prefix.owner.empty() ? "kvgov" : prefix.owner;
  entry.residency.lease = prefix.lease;
  entry.coherence.invalidation_mode = InvalidationMode::kPolicy;
  entry.metrics.prefill_tokens_saved = prefix.reused_tokens;
  return entry;
}

LookupVerdict KVPrefixVerdict(const Entry& entry) {
  if (entry.plane != Plane::kKVPrefix || !entry.id.Valid()) {
    return LookupVerdict::Miss(LookupReason::kAbsent);
  }
  return LookupVerdict::Hit(entry);
}

}  // namespace kvgov
