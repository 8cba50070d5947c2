#include "kvgov/client/event.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvgov/codec/ingest_batch.h"

namespace kvgov::client {
namespace {

using ::testing::HasSubstr;

// The SDK writes its JSON by hand; kvgov's own decoder is the judge of it.
IngestEvent DecodeWithKvgov(const std::string& element) {
  Result<IngestBatch> batch = DecodeIngestBatchJson("{\"events\":[" + element + "]}", {});
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ(batch->events.size(), 1u);
  EXPECT_TRUE(batch->events[0].ok()) << batch->events[0].status().ToString() << "\n" << element;
  return std::move(batch->events[0]).value();
}

KVTransfer FullTransfer() {
  KVTransfer transfer;
  transfer.direction = KVTransferDirection::kMigrate;
  KVSpanReport& span = transfer.span;
  span.span_digest = "sha256:ab\"c\\d\n";
  span.tokens = 48;
  span.model_id = "llama-3-8b";
  span.tokenizer_id = "tok";
  span.serializer_id = "ser";
  span.position_mode = PositionMode::kPrefixAligned;
  span.from_tier = ResidencyTier::kHBM;
  span.to_tier = ResidencyTier::kRemote;
  span.owner = "vllm+nixl";
  span.lease = "lease-7";
  span.outcome = KVTransferOutcome::kFault;
  span.fault_reason = "rdma timeout \xc3\xa9";  // é
  span.bytes_moved = int64_t{1} << 40;
  span.deletion_certificate = {"s", "sub", "d"};
  return transfer;
}

KVTransfer Minimal(KVTransferDirection direction, std::string digest) {
  KVTransfer transfer;
  transfer.direction = direction;
  transfer.span.span_digest = std::move(digest);
  return transfer;
}

TEST(EncodeEventTest, TransferRoundTripsThroughKvgovsDecoder) {
  const KVTransfer transfer = FullTransfer();
  Result<std::string> json = EncodeEvent(TransferEvent(transfer));
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_EQ(json->find('\n'), std::string::npos);  // a spool line as it is
  IngestEvent decoded = DecodeWithKvgov(*json);
  EXPECT_EQ(std::get<KVTransfer>(decoded.record), transfer);
  EXPECT_FALSE(decoded.residency.has_value());
}

TEST(EncodeEventTest, DefaultsAreOmitted) {
  Result<std::string> json = EncodeEvent(TransferEvent(Minimal(KVTransferDirection::kRoute, "s")));
  ASSERT_TRUE(json.ok());
  EXPECT_EQ(*json, R"({"type":"kv_transfer","direction":"route","span_digest":"s"})");
}

TEST(EncodeEventTest, LocationRidesFlatBesideTheRecord) {
  SpanLocation where;
  where.worker = "w2";
  where.from_worker = "w1";
  where.token_ids = {1, 0, 2147483647};  // both ends of the token id range
  where.lora_name = "adapter";
  where.cache_salt = "salt";
  where.group_idx = 3;
  Result<std::string> json = EncodeEvent(TransferEvent(FullTransfer(), where));
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  IngestEvent decoded = DecodeWithKvgov(*json);
  ASSERT_TRUE(decoded.residency.has_value());
  EXPECT_EQ(decoded.residency->worker, "w2");
  EXPECT_EQ(decoded.residency->from_worker, "w1");
  EXPECT_EQ(decoded.residency->token_ids, where.token_ids);
  EXPECT_EQ(decoded.residency->lora_name, "adapter");
  EXPECT_EQ(decoded.residency->cache_salt, "salt");
  EXPECT_EQ(decoded.residency->group_idx, 3);

  SpanLocation hashes;
  hashes.worker = "w1";
  hashes.block_hashes = {0, 18446744073709551615ull};
  json = EncodeEvent(TransferEvent(FullTransfer(), hashes));
  ASSERT_TRUE(json.ok());
  EXPECT_EQ(DecodeWithKvgov(*json).residency->block_hashes, hashes.block_hashes);
}

TEST(EncodeEventTest, LeaseRoundTripsWithItsSpan) {
  NIXLLease lease;
  lease.lease_id = "l1";
  lease.trace_id = "t";
  lease.request_id = "r";
  lease.remote_engine = "prefill-0";
  lease.span_digest = "s";
  lease.tokens = 16;
  lease.model_id = "m";
  lease.tokenizer_id = "tk";
  lease.role = NIXLTransferRole::kDecodePull;
  lease.event = NIXLLeaseEvent::kHeartbeat;
  lease.granted_at_ms = 5;
  lease.expires_at_ms = 10;
  lease.ttl_ms = 30000;
  lease.bytes_moved = 4096;
  SpanLocation tokens;
  tokens.token_ids = {1, 2};
  Result<std::string> json = EncodeEvent(LeaseEvent(lease, tokens));
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  IngestEvent decoded = DecodeWithKvgov(*json);
  EXPECT_EQ(std::get<NIXLLease>(decoded.record), lease);
  // kvgov places a lease's span on its remote engine unless told otherwise.
  EXPECT_EQ(decoded.residency->worker, "prefill-0");
}

TEST(EncodeEventTest, RefusesWhatWouldFailAWholeBatch) {
  KVTransfer bad_utf8 = FullTransfer();
  bad_utf8.span.owner = "own\xff";
  Result<std::string> json = EncodeEvent(TransferEvent(bad_utf8));
  ASSERT_FALSE(json.ok());
  EXPECT_EQ(json.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(json.status().message(), HasSubstr("owner: not valid UTF-8"));

  KVTransfer bad_cert = FullTransfer();
  bad_cert.span.deletion_certificate.digest = "\xed\xa0\x80";  // a surrogate
  EXPECT_THAT(EncodeEvent(TransferEvent(bad_cert)).status().message(),
              HasSubstr("deletion_certificate: digest: not valid UTF-8"));

  KVTransfer bad_enum = FullTransfer();
  bad_enum.direction = static_cast<KVTransferDirection>(99);
  EXPECT_THAT(EncodeEvent(TransferEvent(bad_enum)).status().message(),
              HasSubstr("direction: value 99 is not a kv transfer direction"));

  SpanLocation huge;
  huge.worker = "w1";
  huge.token_ids.assign(kMaxSpanItems + 1, 7);
  EXPECT_THAT(EncodeEvent(TransferEvent(FullTransfer(), huge)).status().message(),
              HasSubstr("token_ids: 1048577 items, over kvgov's limit of 1048576"));
}

TEST(EncodeEventTest, LeavesSemanticChecksToKvgov) {
  // An empty digest is kvgov's to reject, for this element alone.
  Result<std::string> json = EncodeEvent(TransferEvent(Minimal(KVTransferDirection::kStore, "")));
  ASSERT_TRUE(json.ok());
  EXPECT_EQ(*json, R"({"type":"kv_transfer","direction":"store","span_digest":""})");
}

}  // namespace
}  // namespace kvgov::client
