// The loud diagnostics, each firing and clearing on a real kvgov: a
// publisher silent while its engine runs requests, stored blocks whose
// parent kvgov never saw, and the same tokens under new hashes.

#include <httplib.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "e2e/daemon_process.h"
#include "e2e/fake_control.h"
#include "e2e/one_engine_test.h"
#include "e2e/wait.h"

namespace kvgov::testing {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;

class DiagnosticsE2ETest : public OneEngineTest {
 protected:
  void SetUp() override {
    StartKvgov({"--engine-silence-ms", "300", "--probe-interval-ms", "50"}, "vllm",
               ",control=" + control_.url());
    ASSERT_TRUE(publisher_.WaitForSubscriber(milliseconds(20000))) << daemon_.Stderr();
  }

  Json Diagnostics() { return Worker()["diagnostics"]; }
  bool MetricIs(const std::string& series, const std::string& value) {
    return Metrics().find(series + " " + value + "\n") != std::string::npos;
  }

  FakeControl control_{"/reset_prefix_cache", [] {}};
};

TEST_F(DiagnosticsE2ETest, ASilentPublisherOfABusyEngineFiresAndClears) {
  // Idle and silent: nothing to say.
  control_.SetMetrics("vllm:num_requests_running{engine=\"0\"} 0\n");
  ASSERT_TRUE(WaitFor([&] { return Diagnostics()["silent_for_ms"] >= 300; }));
  EXPECT_FALSE(Diagnostics()["silent_while_busy"]);
  // Requests run, no events come: events are off or the publisher died.
  control_.SetMetrics("vllm:num_requests_running{engine=\"0\"} 2\n");
  ASSERT_TRUE(WaitFor([&] { return Diagnostics()["silent_while_busy"] == true; }))
      << Diagnostics().dump() << daemon_.Stderr();
  EXPECT_TRUE(MetricIs(R"(kvgov_engine_silent{worker="w1"})", "1"));
  // The engine publishes: cleared.
  publisher_.Store(std::nullopt, 1, 100);
  ASSERT_TRUE(WaitFor([&] { return Diagnostics()["silent_while_busy"] == false; }))
      << Diagnostics().dump();
  EXPECT_LT(Diagnostics()["silent_for_ms"], 300);
  EXPECT_TRUE(MetricIs(R"(kvgov_engine_silent{worker="w1"})", "0"));
  EXPECT_EQ(daemon_.Stop(), 0) << daemon_.Stderr();
}

// Before its first batch an engine is idle while it has nothing to
// compute, silent once it serves requests and still publishes nothing (the
// state a misconfigured --kv-events-config leaves), live once it publishes.
TEST_F(DiagnosticsE2ETest, AnEngineWithoutEventsIsIdleUntilItServesRequests) {
  auto row = [&] {
    Json worker = Worker();
    return worker.is_object() ? worker : Json::object();
  };
  auto state = [&] { return row().value("state", std::string()); };
  control_.SetMetrics("vllm:num_requests_running{engine=\"0\"} 0\n");
  ASSERT_TRUE(WaitFor([&] { return row().value(Json::json_pointer("/health/probed"), false); }))
      << Worker().dump();
  EXPECT_EQ(state(), "idle") << Worker().dump();
  EXPECT_GE(row().value("waiting_for_events_ms", int64_t{-1}), 0);
  EXPECT_EQ(row().value("control_url", std::string()), control_.url());
  control_.SetMetrics("vllm:num_requests_running{engine=\"0\"} 1\n");
  ASSERT_TRUE(WaitFor([&] { return state() == "silent"; })) << Worker().dump();
  publisher_.Store(std::nullopt, 1, 100);
  ASSERT_TRUE(WaitFor([&] { return state() == "live"; })) << Worker().dump();
  EXPECT_FALSE(row().contains("waiting_for_events_ms"));
  EXPECT_EQ(daemon_.Stop(), 0) << daemon_.Stderr();
}

TEST_F(DiagnosticsE2ETest, OrphanBlocksAndHashDriftAreCountedPerWorker) {
  // A chain under a parent kvgov never saw (a batch it missed).
  publisher_.Store(uint64_t{0xDEADBEEF}, 2, 100);
  ASSERT_TRUE(WaitFor([&] { return Diagnostics()["orphan_blocks"] == 2; })) << Diagnostics().dump();
  EXPECT_TRUE(MetricIs(R"(kvgov_engine_orphan_blocks_total{worker="w1"})", "2"));
  EXPECT_EQ(Diagnostics()["hash_drift_blocks"], 0);

  // The same tokens again under new hashes: the engine's hash seed moved.
  publisher_.Store(std::nullopt, 3, 500);
  publisher_.Store(std::nullopt, 3, 500);
  ASSERT_TRUE(WaitFor([&] { return Diagnostics()["hash_drift_blocks"] == 3; }))
      << Diagnostics().dump();
  EXPECT_TRUE(MetricIs(R"(kvgov_engine_hash_drift_blocks_total{worker="w1"})", "3"));
  EXPECT_EQ(Diagnostics()["orphan_blocks"], 2);
  EXPECT_EQ(daemon_.Stop(), 0) << daemon_.Stderr();
}

// A stream kvgov cannot subscribe to at all is an error state of the
// worker, with the reason, not an engine waiting for work. ZeroMQ refuses
// the host's '!' when kvgov connects, after the spec was accepted.
TEST(StreamStateE2ETest, AStreamThatCannotBeSubscribedIsAnErrorState) {
  DaemonProcess daemon;
  ASSERT_TRUE(daemon
                  .Start({"--engine",
                          "id=w1,kind=vllm,events=tcp://engine!1:5557,model=llama,block-size=16"})
                  .ok())
      << daemon.Stderr();
  httplib::Client client("127.0.0.1", daemon.port());
  Json worker;
  ASSERT_TRUE(WaitFor([&] {
    httplib::Result response = client.Get("/v1/workers");
    if (!response || response->status != 200) return false;
    worker = Json::parse(response->body)["workers"][0];
    return worker.value("state", std::string()) == "stream_failed";
  })) << worker.dump()
      << daemon.Stderr();
  EXPECT_NE(
      worker.value("stream_error", std::string()).find("cannot subscribe to tcp://engine!1:5557"),
      std::string::npos)
      << worker.dump();
  EXPECT_EQ(daemon.Stop(), 0) << daemon.Stderr();
}

}  // namespace
}  // namespace kvgov::testing
