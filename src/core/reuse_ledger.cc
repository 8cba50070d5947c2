#include "kvgov/core/reuse_ledger.h"

namespace kvgov {

int64_t ReuseLedger::CreditedTokens(const Entry& entry, const LookupVerdict& verdict) {
  // The provider's saving is real but it is the provider's: credited on the
  // provider side alone, whatever the (never servable) verdict says.
  if (entry.source == Source::kProvider || verdict.CanServe()) {
    return entry.metrics.prefill_tokens_saved;
  }
  return 0;
}

bool ReuseLedger::Fold(const Entry& entry, const LookupVerdict& verdict) {
  SourceReuse& reuse = by_source_[Index(entry.source)];
  ++reuse.events;
  reuse.tokens_saved += CreditedTokens(entry, verdict);
  if (entry.source == Source::kProvider) {
    if (entry.id.media_type == MediaType::kPromptPrefix && entry.metrics.prefill_tokens_saved > 0) {
      ++reuse.hits;
    }
    return true;
  }
  if (verdict.CanServe()) ++reuse.hits;
  return false;
}

int64_t ReuseLedger::LocalTokensSaved() const {
  int64_t total = 0;
  for (Source source : {Source::kRideEngine, Source::kNative, Source::kToolResult}) {
    total += For(source).tokens_saved;
  }
  return total;
}

}  // namespace kvgov
