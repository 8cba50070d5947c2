#pragma once

#include <cstdint>
#include <string>

#include "kvgov/core/envelope.h"
#include "kvgov/core/lookup_verdict.h"
#include "kvgov/core/status.h"

namespace kvgov {

/// Prompt-cache telemetry from a hosted provider's usage block. It is cost
/// and latency information about someone else's cache, never a handle
/// kvgov can serve or evict.
struct ProviderCache {
  Provider provider = Provider::kOpenAI;
  std::string model_id;
  int64_t cached_tokens = 0;  // read from the provider's cache
  int64_t write_tokens = 0;   // written into it (a write-only turn is recorded too)
  int64_t prompt_tokens = 0;
  // A stable identity of how the prompt is serialised (template or client
  // version), not a hash of the whole request body, which would make every
  // turn its own cache family.
  std::string serializer_id;
  BreakpointMode breakpoint_mode = BreakpointMode::kUnknown;
  std::string retention;  // "5m", "1h", "24h": <integer><s|m|min|h>
  int64_t first_diverge_at = 0;  // <= 0: unknown
  std::string owner;             // empty -> the provider's name
  // The vary axes: each silently breaks the provider's cache when it changes.
  std::string endpoint;
  std::string reasoning_mode;
  std::string tool_set_id;
  std::string region;
  friend bool operator==(const ProviderCache&, const ProviderCache&) = default;
};

/// The cache-family digest over the seven identity axes (provider, model,
/// serializer, endpoint, reasoning mode, tool set, region), length-framed so
/// no two axis lists collide.
std::string ProviderCacheDigest(const ProviderCache& cache);

/// Lowers onto the provider plane and tier (source provider, media
/// prompt_prefix, unit tokens, length = prompt_tokens or cached_tokens when
/// that is 0). prefill_tokens_saved = cached_tokens. Security: tainted,
/// agent scope, admission defer, reason provider_cache_telemetry: telemetry,
/// not a trust claim. TTL from retention. Labels provider and plane always;
/// breakpoint_mode, endpoint, reasoning_mode, tool_set, region, retention,
/// cache_write_tokens, first_diverge_at when set.
/// Returns InvalidArgument for an empty model, a negative count, or a
/// retention that does not parse.
Result<Entry> FromProviderCache(const ProviderCache& cache);

/// Always transform/policy_mismatch with meta provider_cache =
/// cost_latency_only: a provider cache hit never serves locally.
LookupVerdict ProviderCacheVerdict(const Entry& entry);

}  // namespace kvgov
