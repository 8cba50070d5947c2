// kvgov serve following a real ZeroMQ publisher that speaks vLLM's framing
// and replay protocol, through gaps, duplicates, bad payloads, clears, a
// restart and both encodings.

#include <httplib.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "e2e/one_engine_test.h"
#include "e2e/wait.h"

namespace kvgov::testing {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;

class IngestE2ETest : public OneEngineTest {
 protected:
  // Waits until kvgov has applied everything up to the publisher's last seq
  // and holds exactly the blocks the publisher holds.
  ::testing::AssertionResult Converged() {
    const int64_t last = static_cast<int64_t>(publisher_.next_seq()) - 1;
    const uint64_t held = publisher_.held_blocks();
    if (WaitFor([&] {
          Json worker = Worker();
          return !worker.is_null() && worker["last_seq"] == last && worker["blocks"]["hbm"] == held;
        })) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "want last_seq " << last << " and " << held
                                         << " hbm blocks, kvgov has " << Worker().dump() << "\n"
                                         << daemon_.Stderr();
  }
};

TEST_F(IngestE2ETest, IndexEqualsWhatThePublisherHolds) {
  StartKvgov();
  ASSERT_TRUE(publisher_.WaitForSubscriber(milliseconds(20000))) << daemon_.Stderr();
  // Both catch-ups of the connection first: a settling one racing the first
  // live batches would count their live copies as redeliveries.
  ASSERT_TRUE(WaitForCatchUps(2)) << Worker().dump();

  // Stores chained across batches.
  std::vector<uint64_t> a = publisher_.Store(std::nullopt, 3, 100);
  std::vector<uint64_t> b = publisher_.Store(a.back(), 2, 112);
  ASSERT_TRUE(Converged());

  // A lost batch: the next one reveals the gap, replay repairs it.
  publisher_.DropNext();
  std::vector<uint64_t> c = publisher_.Store(std::nullopt, 1, 200);
  publisher_.Store(c.back(), 1, 204);
  ASSERT_TRUE(Converged());

  // A redelivery changes nothing.
  publisher_.Resend(publisher_.next_seq() - 1);

  // The legacy positional encoding on the same stream.
  publisher_.set_encoding(FakeEnginePublisher::Encoding::kLegacyPositional);
  publisher_.Remove({b.back()});
  ASSERT_TRUE(Converged());

  // Bytes that do not decode are counted; the stream goes on.
  publisher_.SendGarbage();
  publisher_.Clear();
  publisher_.Store(std::nullopt, 2, 300);
  ASSERT_TRUE(Converged());

  // The engine restarts: seq back to 0, a later clock.
  publisher_.set_encoding(FakeEnginePublisher::Encoding::kMapEvents);
  publisher_.Restart();
  std::vector<uint64_t> f = publisher_.Store(std::nullopt, 3, 400);
  publisher_.Store(f.back(), 1, 412);
  ASSERT_TRUE(Converged());

  Json worker = Worker();
  EXPECT_EQ(worker["state"], "live");
  EXPECT_EQ(worker["seq_gaps"], 1);
  EXPECT_EQ(worker["replays"], 1);
  EXPECT_EQ(worker["replays_failed"], 0);
  EXPECT_EQ(worker["duplicates"], 1);
  EXPECT_EQ(worker["decode_errors"], 1);
  EXPECT_EQ(worker["restarts"], 1);
  EXPECT_EQ(worker["blocks"]["hbm"], 4);

  std::string metrics = client_->Get("/metrics")->body;
  EXPECT_NE(metrics.find(R"(kvgov_engine_restarts_total{worker="w1"} 1)"), std::string::npos)
      << metrics;
  EXPECT_NE(
      metrics.find(R"(kvgov_engine_decode_errors_total{worker="w1",reason="malformed_msgpack"} 1)"),
      std::string::npos);
  EXPECT_NE(metrics.find(R"(kvgov_engine_replays_total{worker="w1",outcome="ok"} 1)"),
            std::string::npos);
  EXPECT_NE(metrics.find(R"(kvgov_residency_blocks{worker="w1",tier="hbm"} 4)"), std::string::npos);
  EXPECT_NE(metrics.find(R"(kvgov_cache_events_total{source="ride_engine",plane="kv_transfer",)"
                         R"(direction="store",outcome="ok"})"),
            std::string::npos);

  EXPECT_EQ(daemon_.Stop(), 0) << daemon_.Stderr();
}

TEST_F(IngestE2ETest, PromtoolAcceptsMetrics) {
  if (!std::filesystem::exists("/usr/bin/promtool")) {
    GTEST_SKIP() << "promtool is not installed (scripts/install-deps.sh installs prometheus)";
  }
  StartKvgov();
  ASSERT_TRUE(publisher_.WaitForSubscriber(milliseconds(20000)));
  publisher_.Store(std::nullopt, 2, 100);
  ASSERT_TRUE(Converged());
  ASSERT_EQ(client_
                ->Post("/v1/events",
                       R"({"events":[{"type":"provider_cache","provider":"openai",)"
                       R"("model_id":"gpt","cached_tokens":10}]})",
                       "application/json")
                ->status,
            200);
  const std::filesystem::path scrape = daemon_.dir() / "metrics.txt";
  {
    std::FILE* out = std::fopen(scrape.c_str(), "w");
    ASSERT_NE(out, nullptr);
    const std::string body = client_->Get("/metrics")->body;
    std::fwrite(body.data(), 1, body.size(), out);
    std::fclose(out);
  }
  const std::string command = "promtool check metrics < " + scrape.string() + " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[512];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = ::pclose(pipe);
  EXPECT_EQ(status, 0) << output;
}

}  // namespace
}  // namespace kvgov::testing
