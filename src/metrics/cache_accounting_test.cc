#include "kvgov/metrics/cache_accounting.h"

#include <gtest/gtest.h>

#include "kvgov/core/kv_transfer.h"
#include "kvgov/core/provider_cache.h"
#include "kvgov/metrics/registry.h"

namespace kvgov::metrics {
namespace {

// A provider's read of 100 cached tokens of a 400-token prompt.
Result<Entry> ProviderRead() {
  ProviderCache cache;
  cache.model_id = "gpt";
  cache.cached_tokens = 100;
  cache.prompt_tokens = 400;
  cache.serializer_id = "chat-v1";
  return FromProviderCache(cache);
}

// A provider's cache read and an engine transfer each count under their
// own source: a provider's saving never lands in a local counter.
TEST(CacheAccountingTest, EachEntryCountsUnderItsOwnSource) {
  Registry registry;
  Result<std::unique_ptr<CacheAccounting>> accounting = CacheAccounting::Create(&registry);
  ASSERT_TRUE(accounting.ok()) << accounting.status().ToString();

  Result<Entry> provider = ProviderRead();
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();

  KVTransfer transfer;
  transfer.direction = KVTransferDirection::kOffload;
  transfer.span.span_digest = std::string(64, 'a');
  transfer.span.tokens = 64;
  transfer.span.bytes_moved = 4096;
  transfer.span.to_tier = ResidencyTier::kDRAM;
  Result<Entry> engine = FromKVTransfer(transfer);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ASSERT_NE(provider->source, engine->source);

  (*accounting)->Record(*provider);
  (*accounting)->Record(*engine);
  const std::string text = registry.Render();
  const std::string provider_source(ToString(provider->source));
  const std::string engine_source(ToString(engine->source));
  EXPECT_NE(text.find("kvgov_prefill_tokens_saved_total{source=\"" + provider_source + "\"} 100"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("kvgov_prefill_tokens_saved_total{source=\"" + engine_source + "\"}"),
            std::string::npos)
      << "a transfer saves no prefill by itself\n"
      << text;
  EXPECT_NE(text.find("kvgov_bytes_moved_total{source=\"" + engine_source +
                      "\",from_tier=\"unknown\",to_tier=\"dram\"} 4096"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("kvgov_cache_events_total{source=\"" + engine_source +
                      "\",plane=\"kv_transfer\",direction=\"offload\""),
            std::string::npos)
      << text;
}

// Savings by model and tenant, from the derivation's model or the labels;
// never blended across sources.
TEST(CacheAccountingTest, SavingsAreAlsoCountedByModelAndTenant) {
  Registry registry;
  Result<std::unique_ptr<CacheAccounting>> accounting = CacheAccounting::Create(&registry);
  ASSERT_TRUE(accounting.ok()) << accounting.status().ToString();
  Result<Entry> provider = ProviderRead();
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  provider->labels["tenant"] = "acme";
  (*accounting)->Record(*provider);
  provider->labels.erase("tenant");
  (*accounting)->Record(*provider);

  const std::string text = registry.Render();
  const std::string source(ToString(provider->source));
  const std::string by_model = "kvgov_prefill_tokens_saved_by_tenant_total{source=\"" + source +
                               "\",model=\"" + provider->derivation.model_id + "\",tenant=";
  EXPECT_NE(text.find(by_model + "\"acme\"} 100"), std::string::npos) << text;
  EXPECT_NE(text.find(by_model + "\"none\"} 100"), std::string::npos) << text;
  EXPECT_NE(text.find("kvgov_prefill_tokens_saved_total{source=\"" + source + "\"} 200"),
            std::string::npos)
      << text;
}

TEST(CacheAccountingTest, RegisteringTwiceIsRefusedByTheRegistry) {
  Registry registry;
  ASSERT_TRUE(CacheAccounting::Create(&registry).ok());
  EXPECT_FALSE(CacheAccounting::Create(&registry).ok());
}

}  // namespace
}  // namespace kvgov::metrics
