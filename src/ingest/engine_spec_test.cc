#include "kvgov/ingest/engine_spec.h"

#include <gtest/gtest.h>

namespace kvgov::ingest {
namespace {

TEST(EngineSpecTest, ParsesEveryKey) {
  Result<EngineSpec> spec = ParseEngineSpec(
      "id=w1,kind=sglang,events=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5559,model=qwen,"
      "block-size=64,pool-blocks=9864,dp-ranks=2,control=http://127.0.0.1:8000");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->id, "w1");
  EXPECT_EQ(spec->kind, EngineKind::kSglang);
  EXPECT_EQ(spec->events, "tcp://127.0.0.1:5557");
  EXPECT_EQ(spec->replay, "tcp://127.0.0.1:5559");
  EXPECT_EQ(spec->model, "qwen");
  EXPECT_EQ(spec->block_size, 64);
  EXPECT_EQ(spec->pool_blocks, 9864);
  EXPECT_EQ(spec->dp_ranks, 2);
  EXPECT_EQ(spec->control, "http://127.0.0.1:8000");
}

TEST(EngineSpecTest, ConnectorKeys) {
  Result<EngineSpec> spec = ParseEngineSpec(
      "id=w1,events=tcp://h:1,model=m,control=http://h:2,connector=webhook,connector-path=/evict");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->connector, "webhook");
  EXPECT_EQ(spec->connector_path, "/evict");
}

TEST(EngineSpecTest, DisaggregationKeys) {
  Result<EngineSpec> prefill = ParseEngineSpec(
      "id=p0,kind=sglang,events=tcp://h:1,model=m,role=prefill,kv-lease-ms=300000,"
      "bootstrap-port=9001");
  ASSERT_TRUE(prefill.ok()) << prefill.status().ToString();
  EXPECT_EQ(prefill->role, EngineRole::kPrefill);
  EXPECT_EQ(prefill->kv_lease_ms, 300000);
  EXPECT_EQ(prefill->bootstrap_port, 9001);
  Result<EngineSpec> decode = ParseEngineSpec("id=d0,events=tcp://h:1,model=m,role=decode");
  ASSERT_TRUE(decode.ok()) << decode.status().ToString();
  EXPECT_EQ(decode->role, EngineRole::kDecode);
  // Each engine's own pin time when not given.
  EXPECT_EQ(ParseEngineSpec("id=p,events=tcp://h:1,model=m,role=prefill")->kv_lease_ms, 30000);
  EXPECT_EQ(ParseEngineSpec("id=p,kind=sglang,events=tcp://h:1,model=m,role=prefill")->kv_lease_ms,
            300000);
}

TEST(EngineSpecTest, DefaultsAndOptionalKeys) {
  Result<EngineSpec> spec = ParseEngineSpec("id=w1,events=tcp://h:1,model=m");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->kind, EngineKind::kVllm);
  EXPECT_EQ(spec->block_size, 16);
  EXPECT_EQ(spec->pool_blocks, 0);  // not given: tables grow as blocks arrive
  EXPECT_EQ(spec->dp_ranks, 1);
  EXPECT_TRUE(spec->replay.empty());
  EXPECT_TRUE(spec->control.empty());
  EXPECT_EQ(spec->role, EngineRole::kBoth);
  EXPECT_EQ(spec->kv_lease_ms, 30000);    // vLLM's kv_lease_duration
  EXPECT_EQ(spec->bootstrap_port, 8998);  // SGLang's default
}

TEST(EngineSpecTest, ErrorsNameTheKeyAtFault) {
  struct Case {
    const char* spec;
    const char* message;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"events=tcp://h:1,model=m", "id: required in an engine spec"},
           {"id=w1,model=m", "events: required in an engine spec"},
           {"id=w1,events=tcp://h:1", "model: required in an engine spec"},
           {"id=w1,events=tcp://h:1,model=m,colour=red", "engine spec: unknown key 'colour'"},
           {"id=w1,id=w2,events=tcp://h:1,model=m", "id: given twice"},
           {"id=w1,kind=trtllm,events=tcp://h:1,model=m", "unknown engine kind 'trtllm'"},
           {"id=w1,events=http://h:1,model=m", "events: want tcp://HOST:PORT"},
           {"id=w1,events=tcp://h:99999,model=m", "events: port '99999' is not in 1-65535"},
           // vLLM's own endpoint values bind; kvgov connects (issue 43).
           {"id=w1,events=tcp://*:5557,model=m",
            "events: 'tcp://*:5557' is an address the engine binds; kvgov connects to it, so "
            "give the engine's host: tcp://<engine host>:5557 (tcp://127.0.0.1:5557 on the "
            "same machine)"},
           {"id=w1,events=tcp://h:1,replay=tcp://0.0.0.0:5558,model=m",
            "replay: 'tcp://0.0.0.0:5558' is an address the engine binds"},
           {"id=w1,events=tcp://h:1,replay=tcp://[::]:5558,model=m", "replay: 'tcp://[::]:5558'"},
           // What serve refuses when it opens the streams, refused here too.
           {"id=w1,events=tcp://h:5557,replay=tcp://h:5557,model=m",
            "dp-ranks: with 1 ranks the events ports 5557..5557 and the replay ports"},
           {"id=w1,events=tcp://h:65535,model=m,dp-ranks=2", "dp-ranks"},
           {"id=w1,events=tcp://h:1,model=m,block-size=0", "block-size: want an integer"},
           {"id=w1,events=tcp://h:1,model=m,dp-ranks=x", "dp-ranks: want an integer"},
           {"id=w1,events=tcp://h:1,model=m,pool-blocks=0", "pool-blocks: want an integer"},
           {"id=w1,events=tcp://h:1,model=m,pool-blocks=16777217",
            "pool-blocks: want an integer in 1-16777216"},
           {"id=w 1,events=tcp://h:1,model=m", "id: want letters"},
           {"id=w1@dp0,events=tcp://h:1,model=m", "id: want letters"},
           {"id=w1,events=tcp://h:1,model=m,control=ftp://x", "control: want http://"},
           {"id=w1,events", "engine spec: want key=value"},
           {"id=w1,events=tcp://h:1,model=m,connector=nccl", "connector: want vllm"},
           {"id=w1,events=tcp://h:1,model=m,connector=webhook", "connector-path: required"},
           {"id=w1,events=tcp://h:1,model=m,connector-path=/x", "connector-path: required"},
           {"id=w1,events=tcp://h:1,model=m,role=router", "unknown engine role 'router'"},
           {"id=w1,kind=mooncake,events=tcp://h:1,model=m,role=prefill",
            "role: a mooncake store serves no requests"},
           {"id=w1,events=tcp://h:1,model=m,role=decode,kv-lease-ms=100",
            "kv-lease-ms: only for a prefill engine"},
           {"id=w1,events=tcp://h:1,model=m,bootstrap-port=1", "bootstrap-port: only for"},
           {"id=w1,events=tcp://h:1,model=m,role=prefill,kv-lease-ms=0",
            "kv-lease-ms: want an integer"},
       }) {
    Result<EngineSpec> spec = ParseEngineSpec(c.spec);
    ASSERT_FALSE(spec.ok()) << c.spec;
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(c.message), std::string::npos)
        << c.spec << " -> " << spec.status().message();
  }
}

TEST(EngineSpecTest, RanksListenAtPortPlusRank) {
  EngineSpec engine = *ParseEngineSpec(
      "id=w1,events=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:6557,model=m,dp-ranks=2");
  Result<std::vector<StreamSpec>> streams = StreamsFor(engine);
  ASSERT_TRUE(streams.ok());
  ASSERT_EQ(streams->size(), 2u);
  EXPECT_EQ((*streams)[0],
            (StreamSpec{"w1@dp0", 0, "tcp://127.0.0.1:5557", "tcp://127.0.0.1:6557"}));
  EXPECT_EQ((*streams)[1],
            (StreamSpec{"w1@dp1", 1, "tcp://127.0.0.1:5558", "tcp://127.0.0.1:6558"}));

  EngineSpec single = *ParseEngineSpec("id=w1,events=tcp://h:5557,model=m");
  EXPECT_EQ((*StreamsFor(single))[0], (StreamSpec{"w1", 0, "tcp://h:5557", ""}));
}

// vLLM's usual ports, 5557 and 5558, meet at two ranks: rank 1's events
// would be rank 0's replay.
TEST(EngineSpecTest, OverlappingRankPortRangesAreRefused) {
  Result<EngineSpec> overlapping =
      ParseEngineSpec("id=w1,events=tcp://h:5557,replay=tcp://h:5558,model=m,dp-ranks=2");
  ASSERT_EQ(overlapping.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(overlapping.status().message(),
            "dp-ranks: with 2 ranks the events ports 5557..5558 and the replay ports "
            "5558..5559 overlap; put the replay base at least dp-ranks away from the events "
            "base");
  EXPECT_TRUE(
      StreamsFor(*ParseEngineSpec("id=w1,events=tcp://h:5557,replay=tcp://h:5558,model=m")).ok());
  EXPECT_TRUE(StreamsFor(*ParseEngineSpec(
                             "id=w1,events=tcp://h:5557,replay=tcp://h:5559,model=m,dp-ranks=2"))
                  .ok());
  EXPECT_TRUE(StreamsFor(*ParseEngineSpec(
                             "id=w1,events=tcp://a:5557,replay=tcp://b:5558,model=m,dp-ranks=2"))
                  .ok());
}

}  // namespace
}  // namespace kvgov::ingest
