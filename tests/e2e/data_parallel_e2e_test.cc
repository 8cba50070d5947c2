// One --engine with dp-ranks=2 follows two streams, rank r on port + r for
// both its event and replay sockets, as vLLM and SGLang bind them; each
// rank's residency is its own worker and its own route candidate.

#include <httplib.h>

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "e2e/daemon_process.h"
#include "e2e/fake_engine_publisher.h"
#include "e2e/tokens.h"
#include "e2e/wait.h"

namespace kvgov::testing {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;

constexpr int64_t kBlockSize = 4;

std::string Endpoint(int port) { return "tcp://127.0.0.1:" + std::to_string(port); }

// Two ranks' publishers on consecutive ports: events at E and E + 1, replay
// at R and R + 1. Bases are drawn until all four binds succeed.
std::vector<std::unique_ptr<FakeEnginePublisher>> BindRanks(int* events_base, int* replay_base) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> port(20000, 60000);
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int events = port(rng);
    const int replay = port(rng);
    if (std::abs(events - replay) < 2) continue;
    try {
      std::vector<std::unique_ptr<FakeEnginePublisher>> ranks;
      for (int r = 0; r < 2; ++r) {
        ranks.push_back(std::make_unique<FakeEnginePublisher>(kBlockSize, Endpoint(events + r),
                                                              Endpoint(replay + r)));
      }
      *events_base = events;
      *replay_base = replay;
      return ranks;
    } catch (const zmq::error_t&) {
      // A port was taken; draw again.
    }
  }
  return {};
}

TEST(DataParallelE2ETest, EachRankIsItsOwnStreamAndCandidate) {
  int events_base = 0;
  int replay_base = 0;
  std::vector<std::unique_ptr<FakeEnginePublisher>> ranks = BindRanks(&events_base, &replay_base);
  ASSERT_EQ(ranks.size(), 2u) << "no free consecutive loopback ports";
  // Rank 1 published before kvgov came up; the catch-up brings it in.
  ranks[1]->Store(std::nullopt, 2, 500);

  DaemonProcess daemon;
  Status started = daemon.Start(
      {"--engine", "id=dp,kind=vllm,events=" + Endpoint(events_base) +
                       ",replay=" + Endpoint(replay_base) +
                       ",model=llama,dp-ranks=2,block-size=" + std::to_string(kBlockSize)});
  ASSERT_TRUE(started.ok()) << started.ToString();
  httplib::Client client("127.0.0.1", daemon.port());
  for (auto& rank : ranks) ASSERT_TRUE(rank->WaitForSubscriber(milliseconds(20000)));
  ranks[0]->Store(std::nullopt, 3, 100);

  auto workers = [&] {
    httplib::Result response = client.Get("/v1/workers");
    return response ? Json::parse(response->body)["workers"] : Json::array();
  };
  ASSERT_TRUE(WaitFor([&] {
    Json all = workers();
    return all.size() == 2 && all[0]["blocks"]["hbm"] == 3 && all[1]["blocks"]["hbm"] == 2;
  })) << workers().dump()
      << daemon.Stderr();
  const Json all = workers();
  EXPECT_EQ(all[0]["id"], "dp@dp0");
  EXPECT_EQ(all[0]["events_endpoint"], Endpoint(events_base));
  EXPECT_EQ(all[1]["id"], "dp@dp1");
  EXPECT_EQ(all[1]["events_endpoint"], Endpoint(events_base + 1));
  EXPECT_EQ(all[1]["last_seq"], 0);

  // Each prefix earns credit on its own rank only.
  auto route = [&](const std::vector<int64_t>& prompt) {
    httplib::Result response = client.Post(
        "/v1/route", Json({{"model", "llama"}, {"token_ids", prompt}}).dump(), "application/json");
    EXPECT_TRUE(response && response->status == 200);
    return Json::parse(response->body);
  };
  auto overlap_of = [](const Json& decision, const std::string& worker) {
    for (const Json& candidate : decision["candidates"]) {
      if (candidate["worker"] == worker) return candidate["overlap_blocks"].get<int64_t>();
    }
    return int64_t{-1};
  };
  const Json first = route(Tokens(12, 100));
  EXPECT_EQ(first["worker"], "dp@dp0") << first.dump();
  EXPECT_EQ(overlap_of(first, "dp@dp0"), 3);
  EXPECT_EQ(overlap_of(first, "dp@dp1"), 0);
  const Json second = route(Tokens(8, 500));
  EXPECT_EQ(second["worker"], "dp@dp1") << second.dump();
  EXPECT_EQ(overlap_of(second, "dp@dp1"), 2);
  EXPECT_EQ(overlap_of(second, "dp@dp0"), 0);
  EXPECT_EQ(daemon.Stop(), 0) << daemon.Stderr();
}

}  // namespace
}  // namespace kvgov::testing
