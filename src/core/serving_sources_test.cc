// One event per source through its real lowering: the four land on four
// planes and four sources, and only the provider touches provider counters.

#include <gtest/gtest.h>

#include <set>

#include "kvgov/core/kv_prefix.h"
#include "kvgov/core/kv_transfer.h"
#include "kvgov/core/provider_cache.h"
#include "kvgov/core/reuse_ledger.h"
#include "kvgov/core/tool_result.h"

namespace kvgov {
namespace {

struct Lowered {
  Entry entry;
  LookupVerdict verdict;
};

std::vector<Lowered> OnePerSource() {
  ProviderCache provider;
  provider.provider = Provider::kOpenAI;
  provider.model_id = "gpt";
  provider.cached_tokens = 4096;
  Entry provider_entry = *FromProviderCache(provider);

  KVTransfer route;
  route.direction = KVTransferDirection::kRoute;
  route.span.span_digest = "span";
  route.span.tokens = 64;
  Entry ride_entry = *FromKVTransfer(route);
  ride_entry.metrics.prefill_tokens_saved = 64;

  KVPrefix prefix;
  prefix.token_ids = {1, 2, 3, 4, 5, 6, 7, 8};
  prefix.model_id = "llama";
  prefix.reused_tokens = 8;
  Entry native_entry = *FromKVPrefix(prefix);

  ToolResult tool;
  tool.key = "grep:abc:1";
  tool.event = ToolResultEvent::kHit;
  tool.result_digest = "r";
  tool.size_bytes = 10;
  tool.saved_tokens = 300;
  Entry tool_entry = *FromToolResult(tool);

  return {
      {provider_entry, ProviderCacheVerdict(provider_entry)},
      {ride_entry, KVTransferVerdict(ride_entry)},
      {native_entry, KVPrefixVerdict(native_entry)},
      {tool_entry, ToolResultVerdict(tool_entry)},
  };
}

TEST(ServingSourcesTest, EventSourcesAreTagged) {
  std::vector<Lowered> events = OnePerSource();
  std::set<Plane> planes;
  std::set<Source> sources;
  for (const Lowered& event : events) {
    planes.insert(event.entry.plane);
    sources.insert(event.entry.source);
    EXPECT_EQ(event.entry.source, SourceForPlane(event.entry.plane));
  }
  EXPECT_EQ(planes, (std::set<Plane>{Plane::kProvider, Plane::kKVTransfer, Plane::kKVPrefix,
                                     Plane::kToolResult}));
  EXPECT_EQ(sources, (std::set<Source>{Source::kProvider, Source::kRideEngine, Source::kNative,
                                       Source::kToolResult}));

  ReuseLedger ledger;
  std::vector<bool> touched_provider;
  for (const Lowered& event : events) {
    touched_provider.push_back(ledger.Fold(event.entry, event.verdict));
  }
  EXPECT_EQ(touched_provider, (std::vector<bool>{true, false, false, false}));

  const SourceReuse& provider = ledger.For(Source::kProvider);
  EXPECT_EQ(provider.tokens_saved, 4096);
  EXPECT_EQ(provider.hits, 1u);
  EXPECT_EQ(ledger.For(Source::kRideEngine).tokens_saved, 64);
  EXPECT_EQ(ledger.For(Source::kNative).tokens_saved, 8);
  EXPECT_EQ(ledger.For(Source::kToolResult).tokens_saved, 300);
  // The provider's 4096 never leaks into the local total.
  EXPECT_EQ(ledger.LocalTokensSaved(), 64 + 8 + 300);
}

TEST(ServingSourcesTest, LocalSourcesEarnOnlyOnServableHits) {
  KVTransfer evict;
  evict.direction = KVTransferDirection::kEvict;
  evict.span.span_digest = "span";
  Entry entry = *FromKVTransfer(evict);
  entry.metrics.prefill_tokens_saved = 64;
  ReuseLedger ledger;
  EXPECT_FALSE(ledger.Fold(entry, KVTransferVerdict(entry)));
  EXPECT_EQ(ledger.For(Source::kRideEngine).events, 1u);
  EXPECT_EQ(ledger.For(Source::kRideEngine).hits, 0u);
  EXPECT_EQ(ledger.LocalTokensSaved(), 0);
}

}  // namespace
}  // namespace kvgov
