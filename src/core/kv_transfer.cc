#include "kvgov/core/kv_transfer.h"

#include <string>

#include "core/field_checks.h"
#include "core/transfer_entry.h"

namespace kvgov {
namespace core_internal {

Entry BuildTransferEntry(const KVTransfer& transfer) {
  const KVSpanReport& span = transfer.span;
  Entry entry;
  entry.id = EntryId{span.span_digest, MediaType::kKVSpan, span.tokens, LengthUnit::kPositions};
  entry.plane = Plane::kKVTransfer;
  entry.source = SourceForPlane(entry.plane);
  entry.derivation.model_id = span.model_id;
  entry.derivation.tokenizer_id = span.tokenizer_id;
  entry.derivation.serializer_id = span.serializer_id;
  entry.derivation.position_mode = span.position_mode == PositionMode::kUnknown
                                       ? PositionMode::kPrefixAligned
                                       : span.position_mode;
  // Security stays at its fail-closed zero value: a transport's report is
  // evidence of residency, not of trust. Only AdmissionPolicy admits.
  entry.security.deletion_certificate = span.deletion_certificate;
  entry.residency.tier = span.to_tier;
  entry.residency.owner = span.owner.empty() ? "engine" : span.owner;
  entry.residency.lease = span.lease;
  entry.metrics.bytes_transferred = span.bytes_moved;

  entry.labels["direction"] = ToString(transfer.direction);
  entry.labels["outcome"] = ToString(span.outcome);
  if (span.from_tier != ResidencyTier::kUnknown) {
    entry.labels["from_tier"] = ToString(span.from_tier);
  }
  if (span.to_tier != ResidencyTier::kUnknown) entry.labels["to_tier"] = ToString(span.to_tier);
  if (!span.fault_reason.empty()) entry.labels["fault_reason"] = span.fault_reason;
  return entry;
}

}  // namespace core_internal

Result<Entry> FromKVTransfer(const KVTransfer& transfer) {
  using core_internal::RequireNonEmpty;
  using core_internal::RequireNonNegative;
  KVGOV_RETURN_IF_ERROR(RequireNonEmpty("span_digest", transfer.span.span_digest));
  KVGOV_RETURN_IF_ERROR(RequireNonNegative("tokens", transfer.span.tokens));
  KVGOV_RETURN_IF_ERROR(RequireNonNegative("bytes_moved", transfer.span.bytes_moved));
  return core_internal::BuildTransferEntry(transfer);
}

LookupVerdict KVTransferVerdict(const Entry& entry) {
  auto label = [&entry](const char* key) -> std::string_view {
    auto it = entry.labels.find(key);
    return it == entry.labels.end() ? std::string_view() : std::string_view(it->second);
  };
  Result<KVTransferOutcome> outcome = ParseEnum<KVTransferOutcome>(label("outcome"));
  Result<KVTransferDirection> direction = ParseEnum<KVTransferDirection>(label("direction"));
  // A label we cannot read may have been tampered with: fail closed.
  if (!outcome.ok() || !direction.ok()) return LookupVerdict::Miss(LookupReason::kAbsent);
  switch (*outcome) {
    case KVTransferOutcome::kFault:
      return LookupVerdict::Fault(entry, LookupReason::kResidencyFault);
    case KVTransferOutcome::kMissed:
      return LookupVerdict::Miss(LookupReason::kRestoreMiss);
    case KVTransferOutcome::kOk:
      if (*direction == KVTransferDirection::kEvict) {
        return LookupVerdict::Miss(LookupReason::kEvicted);
      }
      return LookupVerdict::Hit(entry);
  }
  return LookupVerdict::Miss(LookupReason::kAbsent);
}

}  // namespace kvgov
