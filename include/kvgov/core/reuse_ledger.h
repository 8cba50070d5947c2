#pragma once

#include <array>
#include <cstdint>

#include "kvgov/core/envelope.h"
#include "kvgov/core/lookup_verdict.h"

namespace kvgov {

/// Reuse counted for one source.
struct SourceReuse {
  uint64_t events = 0;
  uint64_t hits = 0;         // servable hits; provider: prompt-prefix reads
  int64_t tokens_saved = 0;  // provider: tokens read from the provider cache
  friend bool operator==(const SourceReuse&, const SourceReuse&) = default;
};

/// Keeps the savings of the four sources apart. A local source earns tokens
/// only for a servable hit; a provider entry is credited to the provider
/// side alone, whatever its verdict, so a provider saving can never show up
/// as a kvgov win and vice versa.
/// Not thread-safe: callers serialise Fold.
class ReuseLedger {
 public:
  /// The prefill tokens this entry credits to its own source: a provider
  /// entry's cached tokens whatever its verdict, a local entry's saved
  /// tokens only when the verdict can serve, else 0. Metrics use this too,
  /// so the ledger and the counters cannot disagree.
  static int64_t CreditedTokens(const Entry& entry, const LookupVerdict& verdict);

  /// Folds one lowered entry and its verdict. Returns true exactly when the
  /// provider side was touched.
  bool Fold(const Entry& entry, const LookupVerdict& verdict);

  const SourceReuse& For(Source source) const { return by_source_[Index(source)]; }

  /// Tokens saved by every source but the provider.
  int64_t LocalTokensSaved() const;

 private:
  static size_t Index(Source source) { return static_cast<size_t>(source); }

  std::array<SourceReuse, 4> by_source_{};
};

}  // namespace kvgov
