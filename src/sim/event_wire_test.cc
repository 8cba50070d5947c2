#include "kvgov/sim/event_wire.h"

#include <gtest/gtest.h>

#include "kvgov/adapters/engine_wire.h"

namespace kvgov::sim {
namespace {

EngineEventBatch SampleBatch() {
  EngineEventBatch batch;
  batch.ts = 1789095808.5;
  batch.dp_rank = 0;
  BlockStored salted;
  salted.block_hashes = {0xffffffffffffff01ULL, 2};  // beyond int64: vLLM sends u64
  salted.token_ids = {1, 2, 3, 4, 5, 6, 7, 8};
  salted.block_size = 4;
  salted.medium = "GPU";
  salted.extra_keys = {"[\"tenant-salt\"]", ""};
  BlockStored child;
  child.block_hashes = {3};
  child.parent_block_hash = 2;
  child.token_ids = {9, 10, 11, 12};
  child.block_size = 4;
  child.medium = "CPU";
  child.lora_name = "adapter-a";
  child.extra_keys = {R"(["adapter-a"])"};
  child.group_idx = 1;
  batch.events = {salted, child,
                  BlockRemoved{.block_hashes = {2, 3}, .medium = "GPU", .group_idx = 0},
                  AllBlocksCleared{}};
  return batch;
}

class EventWireTest : public ::testing::TestWithParam<WireEncoding> {};

TEST_P(EventWireTest, KvgovsDecoderReadsBackWhatTheSimulatorPublishes) {
  const EngineEventBatch batch = SampleBatch();
  Result<std::string> payload = EncodeEventBatch(batch, GetParam());
  ASSERT_TRUE(payload.ok()) << payload.status().ToString();
  Result<EngineEventBatch> decoded = adapters::DecodeEngineBatch(*payload);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, batch);
}

TEST_P(EventWireTest, AnUnsetRankIsOmitted) {
  EngineEventBatch batch;
  batch.ts = 1;
  batch.events = {AllBlocksCleared{}};
  Result<std::string> payload = EncodeEventBatch(batch, GetParam());
  ASSERT_TRUE(payload.ok());
  EXPECT_EQ(static_cast<unsigned char>((*payload)[0]), 0x92);  // fixarray of 2
  Result<EngineEventBatch> decoded = adapters::DecodeEngineBatch(*payload);
  ASSERT_TRUE(decoded.ok());
  EXPECT_FALSE(decoded->dp_rank.has_value());
}

TEST_P(EventWireTest, AnExtraKeyThatIsNotAnArrayIsRefusedByIndex) {
  EngineEventBatch batch;
  BlockStored stored;
  stored.block_hashes = {1, 2};
  stored.token_ids = {1, 2};
  stored.block_size = 1;
  stored.extra_keys = {"", "{\"a\":1.5}"};
  batch.events = {stored};
  Result<std::string> payload = EncodeEventBatch(batch, GetParam());
  ASSERT_FALSE(payload.ok());
  EXPECT_EQ(payload.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(payload.status().message().find("extra_keys[1]"), std::string::npos);
}

std::string EncodingName(const ::testing::TestParamInfo<WireEncoding>& param) {
  return param.param == WireEncoding::kMap ? "Map" : "LegacyPositional";
}

INSTANTIATE_TEST_SUITE_P(BothEncodings, EventWireTest,
                         ::testing::Values(WireEncoding::kMap, WireEncoding::kLegacyPositional),
                         EncodingName);

TEST(EventWireLegacyTest, PositionalEventsCarryNilForUnsetMiddleFields) {
  EngineEventBatch batch;
  batch.ts = 1;
  BlockStored stored;
  stored.block_hashes = {1};
  stored.token_ids = {1};
  stored.block_size = 1;
  stored.medium = "GPU";
  batch.events = {stored};
  Result<std::string> payload = EncodeEventBatch(batch, WireEncoding::kLegacyPositional);
  ASSERT_TRUE(payload.ok());
  // [tag, hashes, parent=nil, tokens, block_size, lora_id=nil, medium]: the
  // trailing defaults past medium are trimmed, the inner ones stay nil.
  const std::string expected_event =
      "\x97\xab"
      "BlockStored"
      "\x91\x01\xc0\x91\x01\x01\xc0\xa3"
      "GPU";
  EXPECT_NE(payload->find(expected_event), std::string::npos);
}

}  // namespace
}  // namespace kvgov::sim
