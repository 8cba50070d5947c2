#include "kvgov/sim/fleet.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kvgov::sim {
namespace {

std::vector<int64_t> Tokens(int64_t count, int64_t first = 0) {
  std::vector<int64_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

TEST(EngineModelTest, QueuesPrefillsFirstInFirstOut) {
  EngineModel engine(BlockPoolOptions{.capacity_blocks = 1024, .block_size = 16, .hash_seed = 1,
                                      .medium = "GPU"},
                     ModelShape::kLlama3_8B);
  const std::vector<int64_t> prompt = Tokens(1024);
  const double full = engine.cost().PrefillSeconds(1024, 1024);
  EngineModel::Served first = engine.Serve(0, 0.0, prompt, "");
  EXPECT_DOUBLE_EQ(first.ttft_s, full);
  // Arrives while the first is prefilling: waits, then hits every block.
  EngineModel::Served second = engine.Serve(1, full / 2, prompt, "");
  EXPECT_EQ(second.prefill.hit_blocks, 64u);
  EXPECT_EQ(second.prefill.computed_tokens, 0);
  EXPECT_DOUBLE_EQ(second.start_s, full);
  EXPECT_DOUBLE_EQ(second.ttft_s, full / 2);
  EXPECT_EQ(engine.outstanding(), 2u);
  auto finished = engine.PopFinished(full);
  ASSERT_EQ(finished.size(), 2u);  // the hit took no time
  EXPECT_EQ(finished[0].second, 0u);
  EXPECT_EQ(engine.outstanding(), 0u);
}

TEST(PrefillCostTest, UsesTheMeasuredCostPerTokenAndInterpolates) {
  PrefillCostModel qwen(ModelShape::kQwen3_32B);
  EXPECT_DOUBLE_EQ(qwen.MicrosPerToken(512), 109.1);
  EXPECT_DOUBLE_EQ(qwen.MicrosPerToken(4096), 113.7);
  EXPECT_NEAR(qwen.MicrosPerToken(6144), (113.7 + 121.1) / 2, 1e-9);
  EXPECT_GT(qwen.MicrosPerToken(16384), 121.1);  // extends the last segment
  EXPECT_NEAR(qwen.PrefillSeconds(8192, 8192), 0.992, 0.001);  // the measured 992 ms
  EXPECT_DOUBLE_EQ(qwen.PrefillSeconds(8192, 0), 0.0);
  EXPECT_EQ(ParseModelShape("gpt-9").status().code(), StatusCode::kInvalidArgument);
}

FleetOptions SmallSharedPrefixFleet(const SharedPrefixWorkloadOptions& workload) {
  FleetOptions fleet;
  fleet.engines = 4;
  fleet.shape = ModelShape::kQwen3_32B;
  // The group prompts fill about 73% of the fleet's KV capacity, as in
  // llm-d's benchmark.
  fleet.capacity_blocks = static_cast<size_t>(
      static_cast<double>(SharedPrefixBlocks(workload, fleet.block_size)) / 0.73 / fleet.engines);
  return fleet;
}

TEST(FleetTest, KvgovRoutesSharedPrefixesLikeTheOracleAndFarBetterThanRoundRobin) {
  SharedPrefixWorkloadOptions workload;
  workload.groups = 24;
  workload.requests = 400;
  workload.requests_per_s = 8;
  Result<std::vector<SimRequest>> trace = SharedPrefixWorkload(workload);
  ASSERT_TRUE(trace.ok());
  const FleetOptions fleet = SmallSharedPrefixFleet(workload);

  std::map<std::string, PolicyReport> reports;
  for (const char* name : {"kvgov", "round-robin", "random", "least-load", "oracle"}) {
    auto policy = MakePolicy(name, fleet, 1);
    ASSERT_TRUE(policy.ok());
    Result<PolicyReport> report = RunTrace(*trace, fleet, **policy);
    ASSERT_TRUE(report.ok()) << name << ": " << report.status().ToString();
    EXPECT_EQ(report->requests, 400u);
    reports[name] = *report;
  }
  const PolicyReport& kvgov = reports["kvgov"];
  const PolicyReport& round_robin = reports["round-robin"];
  const PolicyReport& oracle = reports["oracle"];
  EXPECT_GT(kvgov.hit_rate(), round_robin.hit_rate() + 0.2) << FormatReports(
      std::vector<PolicyReport>{kvgov, round_robin, oracle});
  EXPECT_GT(kvgov.hit_rate(), oracle.hit_rate() - 0.05);
  EXPECT_LT(kvgov.computed_tokens, round_robin.computed_tokens);
  EXPECT_LT(kvgov.ttft_p90_s, round_robin.ttft_p90_s);
  EXPECT_GT(kvgov.load_spread, 0.99);
}

TEST(FleetTest, ARunIsDeterministicAndBothEncodingsRouteAlike) {
  AgentWorkloadOptions workload;
  workload.tenants = 2;
  workload.sessions_per_tenant = 3;
  workload.turns = 4;
  Result<std::vector<SimRequest>> trace = AgentWorkload(workload);
  ASSERT_TRUE(trace.ok());
  FleetOptions fleet;
  fleet.capacity_blocks = 2048;
  PolicyReport first;
  for (WireEncoding encoding : {WireEncoding::kMap, WireEncoding::kLegacyPositional}) {
    fleet.encoding = encoding;
    auto policy = MakePolicy("kvgov", fleet, 1);
    ASSERT_TRUE(policy.ok());
    Result<PolicyReport> report = RunTrace(*trace, fleet, **policy);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    if (encoding == WireEncoding::kMap) {
      first = *report;
      EXPECT_GT(first.hit_blocks, 0u);
    } else {
      EXPECT_EQ(report->hit_blocks, first.hit_blocks);
      EXPECT_EQ(report->ttft_p99_s, first.ttft_p99_s);
    }
  }
}

TEST(FleetTest, TenantsWithIdenticalPromptsNeverShareBlocks) {
  // Two tenants, the same prompt, one engine: only each tenant's own
  // repeat may hit.
  std::vector<SimRequest> trace;
  for (int i = 0; i < 4; ++i) {
    SimRequest request;
    request.id = static_cast<uint64_t>(i);
    request.arrival_s = i;
    request.tenant = i % 2 == 0 ? "tenant-a" : "tenant-b";
    request.tokens = Tokens(256);
    trace.push_back(request);
  }
  FleetOptions fleet;
  fleet.engines = 1;
  for (const char* name : {"kvgov", "oracle"}) {
    auto policy = MakePolicy(name, fleet, 1);
    ASSERT_TRUE(policy.ok());
    Result<PolicyReport> report = RunTrace(trace, fleet, **policy);
    ASSERT_TRUE(report.ok());
    EXPECT_EQ(report->hit_blocks, 2u * 16u) << name;  // requests 2 and 3, never 1
  }
}

TEST(FleetTest, AnUnknownPolicyIsNamedInTheError) {
  Result<std::unique_ptr<RoutingPolicy>> policy = MakePolicy("fastest", FleetOptions{}, 1);
  ASSERT_FALSE(policy.ok());
  EXPECT_NE(policy.status().message().find("fastest"), std::string::npos);
}

}  // namespace
}  // namespace kvgov::sim
