#include "kvgov/metrics/cache_accounting.h"

#include "kvgov/core/reuse_ledger.h"
#include "kvgov/core/verdicts.h"

namespace kvgov::metrics {
namespace {

std::string_view LabelOr(const Entry& entry, const char* key, std::string_view fallback) {
  auto it = entry.labels.find(key);
  return it == entry.labels.end() || it->second.empty() ? fallback : std::string_view(it->second);
}

std::string_view TierName(ResidencyTier tier) {
  return tier == ResidencyTier::kUnknown ? "unknown" : ToString(tier);
}

}  // namespace

Result<std::unique_ptr<CacheAccounting>> CacheAccounting::Create(Registry* registry) {
  std::unique_ptr<CacheAccounting> accounting(new CacheAccounting());
  KVGOV_ASSIGN_OR_RETURN(
      accounting->events_,
      registry->AddCounter({"kvgov_cache_events_total",
                            "Envelope entries lowered from every producer, by source, plane, "
                            "transfer direction and outcome (\"none\" off the kv_transfer plane).",
                            {"source", "plane", "direction", "outcome"}}));
  KVGOV_ASSIGN_OR_RETURN(
      accounting->bytes_moved_,
      registry->AddCounter({"kvgov_bytes_moved_total",
                            "KV bytes transports reported moving, by source and tiers.",
                            {"source", "from_tier", "to_tier"}}));
  KVGOV_ASSIGN_OR_RETURN(
      accounting->verdicts_,
      registry->AddCounter({"kvgov_lookup_verdicts_total",
                            "Lookup verdicts the entries folded to, by source, kind and reason.",
                            {"source", "kind", "reason"}}));
  KVGOV_ASSIGN_OR_RETURN(
      accounting->tokens_saved_,
      registry->AddCounter({"kvgov_prefill_tokens_saved_total",
                            "Prefill tokens saved, credited only to the source that saved them: "
                            "local sources on servable hits, the provider on its cache reads.",
                            {"source"}}));
  KVGOV_ASSIGN_OR_RETURN(
      accounting->tokens_saved_by_tenant_,
      registry->AddCounter({"kvgov_prefill_tokens_saved_by_tenant_total",
                            "kvgov_prefill_tokens_saved_total by the entry's model and tenant "
                            "(\"unknown\" and \"none\" when it names neither).",
                            {"source", "model", "tenant"}}));
  return accounting;
}

LookupVerdict CacheAccounting::Record(const Entry& entry) {
  LookupVerdict verdict = FoldVerdict(entry);
  const std::string_view source = ToString(entry.source);
  events_
      ->WithLabels({source, ToString(entry.plane), LabelOr(entry, "direction", "none"),
                    LabelOr(entry, "outcome", "none")})
      ->Inc();
  if (entry.metrics.bytes_transferred > 0) {
    bytes_moved_
        ->WithLabels(
            {source, LabelOr(entry, "from_tier", "unknown"), TierName(entry.residency.tier)})
        ->Add(entry.metrics.bytes_transferred);
  }
  verdicts_
      ->WithLabels({source, ToString(verdict.kind),
                    verdict.reason == LookupReason::kNone ? "none" : ToString(verdict.reason)})
      ->Inc();
  if (int64_t credited = ReuseLedger::CreditedTokens(entry, verdict); credited > 0) {
    tokens_saved_->WithLabels({source})->Add(credited);
    saved_by_source_[static_cast<size_t>(entry.source)].fetch_add(credited,
                                                                  std::memory_order_relaxed);
    const std::string_view model = entry.derivation.model_id.empty()
                                       ? LabelOr(entry, "model", "unknown")
                                       : std::string_view(entry.derivation.model_id);
    tokens_saved_by_tenant_->WithLabels({source, model, LabelOr(entry, "tenant", "none")})
        ->Add(credited);
  }
  return verdict;
}

double CacheAccounting::SavedTokens(Source source) const {
  return static_cast<double>(
      saved_by_source_[static_cast<size_t>(source)].load(std::memory_order_relaxed));
}

}  // namespace kvgov::metrics
