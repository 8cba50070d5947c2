#include "kvgov/sim/fleet.h"

#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <optional>
#include <tuple>

#include "kvgov/sim/event_wire.h"

namespace kvgov::sim {
namespace {

std::vector<int64_t> Tokens(int64_t count, int64_t first = 0) {
  std::vector<int64_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

TEST(EngineModelTest, QueuesPrefillsFirstInFirstOut) {
  EngineModel engine(
      BlockPoolOptions{.capacity_blocks = 1024, .block_size = 16, .hash_seed = 1, .medium = "GPU"},
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
  EXPECT_GT(qwen.MicrosPerToken(16384), 121.1);                // extends the last segment
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
  EXPECT_GT(kvgov.hit_rate(), round_robin.hit_rate() + 0.2)
      << FormatReports(std::vector<PolicyReport>{kvgov, round_robin, oracle});
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

// The engine of each request, and where the decode step went.
std::vector<std::pair<size_t, size_t>> Placements(const std::vector<RequestOutcome>& outcomes) {
  std::vector<std::pair<size_t, size_t>> placed;
  for (const RequestOutcome& outcome : outcomes) {
    placed.emplace_back(outcome.engine, outcome.decode_engine.value_or(999));
  }
  return placed;
}

FleetOptions Disaggregated(int prefill, int decode) {
  FleetOptions fleet;
  fleet.engines = prefill + decode;
  fleet.prefill_engines = prefill;
  fleet.decode_engines = decode;
  return fleet;
}

SimRequest Request(uint64_t id, double arrival_s, std::vector<int64_t> tokens) {
  SimRequest request;
  request.id = id;
  request.arrival_s = arrival_s;
  request.tokens = std::move(tokens);
  return request;
}

TEST(FleetTest, ADecodeEnginePullsOnlyWhatItLacksOverAFirstInFirstOutLink) {
  FleetOptions fleet = Disaggregated(1, 1);
  // A slow link, so a pull outlasts the next prefill and must queue.
  fleet.link_bytes_per_s = 1e9;
  const std::vector<int64_t> prompt = Tokens(256);  // 16 full blocks
  const std::vector<SimRequest> trace = {
      Request(0, 0, prompt),
      Request(1, 1, prompt),       // both engines hold it all
      Request(2, 2, Tokens(296)),  // the prompt + 40 tokens: 2 new blocks and 8 more
      Request(3, 3, Tokens(256, 10000)),
      Request(4, 3, Tokens(256, 20000)),  // queues behind 3 for the prefill, then the link
  };
  const PrefillCostModel cost(fleet.shape);
  const double prefill = cost.PrefillSeconds(256, 256);
  const double transfer = TransferSeconds(fleet.shape, 256, fleet.link_bytes_per_s);
  ASSERT_GT(transfer, prefill);  // what makes request 4 wait for the link

  for (const char* name : {"kvgov", "round-robin", "random", "least-load", "oracle"}) {
    SCOPED_TRACE(name);
    auto policy = MakePolicy(name, fleet, 1);
    ASSERT_TRUE(policy.ok());
    Result<std::vector<RequestOutcome>> outcomes = Replay(trace, fleet, **policy);
    ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
    ASSERT_EQ(outcomes->size(), 5u);
    const std::vector<RequestOutcome>& o = *outcomes;
    for (const RequestOutcome& outcome : o) {
      EXPECT_EQ(outcome.engine, 0u);
      EXPECT_EQ(outcome.decode_engine, std::optional<size_t>(1));
    }
    // Cold on both: prefill it all, pull it all.
    EXPECT_EQ(o[0].hit_blocks, 0u);
    EXPECT_EQ(o[0].pulled_tokens, 256);
    EXPECT_DOUBLE_EQ(o[0].ttft_s, prefill + transfer);
    // The same prompt: a hit on the prefill engine, nothing to pull.
    EXPECT_EQ(o[1].hit_blocks, 16u);
    EXPECT_EQ(o[1].decode_hit_blocks, 16u);
    EXPECT_EQ(o[1].pulled_tokens, 0);
    EXPECT_DOUBLE_EQ(o[1].transfer_s, 0.0);
    EXPECT_DOUBLE_EQ(o[1].ttft_s, 0.0);
    // An extension: both compute or pull only its 40 new tokens.
    EXPECT_EQ(o[2].hit_blocks, 16u);
    EXPECT_EQ(o[2].computed_tokens, 40);
    EXPECT_EQ(o[2].decode_hit_blocks, 16u);
    EXPECT_EQ(o[2].pulled_tokens, 40);
    EXPECT_NEAR(o[2].ttft_s, cost.PrefillSeconds(296, 40) + TransferSeconds(fleet.shape, 40, 1e9),
                1e-12);
    // Two cold prompts at once: 4 waits for 3's prefill, then for 3's pull.
    EXPECT_NEAR(o[3].ttft_s, prefill + transfer, 1e-9);
    EXPECT_NEAR(o[4].queue_s, prefill, 1e-9);
    EXPECT_NEAR(o[4].link_wait_s, transfer - prefill, 1e-9);
    EXPECT_NEAR(o[4].ttft_s, prefill + prefill + (transfer - prefill) + transfer, 1e-9);

    const PolicyReport report = Summarize(name, o, 2, 1);
    EXPECT_TRUE(report.disaggregated);
    EXPECT_EQ(report.pulled_tokens, 256 + 0 + 40 + 256 + 256);
    EXPECT_EQ(report.pull_saved_tokens, 256 + 256);
    EXPECT_NEAR(report.transfer_s, TransferSeconds(fleet.shape, 808, 1e9), 1e-9);
    EXPECT_DOUBLE_EQ(report.load_spread, 1.0);  // over the one prefill engine
  }
}

TEST(FleetTest, ADisaggregatedRunIsDeterministicUnderTheSeed) {
  AgentWorkloadOptions workload;
  workload.tenants = 2;
  workload.sessions_per_tenant = 4;
  workload.turns = 4;
  Result<std::vector<SimRequest>> trace = AgentWorkload(workload);
  ASSERT_TRUE(trace.ok());
  FleetOptions fleet = Disaggregated(2, 2);
  fleet.capacity_blocks = 2048;
  for (const char* name : {"kvgov", "round-robin", "random", "least-load", "oracle"}) {
    SCOPED_TRACE(name);
    std::vector<std::vector<RequestOutcome>> runs;
    for (int run = 0; run < 2; ++run) {
      auto policy = MakePolicy(name, fleet, 7);
      ASSERT_TRUE(policy.ok());
      Result<std::vector<RequestOutcome>> outcomes = Replay(*trace, fleet, **policy);
      ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
      runs.push_back(*std::move(outcomes));
    }
    ASSERT_EQ(runs[0].size(), trace->size());
    EXPECT_EQ(Placements(runs[0]), Placements(runs[1]));
    int64_t pulled = 0;
    for (size_t i = 0; i < runs[0].size(); ++i) {
      const RequestOutcome& a = runs[0][i];
      const RequestOutcome& b = runs[1][i];
      EXPECT_EQ(a.hit_blocks, b.hit_blocks);
      EXPECT_EQ(a.pulled_tokens, b.pulled_tokens);
      EXPECT_EQ(a.ttft_s, b.ttft_s);  // bit for bit
      ASSERT_TRUE(a.decode_engine.has_value());
      EXPECT_GE(*a.decode_engine, 2u);
      EXPECT_LT(a.engine, 2u);
      pulled += a.pulled_tokens;
    }
    EXPECT_GT(pulled, 0);
  }
}

TEST(FleetTest, KvgovDecodesWhereThePromptAlreadyIsWhenLoadsAreEqual) {
  const FleetOptions options = Disaggregated(1, 2);
  const std::vector<int64_t> prompt = Tokens(512);
  for (const char* name : {"kvgov", "oracle"}) {
    SCOPED_TRACE(name);
    Fleet fleet(options);
    auto policy = MakePolicy(name, options, 1);
    ASSERT_TRUE(policy.ok());
    // Cold everywhere, the rendezvous on the prompt's head picks one...
    Result<size_t> cold = (*policy)->ChooseDecode(Request(1, 0, prompt), "", fleet, 0, 0.0);
    ASSERT_TRUE(cold.ok()) << cold.status().ToString();
    ASSERT_TRUE(*cold == 1 || *cold == 2);
    (*policy)->Transferred(1);  // ...and releases it: both decode engines idle
    // The other one pulls the prompt for someone else, its events seen.
    const size_t other = *cold == 1 ? 2 : 1;
    EngineModel::Pulled pulled =
        fleet.mutable_engine(other).Pull(2, 0.0, prompt, "", options.link_bytes_per_s);
    EngineEventBatch batch;
    batch.dp_rank = 0;
    batch.events = std::move(pulled.cached.events);
    Result<std::string> payload = EncodeEventBatch(batch, options.encoding);
    ASSERT_TRUE(payload.ok());
    ASSERT_TRUE((*policy)->Observe(other, *payload).ok());
    EXPECT_EQ(fleet.mutable_engine(other).PopTransferred(1.0).size(), 1u);
    // Loads equal again, the engine holding the prompt wins over rendezvous.
    Result<size_t> warm = (*policy)->ChooseDecode(Request(3, 1, prompt), "", fleet, 0, 1.0);
    ASSERT_TRUE(warm.ok()) << warm.status().ToString();
    EXPECT_EQ(*warm, other);
  }
}

TEST(FleetTest, RoundRobinAlternatesWithinEachPool) {
  const FleetOptions fleet = Disaggregated(2, 2);
  std::vector<SimRequest> trace;
  for (int i = 0; i < 6; ++i) {
    trace.push_back(Request(static_cast<uint64_t>(i), i, Tokens(128, 1000 * i)));
  }
  auto policy = MakePolicy("round-robin", fleet, 1);
  ASSERT_TRUE(policy.ok());
  Result<std::vector<RequestOutcome>> outcomes = Replay(trace, fleet, **policy);
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  const std::vector<std::pair<size_t, size_t>> want = {{0, 2}, {1, 3}, {0, 2},
                                                       {1, 3}, {0, 2}, {1, 3}};
  EXPECT_EQ(Placements(*outcomes), want);
}

TEST(FleetTest, AFleetThatDoesNotSplitIsRefusedByName) {
  FleetOptions fleet = Disaggregated(2, 1);
  fleet.engines = 4;
  Status status = ValidateFleetOptions(fleet);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("2P1D does not add up to its 4 engines"), std::string::npos)
      << status.message();
  fleet = Disaggregated(1, 0);
  EXPECT_EQ(ValidateFleetOptions(fleet).code(), StatusCode::kInvalidArgument);
  fleet = Disaggregated(1, 1);
  fleet.link_bytes_per_s = 0;
  EXPECT_EQ(ValidateFleetOptions(fleet).code(), StatusCode::kInvalidArgument);
  auto policy = MakePolicy("round-robin", fleet, 1);
  ASSERT_TRUE(policy.ok());
  EXPECT_EQ(
      RunTrace(std::vector<SimRequest>{Request(0, 0, Tokens(32))}, fleet, **policy).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateFleetOptions(FleetOptions{}).ok());
}

// A policy written before fleets were disaggregated.
class PrefillOnlyPolicy final : public RoutingPolicy {
 public:
  explicit PrefillOnlyPolicy(size_t engine) : engine_(engine) {}
  std::string_view name() const override { return "prefill-only"; }
  Result<size_t> Choose(const SimRequest&, std::string_view, const Fleet&) override {
    return engine_;
  }

 private:
  size_t engine_;
};

TEST(FleetTest, APolicyWithoutADecodeStepOrOutsideItsPoolFailsByName) {
  const FleetOptions fleet = Disaggregated(1, 1);
  const std::vector<SimRequest> trace = {Request(0, 0, Tokens(32))};
  PrefillOnlyPolicy prefill_only(0);
  Result<std::vector<RequestOutcome>> outcomes = Replay(trace, fleet, prefill_only);
  ASSERT_FALSE(outcomes.ok());
  EXPECT_EQ(outcomes.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(outcomes.status().message().find("prefill-only"), std::string::npos);
  // Engine 1 is the decode engine: no prefill goes there.
  PrefillOnlyPolicy on_decode(1);
  outcomes = Replay(trace, fleet, on_decode);
  ASSERT_FALSE(outcomes.ok());
  EXPECT_EQ(outcomes.status().code(), StatusCode::kInternal);
  EXPECT_NE(outcomes.status().message().find("prefill engines are 0..0"), std::string::npos)
      << outcomes.status().message();
  // Colocated, the same policy serves as it always has.
  FleetOptions colocated;
  colocated.engines = 2;
  EXPECT_TRUE(Replay(trace, colocated, prefill_only).ok());
}

TEST(FleetTest, AFleetSplitParsesOnlyxPyD) {
  Result<FleetSplit> split = ParseFleetSplit("2P2D");
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(split->prefill_engines, 2);
  EXPECT_EQ(split->decode_engines, 2);
  split = ParseFleetSplit("12P3D");
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(split->prefill_engines, 12);
  EXPECT_EQ(split->decode_engines, 3);
  for (const char* bad : {"", "2p2d", "2P", "P2D", "2D2P", "0P2D", "2P0D", "02P2D", "-1P2D",
                          "+1P2D", "2P2D ", " 2P2D", "2P2Dx", "2.5P2D", "2P2", "99999999999P1D"}) {
    split = ParseFleetSplit(bad);
    ASSERT_FALSE(split.ok()) << bad;
    EXPECT_EQ(split.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(split.status().message(), "want xPyD such as 2P2D, got '" + std::string(bad) + "'");
  }
  split = ParseFleetSplit("1000P100D");
  ASSERT_FALSE(split.ok());
  EXPECT_NE(split.status().message().find("at most 1024 engines"), std::string::npos);
}

// `count` requests `gap_s` apart; request i's prompt and answer length are
// `shape(i)`.
std::vector<SimRequest> AnswerTrace(
    uint64_t count, double gap_s,
    const std::function<std::pair<std::vector<int64_t>, int64_t>(uint64_t)>& shape) {
  std::vector<SimRequest> trace;
  for (uint64_t i = 0; i < count; ++i) {
    SimRequest request;
    request.id = i;
    request.arrival_s = gap_s * static_cast<double>(i);
    std::tie(request.tokens, request.output_tokens) = shape(i);
    trace.push_back(std::move(request));
  }
  return trace;
}

// The batching engine on a case worked by hand: a prefill step, then one
// memory-bound decode step per further token (weights plus the KV read);
// a second request whose KV does not fit waits for the first to finish.
TEST(BatchingEngineTest, StepsPrefillThenDecodeAndAdmitsWhatTheKvHolds) {
  DecodeModel model;
  model.enabled = true;
  EngineModel engine(
      BlockPoolOptions{.capacity_blocks = 100, .block_size = 16, .hash_seed = 1, .medium = "GPU"},
      ModelShape::kLlama3_8B);
  SimRequest a;
  a.id = 0;
  a.tokens = Tokens(1024);
  a.output_tokens = 3;
  SimRequest b = a;
  b.id = 1;
  b.tokens = Tokens(1024, 5000);
  engine.Enqueue(a, "", 0.0);
  engine.Enqueue(b, "", 0.0);
  EngineModel::Progress progress;
  engine.AdvanceTo(std::numeric_limits<double>::infinity(), model, progress);

  const double prefill = engine.cost().PrefillSeconds(1024, 1024);
  const double kv = static_cast<double>(KvBytesPerToken(ModelShape::kLlama3_8B));
  const double weights = static_cast<double>(WeightBytes(ModelShape::kLlama3_8B));
  const double decode_1024 = (weights + 1024 * kv) / model.hbm_bytes_per_s;
  const double decode_1025 = (weights + 1025 * kv) / model.hbm_bytes_per_s;
  const double a_done = prefill + decode_1024 + decode_1025;
  // 64 prompt blocks + 1 for the answer each: 130 of 100, so b waits.
  ASSERT_EQ(progress.started.size(), 2u);
  EXPECT_DOUBLE_EQ(progress.started[0].at_s, 0.0);
  EXPECT_DOUBLE_EQ(progress.started[1].at_s, a_done);
  ASSERT_EQ(progress.first_tokens.size(), 2u);
  EXPECT_DOUBLE_EQ(progress.first_tokens[0].at_s, prefill);
  EXPECT_DOUBLE_EQ(progress.first_tokens[0].prefill_s, prefill);
  EXPECT_DOUBLE_EQ(progress.first_tokens[1].at_s, a_done + prefill);
  ASSERT_EQ(progress.completed.size(), 2u);
  EXPECT_DOUBLE_EQ(progress.completed[0].at_s, a_done);
  EXPECT_DOUBLE_EQ(progress.completed[1].at_s, 2 * a_done);
  EXPECT_TRUE(engine.idle());
}

// On a trace with answers, every request gets its first token after its
// arrival and its last no earlier; the policies all see the same run.
TEST(BatchingEngineTest, ReplayWithDecodeReportsEndToEndLatency) {
  FleetOptions fleet;
  fleet.engines = 2;
  fleet.capacity_blocks = 2048;
  fleet.decode.enabled = true;
  const std::vector<SimRequest> trace = AnswerTrace(40, 0.05, [](uint64_t i) {
    return std::pair(Tokens(512, static_cast<int64_t>(i % 4) * 10000), int64_t{20});
  });
  for (const char* name : {"kvgov", "least-load", "dynamo", "sglang"}) {
    Result<std::unique_ptr<RoutingPolicy>> policy = MakePolicy(name, fleet, 1);
    ASSERT_TRUE(policy.ok());
    Result<std::vector<RequestOutcome>> outcomes = Replay(trace, fleet, **policy);
    ASSERT_TRUE(outcomes.ok()) << name << ": " << outcomes.status().ToString();
    for (const RequestOutcome& outcome : *outcomes) {
      EXPECT_GT(outcome.ttft_s, 0) << name;
      EXPECT_GT(outcome.e2e_s, outcome.ttft_s) << name;  // 19 decode steps after the first token
    }
    PolicyReport report = Summarize(name, *outcomes, 2);
    EXPECT_TRUE(report.decode_modeled);
    EXPECT_GE(report.e2e_p99_s, report.e2e_p50_s);
  }
  fleet.prefill_engines = 1;
  fleet.decode_engines = 1;
  EXPECT_EQ(ValidateFleetOptions(fleet).code(), StatusCode::kInvalidArgument);
}

// The same trace, fleet and seed give the same outcomes, decode modeled,
// for kvgov's policy and a peer's alike.
TEST(BatchingEngineTest, DeterministicUnderTheSeed) {
  FleetOptions fleet;
  fleet.engines = 3;
  fleet.capacity_blocks = 1024;
  fleet.decode.enabled = true;
  const std::vector<SimRequest> trace = AnswerTrace(60, 0.02, [](uint64_t i) {
    return std::pair(
        Tokens(256 + static_cast<int64_t>(i % 5) * 64, static_cast<int64_t>(i % 3) * 7000),
        static_cast<int64_t>(5 + i % 7));
  });
  for (const char* name : {"kvgov", "dynamo", "llm-d", "random"}) {
    std::vector<double> ttfts[2];
    for (auto& run : ttfts) {
      Result<std::unique_ptr<RoutingPolicy>> policy = MakePolicy(name, fleet, 7);
      ASSERT_TRUE(policy.ok());
      Result<std::vector<RequestOutcome>> outcomes = Replay(trace, fleet, **policy);
      ASSERT_TRUE(outcomes.ok()) << name;
      for (const RequestOutcome& outcome : *outcomes) {
        run.push_back(outcome.ttft_s);
        run.push_back(outcome.e2e_s);
        run.push_back(static_cast<double>(outcome.engine));
      }
    }
    EXPECT_EQ(ttfts[0], ttfts[1]) << name;
  }
}

// Each cause worked by hand on two engines of 8 blocks, prefilled at
// arrival, round-robin: a prompt of 4 blocks and 8 tokens, then again on
// the other engine, then pushed out of both by 8-block prompts, then a
// third time.
TEST(PrefillCausesTest, EachCauseIsCountedWhereItArises) {
  FleetOptions fleet;
  fleet.engines = 2;
  fleet.capacity_blocks = 8;
  const std::vector<int64_t> prompt = Tokens(4 * 16 + 8);
  const std::vector<SimRequest> trace = {
      Request(0, 0.0, prompt), Request(1, 1.0, prompt), Request(2, 2.0, Tokens(8 * 16, 1000)),
      Request(3, 3.0, Tokens(8 * 16, 2000)), Request(4, 4.0, prompt)};
  Result<std::unique_ptr<RoutingPolicy>> policy = MakePolicy("round-robin", fleet, 1);
  ASSERT_TRUE(policy.ok());
  Result<std::vector<RequestOutcome>> outcomes = Replay(trace, fleet, **policy);
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  ASSERT_EQ(outcomes->size(), 5u);
  const auto causes = [&](size_t i) {
    const PrefillCauses& c = (*outcomes)[i].prefill_causes;
    return std::tuple(c.first_seen_tokens, c.not_held_tokens, c.routed_away_tokens);
  };
  EXPECT_EQ(causes(0), std::tuple(72, 0, 0));  // new
  EXPECT_EQ(causes(1), std::tuple(8, 0, 64));  // engine 0 held its 4 blocks
  EXPECT_EQ(causes(2), std::tuple(128, 0, 0));
  EXPECT_EQ(causes(3), std::tuple(128, 0, 0));
  EXPECT_EQ(causes(4), std::tuple(8, 64, 0));  // seen twice, held by neither
  const PolicyReport report = Summarize("round-robin", *outcomes, 2);
  EXPECT_EQ(report.computed_tokens, 72 + 72 + 128 + 128 + 72);
  EXPECT_EQ(report.prefill_causes.first_seen_tokens, 72 + 8 + 128 + 128 + 8);
  EXPECT_EQ(report.prefill_causes.not_held_tokens, 64);
  EXPECT_EQ(report.prefill_causes.routed_away_tokens, 64);
  EXPECT_EQ(report.prefill_causes.while_queued_tokens, 0);
}

// On real workloads, with and without decode: the causes add up to what
// each policy computed, none but the queue's is negative, what no earlier
// prompt had is the same for every policy, and nothing changes while a
// request queues when prefill happens at arrival.
TEST(PrefillCausesTest, AddUpToThePrefillAndFirstSeenIsTheSameForEveryPolicy) {
  SharedPrefixWorkloadOptions shared;
  shared.groups = 24;
  shared.requests = 300;
  shared.requests_per_s = 8;
  ConversationWorkloadOptions conversation;
  conversation.sessions = 24;
  Result<std::vector<SimRequest>> shared_trace = SharedPrefixWorkload(shared);
  Result<std::vector<SimRequest>> conversation_trace = ConversationWorkload(conversation);
  ASSERT_TRUE(shared_trace.ok());
  ASSERT_TRUE(conversation_trace.ok());
  FleetOptions decoded;
  decoded.engines = 4;
  decoded.capacity_blocks = 2048;
  decoded.decode.enabled = true;
  const std::vector<std::tuple<const char*, std::vector<SimRequest>*, FleetOptions>> runs = {
      {"shared-prefix", &*shared_trace, SmallSharedPrefixFleet(shared)},
      {"conversation", &*conversation_trace, decoded}};
  for (const auto& [workload, trace, fleet] : runs) {
    std::optional<int64_t> first_seen;
    for (const char* name : {"kvgov", "round-robin", "least-load", "oracle", "sglang", "llm-d"}) {
      Result<std::unique_ptr<RoutingPolicy>> policy = MakePolicy(name, fleet, 1);
      ASSERT_TRUE(policy.ok());
      Result<PolicyReport> report = RunTrace(*trace, fleet, **policy);
      ASSERT_TRUE(report.ok()) << name << ": " << report.status().ToString();
      const PrefillCauses& c = report->prefill_causes;
      const std::string where = std::string(workload) + ", " + name;
      EXPECT_EQ(
          c.first_seen_tokens + c.not_held_tokens + c.routed_away_tokens + c.while_queued_tokens,
          report->computed_tokens)
          << where;
      EXPECT_GT(c.first_seen_tokens, 0) << where;
      EXPECT_GE(c.not_held_tokens, 0) << where;
      EXPECT_GE(c.routed_away_tokens, 0) << where;
      if (!fleet.decode.enabled) {
        EXPECT_EQ(c.while_queued_tokens, 0) << where;
      }
      if (!first_seen.has_value()) first_seen = c.first_seen_tokens;
      EXPECT_EQ(c.first_seen_tokens, *first_seen) << where;
    }
  }
}

}  // namespace
}  // namespace kvgov::sim
