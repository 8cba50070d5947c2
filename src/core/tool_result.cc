#include "kvgov/core/tool_result.h"

#include <string>
#include <vector>

#include "core/field_checks.h"

namespace kvgov {

Result<ToolResultKey> ParseToolResultKey(std::string_view key) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t colon = key.find(':', start);
    parts.push_back(key.substr(start, colon - start));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  bool all_set = parts.size() == 3;
  for (std::string_view part : parts) all_set = all_set && !part.empty();
  if (!all_set) {
    return Status::InvalidArgument("key: want three non-empty parts tool:args_digest:epoch, got '" +
                                   std::string(key) + "'");
  }
  return ToolResultKey{std::string(parts[0]), std::string(parts[1]), std::string(parts[2])};
}

Result<Entry> FromToolResult(const ToolResult& result) {
  KVGOV_ASSIGN_OR_RETURN(ToolResultKey key, ParseToolResultKey(result.key));
  KVGOV_RETURN_IF_ERROR(core_internal::RequireNonNegative("size_bytes", result.size_bytes));
  KVGOV_RETURN_IF_ERROR(core_internal::RequireNonNegative("saved_tokens", result.saved_tokens));
  const bool is_miss = result.event == ToolResultEvent::kMiss;
  if (!is_miss) {
    KVGOV_RETURN_IF_ERROR(core_internal::RequireNonEmpty("result_digest", result.result_digest));
  }

  Entry entry;
  entry.id = EntryId{is_miss ? std::string() : result.result_digest, MediaType::kBytes,
                     result.size_bytes, LengthUnit::kBytes};
  entry.plane = Plane::kToolResult;
  entry.source = SourceForPlane(entry.plane);
  entry.derivation.tool = key.tool;
  entry.derivation.args_digest = key.args_digest;
  entry.validity.admitted_at_epoch = key.epoch;
  entry.validity.witness = result.witness;
  entry.residency.tier = is_miss ? ResidencyTier::kRecompute : ResidencyTier::kDRAM;
  entry.residency.owner = "vdso";
  entry.residency.lease = is_miss ? "" : "lru";
  if (!is_miss) {
    entry.coherence.invalidation_mode = result.witness.empty()
                                            ? InvalidationMode::kWriteEpoch
                                            : InvalidationMode::kExternalRefutation;
  }
  entry.metrics.prefill_tokens_saved = result.saved_tokens;
  entry.labels["tool_result_event"] = ToString(result.event);
  return entry;
}

LookupVerdict ToolResultVerdict(const Entry& entry) {
  auto it = entry.labels.find("tool_result_event");
  Result<ToolResultEvent> event = it == entry.labels.end()
                                      ? Result<ToolResultEvent>(Status::NotFound("no event"))
                                      : ParseEnum<ToolResultEvent>(it->second);
  if (!event.ok()) return LookupVerdict::Miss(LookupReason::kAbsent);
  switch (*event) {
    case ToolResultEvent::kHit:
    case ToolResultEvent::kFill:
      if (!entry.id.Valid()) return LookupVerdict::Miss(LookupReason::kAbsent);
      return LookupVerdict::Hit(entry);
    case ToolResultEvent::kEvict:
      return LookupVerdict::Miss(LookupReason::kEvicted);
    case ToolResultEvent::kRevoke:
      return LookupVerdict::Miss(LookupReason::kRefutedWitness);
    case ToolResultEvent::kMiss:
      return LookupVerdict::Miss(LookupReason::kAbsent);
  }
  return LookupVerdict::Miss(LookupReason::kAbsent);
}

}  // namespace kvgov
