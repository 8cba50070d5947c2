#include "kvgov/codec/ingest_batch.h"

#include <gtest/gtest.h>

namespace kvgov {
namespace {

JsonLimits Limits() { return JsonLimits{8 << 20, 32, 1 << 20}; }

TEST(IngestBatchTest, DecodesEveryTypeAndKeepsResidencyApart) {
  Result<IngestBatch> batch = DecodeIngestBatchJson(R"({"events":[
    {"type":"kv_transfer","direction":"offload","span_digest":"s1","tokens":32,
     "from_tier":"hbm","to_tier":"dram","worker":"w1","token_ids":[1,2,3,4],"cache_salt":"t1"},
    {"type":"nixl_lease","lease_id":"l1","event":"create","role":"prefill_pin","span_digest":"s"},
    {"type":"provider_cache","provider":"openai","model_id":"gpt","cached_tokens":10},
    {"type":"tool_result","key":"t:a:1","event":"fill","result_digest":"d"},
    {"type":"entry","id":{"digest":"d"},"plane":"kv_prefix"}
  ]})",
                                                    Limits());
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->events.size(), 5u);
  for (const auto& event : batch->events) ASSERT_TRUE(event.ok()) << event.status().ToString();

  const IngestEvent& transfer = *batch->events[0];
  EXPECT_EQ(IngestTypeName(transfer.record), "kv_transfer");
  EXPECT_EQ(std::get<KVTransfer>(transfer.record).span.to_tier, ResidencyTier::kDRAM);
  ASSERT_TRUE(transfer.residency.has_value());
  EXPECT_EQ(transfer.residency->worker, "w1");
  EXPECT_EQ(transfer.residency->token_ids, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(transfer.residency->cache_salt, "t1");

  EXPECT_EQ(IngestTypeName(batch->events[1]->record), "nixl_lease");
  EXPECT_FALSE(batch->events[1]->residency.has_value());
  EXPECT_EQ(IngestTypeName(batch->events[2]->record), "provider_cache");
  EXPECT_EQ(IngestTypeName(batch->events[3]->record), "tool_result");
  EXPECT_EQ(std::get<Entry>(batch->events[4]->record).plane, Plane::kKVPrefix);
}

TEST(IngestBatchTest, BlockHashesMayExceedInt64) {
  Result<IngestBatch> batch = DecodeIngestBatchJson(
      R"({"events":[{"type":"kv_transfer","direction":"evict","span_digest":"s",
          "worker":"w1","block_hashes":[18446744073709551615, 7]}]})",
      Limits());
  ASSERT_TRUE(batch.ok());
  ASSERT_TRUE(batch->events[0].ok()) << batch->events[0].status().ToString();
  EXPECT_EQ(batch->events[0]->residency->block_hashes,
            (std::vector<uint64_t>{18446744073709551615ull, 7}));
}

TEST(IngestBatchTest, OneBadElementDoesNotRejectItsNeighbours) {
  Result<IngestBatch> batch = DecodeIngestBatchJson(R"({"events":[
    {"type":"tool_result","key":"t:a:1","event":"fill","result_digest":"d"},
    {"type":"kv_transfer","direction":"sideways","span_digest":"s"},
    {"type":"gossip"},
    {"direction":"offload"},
    {"type":"kv_transfer","direction":"offload","span_digest":"s","token_ids":[1]},
    {"type":"kv_transfer","direction":"offload","span_digest":"s","worker":"w","token_ids":[1],
     "block_hashes":[2]},
    7
  ]})",
                                                    Limits());
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->events.size(), 7u);
  EXPECT_TRUE(batch->events[0].ok());
  auto message = [&](size_t i) { return batch->events[i].status().message(); };
  EXPECT_EQ(message(1).rfind("$.events[1].direction: unknown kv transfer direction 'sideways'", 0),
            0u)
      << message(1);
  EXPECT_EQ(message(2).rfind("$.events[2].type: unknown event type 'gossip'", 0), 0u) << message(2);
  EXPECT_EQ(message(3), "$.events[3].type: required");
  EXPECT_EQ(message(4), "$.events[4].worker: required when the span is named");
  EXPECT_EQ(message(5), "$.events[5].block_hashes: give token_ids or block_hashes, not both");
  EXPECT_EQ(message(6).rfind("$.events[6]: want an object", 0), 0u) << message(6);
}

TEST(IngestBatchTest, WholeBodyErrors) {
  EXPECT_EQ(DecodeIngestBatchJson("not json", Limits()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeIngestBatchJson("{}", Limits()).status().message(), "$.events: required");
  EXPECT_EQ(DecodeIngestBatchJson(R"({"events":[],"extra":1})", Limits()).status().message(),
            "$.extra: unknown field");
  EXPECT_EQ(DecodeIngestBatchJson(R"({"events":{}})", Limits()).status().code(),
            StatusCode::kInvalidArgument);
  JsonLimits tiny{16, 32, 1 << 20};
  EXPECT_EQ(DecodeIngestBatchJson(R"({"events":[1,2,3,4,5,6]})", tiny).status().code(),
            StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace kvgov
