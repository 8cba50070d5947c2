// Each peer policy's documented rule on a case small enough to check by
// hand (docs/formats/simulator.md, "The peers' policies").

#include "kvgov/sim/peer_policies.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "kvgov/sim/event_wire.h"

namespace kvgov::sim {
namespace {

constexpr int64_t kBlock = 16;

std::vector<int64_t> Tokens(int64_t blocks, int64_t first) {
  std::vector<int64_t> tokens(static_cast<size_t>(blocks * kBlock));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

std::vector<int64_t> Concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

FleetOptions TwoEngines() {
  FleetOptions options;
  options.engines = 2;
  options.capacity_blocks = 64;
  options.block_size = kBlock;
  return options;
}

SimRequest Request(uint64_t id, std::vector<int64_t> tokens) {
  SimRequest request;
  request.id = id;
  request.tokens = std::move(tokens);
  return request;
}

// Engine `engine` serves `tokens` at time 0, and the policy hears its events.
void Serve(Fleet& fleet, RoutingPolicy& policy, size_t engine, uint64_t id,
           const std::vector<int64_t>& tokens) {
  EngineModel::Served served = fleet.mutable_engine(engine).Serve(id, 0.0, tokens, "");
  EngineEventBatch batch;
  batch.events = served.prefill.events;
  Result<std::string> payload = EncodeEventBatch(batch, WireEncoding::kMap);
  ASSERT_TRUE(payload.ok()) << payload.status().ToString();
  ASSERT_TRUE(policy.Observe(engine, *payload).ok());
}

size_t MustChoose(RoutingPolicy& policy, const SimRequest& request, const Fleet& fleet) {
  Result<size_t> chosen = policy.Choose(request, "", fleet);
  EXPECT_TRUE(chosen.ok()) << chosen.status().ToString();
  return chosen.ok() ? *chosen : 99;
}

// cost = 1 x prefill_blocks + decode_blocks, both counting what it routed
// and has not seen finish.
TEST(DynamoPolicyTest, CostIsOverlapWeightedPrefillPlusActiveBlocks) {
  Fleet fleet(TwoEngines());
  std::unique_ptr<RoutingPolicy> dynamo = MakeDynamoPolicy(fleet.options(), {});
  const std::vector<int64_t> a = Tokens(8, 0);
  Serve(fleet, *dynamo, 0, 100, a);  // engine 0 holds A's 8 blocks
  // A + 4 new blocks: engine 0 costs (12 - 8) + 12 = 16, engine 1 12 + 12 = 24.
  EXPECT_EQ(MustChoose(*dynamo, Request(0, Concat(a, Tokens(4, 1000))), fleet), 0u);
  // 12 cold blocks: engine 0 now carries 4 prefill and 12 active blocks,
  // so 12 + 4 + 12 + 12 = 40 against engine 1's 24.
  EXPECT_EQ(MustChoose(*dynamo, Request(1, Tokens(12, 2000)), fleet), 1u);
  // Request 0 is done: engine 0 is back to 24, engine 1 carries request 1
  // (12 + 12 + 12 + 12 = 48).
  dynamo->Completed(0);
  EXPECT_EQ(MustChoose(*dynamo, Request(2, Tokens(12, 3000)), fleet), 0u);
}

// A prefix several in-flight requests share counts once in decode_blocks.
TEST(DynamoPolicyTest, ActiveBlocksAreCountedOnceWhateverSharesThem) {
  Fleet fleet(TwoEngines());
  std::unique_ptr<RoutingPolicy> dynamo =
      MakeDynamoPolicy(fleet.options(), {.overlap_score_weight = 2.0, .seed = 1});
  const std::vector<int64_t> a = Tokens(8, 0);
  Serve(fleet, *dynamo, 0, 100, a);
  // A + 4 blocks: engine 0 costs 2 x 4 + 12 = 20, engine 1 2 x 12 + 12 = 36.
  EXPECT_EQ(MustChoose(*dynamo, Request(0, Concat(a, Tokens(4, 1000))), fleet), 0u);
  // A + 3 other blocks: engine 0 costs 2 x (3 + 4) + (12 + 3) = 29, A being
  // active already; engine 1 2 x 11 + 11 = 33. Counting A twice would make
  // engine 0 37.
  EXPECT_EQ(MustChoose(*dynamo, Request(1, Concat(a, Tokens(3, 2000))), fleet), 0u);
}

// 3 x prefix + 2 x queue + 2 x (1 - KV used), the highest total.
TEST(LlmdPolicyTest, WeighsPrefixQueueAndKvUtilization) {
  Fleet fleet(TwoEngines());
  std::unique_ptr<RoutingPolicy> llmd = MakeLlmdPolicy(fleet.options(), {});
  const std::vector<int64_t> a = Tokens(8, 0);
  // Engine 0 holds A and has three requests outstanding (two waiting).
  Serve(fleet, *llmd, 0, 100, a);
  Serve(fleet, *llmd, 0, 101, a);
  Serve(fleet, *llmd, 0, 102, a);
  const SimRequest request = Request(0, Concat(a, Tokens(4, 1000)));
  // Engine 0: 3 x 8/12 + 2 x 0 + 2 x (1 - 8/64) = 3.75; engine 1: 0 + 2 + 2 = 4.
  EXPECT_EQ(MustChoose(*llmd, request, fleet), 1u);
  // Its queue drained: 2 + 2 + 1.75 = 5.75 against 4.
  (void)fleet.mutable_engine(0).PopFinished(1e9);
  EXPECT_EQ(MustChoose(*llmd, request, fleet), 0u);
}

TEST(SglangPolicyTest, FollowsItsTreeUnlessTheLoadIsImbalanced) {
  Fleet fleet(TwoEngines());
  SglangPolicyOptions options;
  options.cache_threshold = 0.3;
  options.balance_abs_threshold = 2;
  options.balance_rel_threshold = 1.5;
  std::unique_ptr<RoutingPolicy> sglang = MakeSglangPolicy(fleet.options(), options);
  const std::vector<int64_t> p = Tokens(10, 0);
  // Empty trees: no match, so the smallest tree, the first of equals.
  EXPECT_EQ(MustChoose(*sglang, Request(0, p), fleet), 0u);
  // The whole prompt matches engine 0's tree: 100% > 30%.
  EXPECT_EQ(MustChoose(*sglang, Request(1, p), fleet), 0u);
  // A prompt nothing matches goes to the smaller tree.
  EXPECT_EQ(MustChoose(*sglang, Request(2, Tokens(10, 5000)), fleet), 1u);
  // Loads 2 and 1, then 3 and 1: not imbalanced (3 - 1 is not over 2), the tree wins.
  EXPECT_EQ(MustChoose(*sglang, Request(3, p), fleet), 0u);
  EXPECT_EQ(MustChoose(*sglang, Request(4, p), fleet), 0u);
  // 4 against 1: over both thresholds, so the least loaded, cache or not.
  EXPECT_EQ(MustChoose(*sglang, Request(5, p), fleet), 1u);
  // Finished requests stop counting: engine 0 back to 1 request, and p
  // matches both trees now; the first best match is engine 0.
  for (uint64_t id : {0, 1, 3}) sglang->Completed(id);
  EXPECT_EQ(MustChoose(*sglang, Request(6, p), fleet), 0u);
}

TEST(PrefixHashPolicyTest, OnePrefixOneEngineWhateverFollowsAndWhateverTheLoad) {
  FleetOptions options = TwoEngines();
  options.engines = 4;
  Fleet fleet(options);
  std::unique_ptr<RoutingPolicy> hash = MakePrefixHashPolicy(options, {});
  const std::vector<int64_t> head = Tokens(4, 0);  // the 4 hashed blocks
  const size_t first = MustChoose(*hash, Request(0, Concat(head, Tokens(6, 900))), fleet);
  for (uint64_t id = 1; id < 20; ++id) {
    EXPECT_EQ(MustChoose(*hash, Request(id, Concat(head, Tokens(6, 1000 * id))), fleet), first);
  }
  // Distinct prefixes spread over the ring.
  std::map<size_t, int> per_engine;
  for (int64_t n = 0; n < 400; ++n)
    ++per_engine[MustChoose(*hash, Request(99, Tokens(4, n * 64)), fleet)];
  ASSERT_EQ(per_engine.size(), 4u);
  for (const auto& [engine, count] : per_engine) EXPECT_GT(count, 50) << engine;
}

TEST(PeerPoliciesTest, PlaceColocatedFleetsOnly) {
  FleetOptions options = TwoEngines();
  options.prefill_engines = 1;
  options.decode_engines = 1;
  Fleet fleet(options);
  const SimRequest request = Request(0, Tokens(2, 0));
  for (const char* name : {"dynamo", "llm-d", "sglang", "prefix-hash"}) {
    Result<std::unique_ptr<RoutingPolicy>> policy = MakePolicy(name, options, 1);
    ASSERT_TRUE(policy.ok()) << name;
    EXPECT_EQ((*policy)->name(), name);
    EXPECT_EQ((*policy)->Choose(request, "", fleet).status().code(),
              StatusCode::kFailedPrecondition)
        << name;
  }
}

}  // namespace
}  // namespace kvgov::sim
