#pragma once

#include <array>
#include <atomic>
#include <memory>

#include "kvgov/core/envelope.h"
#include "kvgov/core/lookup_verdict.h"
#include "kvgov/core/status.h"
#include "kvgov/metrics/registry.h"

namespace kvgov::metrics {

/// Counts every lowered envelope entry, whatever produced it, under its own
/// source, so a provider's saving never lands in a local counter:
///   kvgov_cache_events_total{source,plane,direction,outcome}
///   kvgov_bytes_moved_total{source,from_tier,to_tier}
///   kvgov_lookup_verdicts_total{source,kind,reason}
///   kvgov_prefill_tokens_saved_total{source}
///   kvgov_prefill_tokens_saved_by_tenant_total{source,model,tenant}
///     (the same savings by the entry's model, derivation.model_id or its
///     "model" label, else "unknown", and its "tenant" label, else "none")
/// Thread-safe (the registry's own guarantees).
class CacheAccounting {
 public:
  /// Registers the families. Errors are the registry's (a name taken).
  static Result<std::unique_ptr<CacheAccounting>> Create(Registry* registry);

  /// Folds the entry into its verdict and counts both; returns the verdict.
  LookupVerdict Record(const Entry& entry);

  /// Prefill tokens saved under `source` since start (the
  /// kvgov_prefill_tokens_saved_total series).
  double SavedTokens(Source source) const;

 private:
  CacheAccounting() = default;

  CounterFamily* events_ = nullptr;
  CounterFamily* bytes_moved_ = nullptr;
  CounterFamily* verdicts_ = nullptr;
  CounterFamily* tokens_saved_ = nullptr;
  CounterFamily* tokens_saved_by_tenant_ = nullptr;
  // The same as tokens_saved_, by Source, read without making a series.
  std::array<std::atomic<int64_t>, EnumSpelling<Source>::kValues.size()> saved_by_source_{};
};

}  // namespace kvgov::metrics
