#include "kvgov/core/reuse_ledger.h"

namespace kvgov {

bool ReuseLedger::Fold(const Entry& entry, const LookupVerdict& verdict) {
  SourceReuse& reuse = by_source_[Index(entry.source)];
  ++reuse.events;
  if (entry.source == Source::kProvider) {
    // The provider's saving is real but it is the provider's: credit it on
    // the provider side alone, whatever the (never servable) verdict says.
    reuse.tokens_saved += entry.metrics.prefill_tokens_saved;
    if (entry.id.media_type == MediaType::kPromptPrefix && entry.metrics.prefill_tokens_saved > 0) {
      ++reuse.hits;
    }
    return true;
  }
  if (verdict.CanServe()) {
    ++reuse.hits;
    reuse.tokens_saved += entry.metrics.prefill_tokens_saved;
  }
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
