#include "kvgov/core/tool_result.h"

#include <gtest/gtest.h>

namespace kvgov {
namespace {

ToolResult Fill() {
  ToolResult result;
  result.key = "web_search:9f2c:7";
  result.event = ToolResultEvent::kFill;
  result.result_digest = "r-digest";
  result.size_bytes = 2048;
  return result;
}

TEST(ToolResultTest, KeyNeedsExactlyThreeNonEmptyParts) {
  Result<ToolResultKey> key = ParseToolResultKey("web_search:9f2c:7");
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(key->tool, "web_search");
  EXPECT_EQ(key->args_digest, "9f2c");
  EXPECT_EQ(key->epoch, "7");
  for (const char* bad : {"", "a", "a:b", "a:b:c:d", "a::c", ":b:c", "a:b:", "::"}) {
    Result<ToolResultKey> parsed = ParseToolResultKey(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(ToolResultTest, FillLowersOntoTheToolResultPlane) {
  Result<Entry> entry = FromToolResult(Fill());
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  EXPECT_EQ(entry->plane, Plane::kToolResult);
  EXPECT_EQ(entry->source, Source::kToolResult);
  EXPECT_EQ(entry->id, (EntryId{"r-digest", MediaType::kBytes, 2048, LengthUnit::kBytes}));
  EXPECT_EQ(entry->derivation.tool, "web_search");
  EXPECT_EQ(entry->derivation.args_digest, "9f2c");
  EXPECT_EQ(entry->validity.admitted_at_epoch, "7");
  EXPECT_EQ(entry->residency.tier, ResidencyTier::kDRAM);
  EXPECT_EQ(entry->residency.owner, "vdso");
  EXPECT_EQ(entry->residency.lease, "lru");
  EXPECT_EQ(entry->coherence.invalidation_mode, InvalidationMode::kWriteEpoch);
  EXPECT_TRUE(ToolResultVerdict(*entry).CanServe());
}

TEST(ToolResultTest, WitnessMeansExternalRefutation) {
  ToolResult result = Fill();
  result.witness = "etag-1";
  EXPECT_EQ(FromToolResult(result)->coherence.invalidation_mode,
            InvalidationMode::kExternalRefutation);
}

TEST(ToolResultTest, VerdictsPerEvent) {
  auto verdict = [](ToolResultEvent event) {
    ToolResult result = Fill();
    result.event = event;
    return ToolResultVerdict(*FromToolResult(result));
  };
  EXPECT_TRUE(verdict(ToolResultEvent::kHit).CanServe());
  EXPECT_EQ(verdict(ToolResultEvent::kEvict).reason, LookupReason::kEvicted);
  EXPECT_EQ(verdict(ToolResultEvent::kRevoke).reason, LookupReason::kRefutedWitness);
  EXPECT_EQ(verdict(ToolResultEvent::kMiss).reason, LookupReason::kAbsent);
  EXPECT_FALSE(verdict(ToolResultEvent::kMiss).CanServe());
}

TEST(ToolResultTest, MissHasNoDigestAndRecomputes) {
  ToolResult miss = Fill();
  miss.event = ToolResultEvent::kMiss;
  miss.result_digest.clear();
  Result<Entry> entry = FromToolResult(miss);
  ASSERT_TRUE(entry.ok());
  EXPECT_FALSE(entry->id.Valid());
  EXPECT_EQ(entry->residency.tier, ResidencyTier::kRecompute);
}

TEST(ToolResultTest, NonMissNeedsADigest) {
  ToolResult result = Fill();
  result.result_digest.clear();
  EXPECT_EQ(FromToolResult(result).status().message(), "result_digest: required, got empty");
}

TEST(ToolResultTest, TamperedEventLabelFailsClosed) {
  Entry entry = *FromToolResult(Fill());
  entry.labels["tool_result_event"] = "hitt";
  EXPECT_EQ(ToolResultVerdict(entry).reason, LookupReason::kAbsent);
  entry.labels.erase("tool_result_event");
  EXPECT_FALSE(ToolResultVerdict(entry).CanServe());
}

}  // namespace
}  // namespace kvgov
