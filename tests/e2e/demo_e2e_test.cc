// Runs `kvgov demo --quick` and `kvgov simulate` as a user would.

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "e2e/daemon_process.h"
#include "testing/scratch_dir.h"

namespace kvgov::testing {
namespace {

using Json = nlohmann::json;

TEST(DemoE2ETest, QuickDemoRoutesBetterThanRoundRobinAndCertifiesItsInvalidation) {
  const test_support::ScratchDir scratch("kvgov_demo_e2e");
  const std::string report = (scratch.path() / "report.json").string();
  std::string output;
  const int code = DaemonProcess::RunToExit(
      {"demo", "--quick", "--exit", "--listen", "127.0.0.1:0", "--gateway-listen", "127.0.0.1:0",
       "--data-dir", (scratch.path() / "data").string(), "--report-json", report},
      &output);
  ASSERT_EQ(code, 0) << output;
  EXPECT_NE(output.find("Routing: the same trace on the same engines"), std::string::npos)
      << output;

  std::ifstream file(report);
  const Json figures = Json::parse(file);
  EXPECT_EQ(figures["requests"], 45);
  // Every request went through the gateway, which scored each prediction
  // against the engine's report and accounted each tenant's saving.
  EXPECT_EQ(figures["gateway_predictions_scored"], 45) << figures.dump(2);
  EXPECT_GE(figures["gateway_predictions_exact"].get<uint64_t>(), 40u) << figures.dump(2);
  EXPECT_GT(figures["gateway_engine_cached_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(figures["gateway_tokenize_mismatches"], 0);
  const Json& saved = figures["gateway_saved_tokens_by_tenant"];
  ASSERT_EQ(saved.size(), 3u) << saved.dump();
  double saved_total = 0;
  for (const char* tenant : {"tenant-0", "tenant-1", "tenant-2"}) {
    EXPECT_GT(saved.value(tenant, 0.0), 0.0) << tenant << " " << saved.dump();
    saved_total += saved.value(tenant, 0.0);
  }
  EXPECT_EQ(saved_total, figures["gateway_engine_cached_tokens"].get<double>());
  // kv-aware placement beats round-robin on the same trace and engines.
  EXPECT_GT(figures["live_hit_rate"].get<double>(),
            figures["round_robin_hit_rate"].get<double>() + 0.05)
      << figures.dump(2);
  EXPECT_LE(figures["live_hit_rate"].get<double>(), 1.0);
  // The timestamp in the last tenant's system prompt is named, within a
  // granule of token 40, with what moving it saves.
  EXPECT_EQ(figures["breaker_tenant"], "tenant-2");
  EXPECT_EQ(figures["breaker_kind"], "breaker") << figures.dump(2);
  EXPECT_LE(figures["breaker_position_tokens"].get<int64_t>(), 40);
  EXPECT_GT(figures["breaker_position_tokens"].get<int64_t>(), 40 - 16);
  EXPECT_GT(figures["breaker_avoidable_tokens"].get<int64_t>(), 1000) << figures.dump(2);
  EXPECT_GT(figures["breaker_occurrences"].get<uint64_t>(), 0u);
  EXPECT_NE(output.find("breakers  tenant-2: tokens 32..48"), std::string::npos) << output;
  EXPECT_GT(figures["quarantined_blocks"].get<uint64_t>(), 0u);
  // The engine is kept from the span, not only kvgov's credit (ADR 0028).
  EXPECT_EQ(figures["quarantine_verdict"], "quarantine/diverted");
  EXPECT_EQ(figures["invalidation_state"], "certified");
  EXPECT_TRUE(figures["certificate_verified"].get<bool>());
  EXPECT_TRUE(figures["lease_credited_while_active"].get<bool>());
  EXPECT_EQ(figures["lease_verdict_after"], "expired_ttl");
  // A lease never lapses before its TTL.
  EXPECT_GE(figures["lease_expired_after_ms"].get<int64_t>(), 2000);
  // Through the gateway, the second turn finds the first one's prefix
  // cached, as the engine itself reports.
  EXPECT_GT(figures["gateway_turn2_prompt_tokens"].get<int64_t>(),
            figures["gateway_turn1_prompt_tokens"].get<int64_t>());
  EXPECT_GE(figures["gateway_turn2_cached_tokens"].get<int64_t>(), 64) << figures.dump(2);
  EXPECT_NE(output.find("curl -s http://127.0.0.1:"), std::string::npos) << output;
  // The route example the demo leaves for a newcomer's curl is a real
  // transcript, longer than a block, of a tenant still cached.
  std::ifstream example_file(figures["route_example_file"].get<std::string>());
  const Json example = Json::parse(example_file);
  EXPECT_EQ(example["tenant"], "tenant-1");
  EXPECT_GT(example["token_ids"].size(), 16u);

  // The certificate the demo saved verifies offline against the stopped
  // daemon's data dir, journal anchor included.
  const std::string data_dir = figures["data_dir"];
  const std::string certificate = figures["certificate_file"];
  EXPECT_EQ(figures["issuer_public_key"].get<std::string>().size(), 64u);
  std::string verified;
  EXPECT_EQ(
      DaemonProcess::RunToExit({"cert", "verify", certificate, "--data-dir", data_dir}, &verified),
      0)
      << verified;
  EXPECT_NE(verified.find("ok   anchor"), std::string::npos) << verified;
}

TEST(SimulateE2ETest, ComparesEveryPolicyOnOneTrace) {
  std::string output;
  const int code = DaemonProcess::RunToExit(
      {"simulate", "--workload", "shared-prefix", "--requests", "300", "--engines", "4", "--json"},
      &output);
  ASSERT_EQ(code, 0) << output;
  const Json report = Json::parse(output.substr(output.find('{')));
  std::map<std::string, Json> by_policy;
  for (const Json& policy : report["policies"]) by_policy[policy["policy"]] = policy;
  // kvgov's, the four baselines and the four peers' (as their docs describe them).
  ASSERT_EQ(by_policy.size(), 9u) << output;
  for (const char* peer : {"dynamo", "llm-d", "sglang", "prefix-hash"}) {
    EXPECT_EQ(by_policy[peer]["requests"], 300) << peer;
  }
  EXPECT_GT(by_policy["kvgov"]["hit_rate"].get<double>(),
            by_policy["round-robin"]["hit_rate"].get<double>());
  EXPECT_EQ(by_policy["kvgov"]["requests"], 300);
}

// Mooncake's trace, replayed with decode modeled: every policy reports its
// end-to-end latency beside TTFT.
TEST(SimulateE2ETest, ReplaysAMooncakeTraceWithDecode) {
  std::string output;
  const std::string trace =
      std::string(KVGOV_SOURCE_DIR) + "/src/sim/testdata/mooncake_trace_1000.jsonl";
  const int code = DaemonProcess::RunToExit({"simulate", "--trace", trace, "--window", "0:30",
                                             "--policy", "kvgov", "--policy", "sglang", "--json"},
                                            &output);
  ASSERT_EQ(code, 0) << output;
  const Json report = Json::parse(output.substr(output.find('{')));
  EXPECT_EQ(report["workload"], "trace");
  ASSERT_EQ(report["policies"].size(), 2u) << output;
  std::set<int64_t> first_seen;
  for (const Json& policy : report["policies"]) {
    EXPECT_EQ(policy["requests"], 158) << policy.dump();  // the trace's first 30 s
    EXPECT_TRUE(policy["decode_modeled"].get<bool>()) << policy.dump();
    EXPECT_GT(policy["e2e_p50_s"].get<double>(), policy["ttft_p50_s"].get<double>());
    // The prefill by cause adds up to it, and its floor is the trace's.
    const Json& causes = policy["prefill_causes"];
    EXPECT_EQ(causes["first_seen_tokens"].get<int64_t>() +
                  causes["not_held_tokens"].get<int64_t>() +
                  causes["routed_away_tokens"].get<int64_t>() +
                  causes["while_queued_tokens"].get<int64_t>(),
              policy["prefill_tokens"].get<int64_t>())
        << policy.dump();
    first_seen.insert(causes["first_seen_tokens"].get<int64_t>());
  }
  EXPECT_EQ(first_seen.size(), 1u) << output;
}

// A built-in workload with its answers decoded (the held-out workloads of
// docs/adr/0024); shared-prefix answers need a length.
TEST(SimulateE2ETest, ABuiltInWorkloadCanModelItsDecode) {
  std::string output;
  const int code = DaemonProcess::RunToExit({"simulate", "--workload", "agent", "--decode",
                                             "--requests", "96", "--policy", "kvgov", "--json"},
                                            &output);
  ASSERT_EQ(code, 0) << output;
  const Json report = Json::parse(output.substr(output.find('{')));
  ASSERT_EQ(report["policies"].size(), 1u) << output;
  const Json& kvgov = report["policies"][0];
  EXPECT_TRUE(kvgov["decode_modeled"].get<bool>()) << kvgov.dump();
  EXPECT_GT(kvgov["e2e_p50_s"].get<double>(), kvgov["ttft_p50_s"].get<double>());

  EXPECT_EQ(
      DaemonProcess::RunToExit({"simulate", "--workload", "shared-prefix", "--decode"}, &output),
      2);
  EXPECT_NE(output.find("--decode: the shared-prefix workload's answers have no length"),
            std::string::npos)
      << output;
}

TEST(SimulateE2ETest, ABadTraceLineIsNamedByNumber) {
  const test_support::ScratchDir scratch("kvgov_bad_trace");
  const std::filesystem::path trace = scratch / "trace.jsonl";
  {
    std::ofstream file(trace);
    file << R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]})"
         << "\n"
         << R"({"timestamp": 5, "input_length": 10, "output_length": 1})"
         << "\n";
  }
  std::string output;
  EXPECT_EQ(DaemonProcess::RunToExit({"simulate", "--trace", trace.string()}, &output), 2);
  EXPECT_NE(output.find("line 2: hash_ids: missing"), std::string::npos) << output;
}

TEST(SimulateE2ETest, AnUnknownWorkloadIsAUsageError) {
  std::string output;
  EXPECT_EQ(DaemonProcess::RunToExit({"simulate", "--workload", "chat"}, &output), 2);
  EXPECT_NE(output.find("unknown workload \"chat\""), std::string::npos) << output;
}

}  // namespace
}  // namespace kvgov::testing
