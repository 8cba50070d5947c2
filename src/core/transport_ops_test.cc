#include "kvgov/core/transport_ops.h"

#include <gtest/gtest.h>

namespace kvgov {
namespace {

KVSpanReport Span() {
  KVSpanReport span;
  span.span_digest = "chunk-7";
  span.tokens = 256;
  return span;
}

TEST(TransportOpsTest, MooncakeOperationsMapToTheSeedDirections) {
  EXPECT_EQ(DirectionFor(MooncakeOperation::kTransfer), KVTransferDirection::kMigrate);
  EXPECT_EQ(DirectionFor(MooncakeOperation::kLookup), KVTransferDirection::kRoute);
  EXPECT_EQ(DirectionFor(MooncakeOperation::kMaterialize), KVTransferDirection::kRestore);
  EXPECT_EQ(DirectionFor(MooncakeOperation::kPut), KVTransferDirection::kStore);
  EXPECT_EQ(DirectionFor(MooncakeOperation::kRemove), KVTransferDirection::kEvict);
}

TEST(TransportOpsTest, LMCacheOperationsMapToTheSeedDirections) {
  EXPECT_EQ(DirectionFor(LMCacheOperation::kOffload), KVTransferDirection::kOffload);
  EXPECT_EQ(DirectionFor(LMCacheOperation::kRestore), KVTransferDirection::kRestore);
  EXPECT_EQ(DirectionFor(LMCacheOperation::kEvict), KVTransferDirection::kEvict);
}

TEST(TransportOpsTest, MooncakeTransferLowersAsMigrateOwnedByMooncake) {
  Result<Entry> entry = FromMooncake({MooncakeOperation::kTransfer, Span()});
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  EXPECT_EQ(entry->plane, Plane::kKVTransfer);
  EXPECT_EQ(entry->source, Source::kRideEngine);
  EXPECT_EQ(entry->residency.owner, "mooncake");
  EXPECT_EQ(entry->labels.at("direction"), "migrate");
  EXPECT_EQ(entry->labels.at("transport"), "mooncake");
  EXPECT_EQ(entry->labels.at("mooncake_op"), "transfer");
  EXPECT_TRUE(KVTransferVerdict(*entry).CanServe());
}

TEST(TransportOpsTest, RemovalsAreTypedMissesNotHits) {
  Result<Entry> removed = FromMooncake({MooncakeOperation::kRemove, Span()});
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(KVTransferVerdict(*removed).reason, LookupReason::kEvicted);

  Result<Entry> evicted = FromLMCache({LMCacheOperation::kEvict, Span()});
  ASSERT_TRUE(evicted.ok());
  EXPECT_EQ(evicted->labels.at("lmcache_op"), "evict");
  EXPECT_FALSE(KVTransferVerdict(*evicted).CanServe());
}

TEST(TransportOpsTest, ExplicitOwnerWinsAndBadSpanIsRejected) {
  KVSpanReport span = Span();
  span.owner = "vllm+lmcache";
  Result<Entry> entry = FromLMCache({LMCacheOperation::kOffload, span});
  ASSERT_TRUE(entry.ok());
  EXPECT_EQ(entry->residency.owner, "vllm+lmcache");

  span.span_digest.clear();
  EXPECT_EQ(FromLMCache({LMCacheOperation::kOffload, span}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvgov
