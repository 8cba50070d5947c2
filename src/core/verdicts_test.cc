#include "kvgov/core/verdicts.h"

#include <gtest/gtest.h>

#include "kvgov/core/kv_transfer.h"
#include "kvgov/core/provider_cache.h"
#include "kvgov/core/reuse_ledger.h"

namespace kvgov {
namespace {

TEST(FoldVerdictTest, DispatchesOnThePlane) {
  KVTransfer transfer;
  transfer.direction = KVTransferDirection::kEvict;
  transfer.span.span_digest = "s";
  EXPECT_EQ(FoldVerdict(*FromKVTransfer(transfer)).reason, LookupReason::kEvicted);

  ProviderCache cache;
  cache.model_id = "m";
  EXPECT_EQ(FoldVerdict(*FromProviderCache(cache)).kind, LookupKind::kTransform);
}

TEST(FoldVerdictTest, PlanesWithoutAFoldNeverServe) {
  Entry entry;
  entry.plane = Plane::kMemoryView;
  entry.id = EntryId{"d", MediaType::kBytes, 1, LengthUnit::kBytes};
  LookupVerdict verdict = FoldVerdict(entry);
  EXPECT_EQ(verdict.kind, LookupKind::kMiss);
  EXPECT_FALSE(verdict.CanServe());
}

TEST(FoldVerdictTest, CreditedTokensFollowSourceRules) {
  KVTransfer route;
  route.direction = KVTransferDirection::kRoute;
  route.span.span_digest = "s";
  Entry served = *FromKVTransfer(route);
  served.metrics.prefill_tokens_saved = 64;
  EXPECT_EQ(ReuseLedger::CreditedTokens(served, FoldVerdict(served)), 64);

  route.direction = KVTransferDirection::kEvict;
  Entry evicted = *FromKVTransfer(route);
  evicted.metrics.prefill_tokens_saved = 64;
  EXPECT_EQ(ReuseLedger::CreditedTokens(evicted, FoldVerdict(evicted)), 0);

  ProviderCache cache;
  cache.model_id = "m";
  cache.cached_tokens = 500;
  Entry provider = *FromProviderCache(cache);
  EXPECT_EQ(ReuseLedger::CreditedTokens(provider, FoldVerdict(provider)), 500);
}

}  // namespace
}  // namespace kvgov
