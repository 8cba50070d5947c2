#include "kvgov/core/provider_cache.h"

#include <charconv>
#include <string>

#include "core/field_checks.h"
#include "kvgov/core/digest.h"

namespace kvgov {
namespace {

using core_internal::RequireNonEmpty;
using core_internal::RequireNonNegative;

// "5m" -> 300000. Providers spell retention as a count and a unit; an
// unparseable value is rejected rather than silently read as "no TTL".
Result<int64_t> RetentionMillis(std::string_view retention) {
  if (retention.empty()) return int64_t{0};
  int64_t count = 0;
  const char* end = retention.data() + retention.size();
  auto [unit_start, error] = std::from_chars(retention.data(), end, count);
  std::string_view unit(unit_start, static_cast<size_t>(end - unit_start));
  int64_t unit_ms = 0;
  if (unit == "s") unit_ms = 1000;
  if (unit == "m" || unit == "min") unit_ms = int64_t{60} * 1000;
  if (unit == "h") unit_ms = int64_t{60} * 60 * 1000;
  constexpr int64_t kMaxCount = int64_t{1} << 32;
  if (error != std::errc() || unit_ms == 0 || count <= 0 || count > kMaxCount) {
    return Status::InvalidArgument(
        "retention: want <count><s|m|min|h> such as '5m' or '1h', got '" + std::string(retention) +
        "'");
  }
  return count * unit_ms;
}

}  // namespace

std::string ProviderCacheDigest(const ProviderCache& cache) {
  return DigestFields("kvgov.provider_cache.v1",
                      {ToString(cache.provider), cache.model_id, cache.serializer_id,
                       cache.endpoint, cache.reasoning_mode, cache.tool_set_id, cache.region});
}

Result<Entry> FromProviderCache(const ProviderCache& cache) {
  KVGOV_RETURN_IF_ERROR(RequireNonEmpty("model_id", cache.model_id));
  KVGOV_RETURN_IF_ERROR(RequireNonNegative("cached_tokens", cache.cached_tokens));
  KVGOV_RETURN_IF_ERROR(RequireNonNegative("write_tokens", cache.write_tokens));
  KVGOV_RETURN_IF_ERROR(RequireNonNegative("prompt_tokens", cache.prompt_tokens));
  KVGOV_ASSIGN_OR_RETURN(int64_t ttl_ms, RetentionMillis(cache.retention));

  const std::string provider(ToString(cache.provider));
  Entry entry;
  entry.id = EntryId{ProviderCacheDigest(cache), MediaType::kPromptPrefix,
                     cache.prompt_tokens > 0 ? cache.prompt_tokens : cache.cached_tokens,
                     LengthUnit::kTokens};
  entry.plane = Plane::kProvider;
  entry.source = SourceForPlane(entry.plane);
  entry.derivation.model_id = cache.model_id;
  entry.derivation.serializer_id = cache.serializer_id;
  entry.validity.ttl_millis = ttl_ms;
  // Telemetry about a cache kvgov does not hold: deferred, never admitted.
  entry.security.admission_verdict = AdmissionVerdict::kDefer;
  entry.security.admitted_by = cache.owner.empty() ? provider : cache.owner;
  entry.security.reason = "provider_cache_telemetry";
  entry.residency.tier = ResidencyTier::kProvider;
  entry.residency.owner = entry.security.admitted_by;
  entry.coherence.invalidation_mode = InvalidationMode::kPolicy;
  entry.metrics.prefill_tokens_saved = cache.cached_tokens;

  entry.labels["provider"] = provider;
  entry.labels["plane"] = ToString(Plane::kProvider);
  auto set_if = [&entry](const char* key, std::string_view value) {
    if (!value.empty()) entry.labels[key] = std::string(value);
  };
  set_if("breakpoint_mode", ToString(cache.breakpoint_mode));
  set_if("endpoint", cache.endpoint);
  set_if("reasoning_mode", cache.reasoning_mode);
  set_if("tool_set", cache.tool_set_id);
  set_if("region", cache.region);
  set_if("retention", cache.retention);
  if (cache.write_tokens > 0) {
    entry.labels["cache_write_tokens"] = std::to_string(cache.write_tokens);
  }
  if (cache.first_diverge_at > 0) {
    entry.labels["first_diverge_at"] = std::to_string(cache.first_diverge_at);
  }
  return entry;
}

LookupVerdict ProviderCacheVerdict(const Entry& entry) {
  LookupVerdict verdict = LookupVerdict::Transform(entry, LookupReason::kPolicyMismatch);
  verdict.meta["provider_cache"] = "cost_latency_only";
  return verdict;
}

}  // namespace kvgov
