#include "kvgov/core/provider_cache.h"

#include <gtest/gtest.h>

#include "kvgov/core/admission.h"

namespace kvgov {
namespace {

ProviderCache Base() {
  ProviderCache cache;
  cache.provider = Provider::kAnthropic;
  cache.model_id = "claude-sonnet";
  cache.cached_tokens = 1200;
  cache.prompt_tokens = 1500;
  cache.serializer_id = "chat-template-v3";
  return cache;
}

TEST(ProviderCacheTest, IsCostTelemetryNotTrust) {
  ProviderCache cache = Base();
  cache.retention = "1h";
  Result<Entry> entry = FromProviderCache(cache);
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  EXPECT_EQ(entry->plane, Plane::kProvider);
  EXPECT_EQ(entry->source, Source::kProvider);
  EXPECT_EQ(entry->residency.tier, ResidencyTier::kProvider);
  EXPECT_EQ(entry->id.media_type, MediaType::kPromptPrefix);
  EXPECT_EQ(entry->id.unit, LengthUnit::kTokens);
  EXPECT_EQ(entry->id.length, 1500);
  EXPECT_EQ(entry->metrics.prefill_tokens_saved, 1200);
  EXPECT_EQ(entry->validity.ttl_millis, 3600000);
  EXPECT_EQ(entry->security.admission_verdict, AdmissionVerdict::kDefer);
  EXPECT_EQ(entry->security.taint, Taint::kTainted);
  EXPECT_EQ(entry->security.reason, "provider_cache_telemetry");
  EXPECT_EQ(entry->security.admitted_by, "anthropic");

  LookupVerdict verdict = ProviderCacheVerdict(*entry);
  EXPECT_EQ(verdict.kind, LookupKind::kTransform);
  EXPECT_EQ(verdict.reason, LookupReason::kPolicyMismatch);
  EXPECT_EQ(verdict.meta.at("provider_cache"), "cost_latency_only");
  EXPECT_FALSE(verdict.CanServe());
}

TEST(ProviderCacheTest, AdmissionPolicyNeverAdmitsProviderTelemetry) {
  Entry entry = *FromProviderCache(Base());
  AdmissionPolicy policy({{"anthropic", Scope::kFleet, "operator"}});
  EXPECT_EQ(policy.Admit(entry).security.taint, Taint::kTainted);
}

TEST(ProviderCacheTest, EachVaryAxisAloneChangesTheIdentity) {
  const std::string base = ProviderCacheDigest(Base());
  auto with = [](auto mutate) {
    ProviderCache cache = Base();
    mutate(cache);
    return ProviderCacheDigest(cache);
  };
  EXPECT_NE(with([](ProviderCache& c) { c.endpoint = "coding"; }), base);
  EXPECT_NE(with([](ProviderCache& c) { c.reasoning_mode = "max"; }), base);
  EXPECT_NE(with([](ProviderCache& c) { c.tool_set_id = "tools-a"; }), base);
  EXPECT_NE(with([](ProviderCache& c) { c.region = "us-east-1"; }), base);
  EXPECT_NE(with([](ProviderCache& c) { c.provider = Provider::kOpenAI; }), base);
  EXPECT_NE(with([](ProviderCache& c) { c.model_id = "claude-opus"; }), base);
  EXPECT_NE(with([](ProviderCache& c) { c.serializer_id = "chat-template-v4"; }), base);
  // Token counts are usage, not identity.
  EXPECT_EQ(with([](ProviderCache& c) { c.cached_tokens = 7; }), base);
}

TEST(ProviderCacheTest, ToolSetAndRegionDoNotAlias) {
  ProviderCache tool_set = Base();
  tool_set.tool_set_id = "x";
  ProviderCache region = Base();
  region.region = "x";
  EXPECT_NE(ProviderCacheDigest(tool_set), ProviderCacheDigest(region));
}

TEST(ProviderCacheTest, BaseEntryEmitsNoOptionalLabels) {
  Entry entry = *FromProviderCache(Base());
  EXPECT_EQ(entry.labels.size(), 2u);
  EXPECT_EQ(entry.labels.at("provider"), "anthropic");
  EXPECT_EQ(entry.labels.at("plane"), "provider");

  ProviderCache full = Base();
  full.endpoint = "coding";
  full.reasoning_mode = "enabled";
  full.tool_set_id = "tools-a";
  full.region = "eu";
  full.breakpoint_mode = BreakpointMode::kExplicit;
  full.retention = "5m";
  full.write_tokens = 300;
  full.first_diverge_at = 900;
  Entry labelled = *FromProviderCache(full);
  EXPECT_EQ(labelled.labels.at("endpoint"), "coding");
  EXPECT_EQ(labelled.labels.at("reasoning_mode"), "enabled");
  EXPECT_EQ(labelled.labels.at("tool_set"), "tools-a");
  EXPECT_EQ(labelled.labels.at("region"), "eu");
  EXPECT_EQ(labelled.labels.at("breakpoint_mode"), "explicit");
  EXPECT_EQ(labelled.labels.at("retention"), "5m");
  EXPECT_EQ(labelled.labels.at("cache_write_tokens"), "300");
  EXPECT_EQ(labelled.labels.at("first_diverge_at"), "900");
  EXPECT_EQ(labelled.validity.ttl_millis, 300000);
}

TEST(ProviderCacheTest, WriteOnlyTurnIsRecorded) {
  ProviderCache cache = Base();
  cache.cached_tokens = 0;
  cache.write_tokens = 1500;
  Result<Entry> entry = FromProviderCache(cache);
  ASSERT_TRUE(entry.ok());
  EXPECT_EQ(entry->metrics.prefill_tokens_saved, 0);
  EXPECT_EQ(entry->labels.at("cache_write_tokens"), "1500");
}

TEST(ProviderCacheTest, RetentionSpellings) {
  auto ttl = [](std::string retention) {
    ProviderCache cache = Base();
    cache.retention = std::move(retention);
    Result<Entry> entry = FromProviderCache(cache);
    return entry.ok() ? entry->validity.ttl_millis : -1;
  };
  EXPECT_EQ(ttl("5m"), 300000);
  EXPECT_EQ(ttl("5min"), 300000);
  EXPECT_EQ(ttl("60m"), 3600000);
  EXPECT_EQ(ttl("24h"), 86400000);
  EXPECT_EQ(ttl("30s"), 30000);
  EXPECT_EQ(ttl(""), 0);
  EXPECT_EQ(ttl("forever"), -1);
  EXPECT_EQ(ttl("5"), -1);
  EXPECT_EQ(ttl("0m"), -1);
  EXPECT_EQ(ttl("5d"), -1);
}

TEST(ProviderCacheTest, RejectsMissingModelAndNegativeCounts) {
  ProviderCache cache = Base();
  cache.model_id.clear();
  EXPECT_EQ(FromProviderCache(cache).status().message(), "model_id: required, got empty");
  cache = Base();
  cache.cached_tokens = -3;
  EXPECT_EQ(FromProviderCache(cache).status().message(), "cached_tokens: must be >= 0, got -3");
}

}  // namespace
}  // namespace kvgov
