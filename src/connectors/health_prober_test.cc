#include "kvgov/connectors/health_prober.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "connectors/test_support.h"

namespace kvgov::connectors {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr std::string_view kTwoEngineMetrics =
    R"(# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 4.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:num_requests_waiting{engine="1",model_name="m"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
)";

// A fake engine control API on 127.0.0.1: /health answers with a status the
// test sets, /metrics with a body it sets. /health requests can be held
// (blocked in the handler) to freeze the prober mid-round.
class FakeEngine {
 public:
  FakeEngine() {
    server_.Get("/health", [this](const httplib::Request&, httplib::Response& response) {
      std::unique_lock lock(mu_);
      ++health_requests_;
      if (holding_) {
        if (serve_before_hold_ > 0) {
          --serve_before_hold_;
        } else {
          ++held_;
          changed_.wait_for(lock, std::chrono::seconds(20), [this] { return !holding_; });
        }
      }
      response.status = health_status_;
      response.set_content(health_status_ == 200 ? "" : "unhealthy", "text/plain");
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
      std::lock_guard lock(mu_);
      response.status = metrics_status_;
      response.set_content(metrics_body_, "text/plain; version=0.0.4");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    listener_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(milliseconds(1));
  }

  ~FakeEngine() {
    Release();
    server_.stop();
    listener_.join();
  }

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  void SetHealth(int status) {
    std::lock_guard lock(mu_);
    health_status_ = status;
  }
  void SetMetrics(std::string body, int status = 200) {
    std::lock_guard lock(mu_);
    metrics_body_ = std::move(body);
    metrics_status_ = status;
  }
  // Answers /health with `status`; after `serve_before_hold` more answers,
  // holds every further /health request until Release.
  void SetHealthAndHold(int status, int serve_before_hold) {
    std::lock_guard lock(mu_);
    health_status_ = status;
    holding_ = true;
    serve_before_hold_ = serve_before_hold;
  }
  void Release() {
    {
      std::lock_guard lock(mu_);
      holding_ = false;
    }
    changed_.notify_all();
  }
  int held() const {
    std::lock_guard lock(mu_);
    return held_;
  }
  int health_requests() const {
    std::lock_guard lock(mu_);
    return health_requests_;
  }

 private:
  httplib::Server server_;
  std::thread listener_;
  int port_ = -1;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  int health_status_ = 200;
  std::string metrics_body_;
  int metrics_status_ = 200;
  bool holding_ = false;
  int serve_before_hold_ = 0;
  int held_ = 0;
  int health_requests_ = 0;
};

ingest::EngineSpec Engine(std::string id, std::string control, int dp_ranks = 1) {
  ingest::EngineSpec engine;
  engine.id = std::move(id);
  engine.events = "tcp://127.0.0.1:5557";
  engine.model = "m";
  engine.dp_ranks = dp_ranks;
  engine.control = std::move(control);
  return engine;
}

HealthProberOptions FastOptions() {
  HealthProberOptions options;
  options.probe_interval_ms = 20;
  options.timeout_ms = 1000;
  return options;
}

router::WorkerStatus StatusOf(const router::WorkerStatusTable& table, const std::string& worker) {
  std::optional<router::WorkerStatus> status = table.Get(worker);
  return status ? *status : router::WorkerStatus{};
}

TEST(HealthProberTest, WorkerTurnsHealthyAfterTheFirstGoodProbeAndGetsTheSummedLoad) {
  FakeEngine engine;
  engine.SetMetrics(std::string(kTwoEngineMetrics));
  router::WorkerStatusTable table;
  ASSERT_TRUE(table.Add("w1", true).ok());
  HealthProber prober(&table, {Engine("w1", engine.url())}, FastOptions());
  const int64_t before =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  ASSERT_TRUE(prober.Start().ok());

  ASSERT_TRUE(WaitFor([&] { return StatusOf(table, "w1").scraped.has_value(); }));
  router::WorkerStatus status = StatusOf(table, "w1");
  EXPECT_TRUE(status.healthy);
  EXPECT_EQ(status.consecutive_failures, 0);
  EXPECT_GE(status.last_probe_ms, before);
  ASSERT_TRUE(status.scraped.has_value());
  EXPECT_DOUBLE_EQ(status.scraped->running, 7.0);
  EXPECT_DOUBLE_EQ(status.scraped->waiting, 2.0);
  EXPECT_DOUBLE_EQ(status.scraped->kv_usage, 0.375);
  EXPECT_GE(status.scraped->scraped_at_ms, before);
}

TEST(HealthProberTest, HealthHasHysteresisAndRecovers) {
  FakeEngine engine;
  router::WorkerStatusTable table;
  ASSERT_TRUE(table.Add("w1", true).ok());
  HealthProber prober(&table, {Engine("w1", engine.url())}, FastOptions());
  ASSERT_TRUE(prober.Start().ok());
  ASSERT_TRUE(WaitFor([&] { return StatusOf(table, "w1").healthy; }));

  // One 503, then the next probe is held in the handler: the table must sit
  // at exactly one failure, still healthy.
  engine.SetHealthAndHold(503, 1);
  ASSERT_TRUE(WaitFor([&] { return engine.held() > 0; }));
  router::WorkerStatus one_failure = StatusOf(table, "w1");
  EXPECT_EQ(one_failure.consecutive_failures, 1);
  EXPECT_TRUE(one_failure.healthy);
  EXPECT_NE(one_failure.last_probe_error.find("HTTP 503"), std::string::npos)
      << one_failure.last_probe_error;

  engine.Release();
  ASSERT_TRUE(WaitFor([&] { return StatusOf(table, "w1").consecutive_failures >= 2; }));
  router::WorkerStatus failed = StatusOf(table, "w1");
  EXPECT_FALSE(failed.healthy);
  EXPECT_NE(failed.last_probe_error.find("/health"), std::string::npos) << failed.last_probe_error;

  engine.SetHealth(200);
  ASSERT_TRUE(WaitFor([&] { return StatusOf(table, "w1").healthy; }));
  router::WorkerStatus recovered = StatusOf(table, "w1");
  EXPECT_EQ(recovered.consecutive_failures, 0);
  EXPECT_EQ(recovered.last_probe_error, "");
}

// Each rank's stream is its own worker and gets its rank's own series
// (vLLM's engine label), not the whole engine's load.
TEST(HealthProberTest, DataParallelEngineGivesEachRankItsOwnLoad) {
  FakeEngine engine;
  engine.SetMetrics(std::string(kTwoEngineMetrics));
  router::WorkerStatusTable table;
  ASSERT_TRUE(table.Add("dp@dp0", true).ok());
  ASSERT_TRUE(table.Add("dp@dp1", true).ok());
  HealthProber prober(&table, {Engine("dp", engine.url(), 2)}, FastOptions());
  ASSERT_TRUE(prober.Start().ok());

  for (const auto& [worker, running] : {std::pair{"dp@dp0", 3.0}, std::pair{"dp@dp1", 4.0}}) {
    ASSERT_TRUE(WaitFor([&] {
      router::WorkerStatus status = StatusOf(table, worker);
      return status.healthy && status.scraped.has_value();
    })) << worker;
    EXPECT_DOUBLE_EQ(StatusOf(table, worker).scraped->running, running) << worker;
  }
}

TEST(HealthProberTest, ClosedPortIsAFailureWithAnErrorText) {
  ClosedPort closed;
  ASSERT_NE(closed.port(), 0);
  router::WorkerStatusTable table;
  ASSERT_TRUE(table.Add("gone", true).ok());
  HealthProber prober(&table, {Engine("gone", "http://127.0.0.1:" + std::to_string(closed.port()))},
                      FastOptions());
  ASSERT_TRUE(prober.Start().ok());

  ASSERT_TRUE(WaitFor([&] { return StatusOf(table, "gone").consecutive_failures >= 2; }));
  router::WorkerStatus status = StatusOf(table, "gone");
  EXPECT_FALSE(status.healthy);
  EXPECT_NE(status.last_probe_ms, 0);
  EXPECT_NE(status.last_probe_error.find("cannot connect"), std::string::npos)
      << status.last_probe_error;
  EXPECT_NE(status.last_probe_error.find(std::to_string(closed.port())), std::string::npos)
      << status.last_probe_error;
  EXPECT_FALSE(status.scraped.has_value());
}

TEST(HealthProberTest, EngineWithoutControlUrlIsNotProbed) {
  FakeEngine engine;
  router::WorkerStatusTable table;
  ASSERT_TRUE(table.Add("probed", true).ok());
  ASSERT_TRUE(table.Add("quiet", false).ok());
  HealthProber prober(&table, {Engine("quiet", ""), Engine("probed", engine.url())}, FastOptions());
  ASSERT_TRUE(prober.Start().ok());

  // Three /health requests mean at least two whole rounds have run.
  ASSERT_TRUE(WaitFor([&] { return engine.health_requests() >= 3; }));
  router::WorkerStatus quiet = StatusOf(table, "quiet");
  EXPECT_EQ(quiet.last_probe_ms, 0);
  EXPECT_TRUE(quiet.healthy);
  EXPECT_FALSE(quiet.scraped.has_value());
}

TEST(HealthProberTest, UnusableMetricsLeaveTheLoadUnsetButHealthOk) {
  FakeEngine engine;
  engine.SetMetrics("vllm:num_requests_running{model_name=\"m\"} NaN\n");
  router::WorkerStatusTable table;
  ASSERT_TRUE(table.Add("w1", true).ok());
  HealthProberOptions options = FastOptions();
  options.max_metrics_bytes = 256;
  HealthProber prober(&table, {Engine("w1", engine.url())}, options);
  ASSERT_TRUE(prober.Start().ok());

  // A round finishes its scrape before the next round's /health, so after
  // three requests two scrapes have come and gone.
  int seen = engine.health_requests();
  ASSERT_TRUE(WaitFor([&] { return engine.health_requests() >= seen + 3; }));
  EXPECT_TRUE(StatusOf(table, "w1").healthy);
  EXPECT_FALSE(StatusOf(table, "w1").scraped.has_value());

  engine.SetMetrics(std::string(kTwoEngineMetrics), 404);
  seen = engine.health_requests();
  ASSERT_TRUE(WaitFor([&] { return engine.health_requests() >= seen + 3; }));
  EXPECT_FALSE(StatusOf(table, "w1").scraped.has_value());

  engine.SetMetrics(std::string(1000, '#') + "\nvllm:num_requests_running 1\n");  // over 256
  seen = engine.health_requests();
  ASSERT_TRUE(WaitFor([&] { return engine.health_requests() >= seen + 3; }));
  EXPECT_FALSE(StatusOf(table, "w1").scraped.has_value());

  engine.SetMetrics("vllm:num_requests_waiting 9\n");
  ASSERT_TRUE(WaitFor([&] { return StatusOf(table, "w1").scraped.has_value(); }));
  EXPECT_DOUBLE_EQ(StatusOf(table, "w1").scraped->waiting, 9.0);
}

TEST(HealthProberTest, StopReturnsPromptlyDespiteALongInterval) {
  FakeEngine engine;
  router::WorkerStatusTable table;
  ASSERT_TRUE(table.Add("w1", true).ok());
  HealthProberOptions options;
  options.probe_interval_ms = 60000;
  HealthProber prober(&table, {Engine("w1", engine.url())}, options);
  ASSERT_TRUE(prober.Start().ok());
  // The first round runs at once, not an interval later.
  ASSERT_TRUE(WaitFor([&] { return StatusOf(table, "w1").healthy; }));

  const auto start = steady_clock::now();
  prober.Stop();
  EXPECT_LT(steady_clock::now() - start, milliseconds(2000));
  prober.Stop();  // idempotent
}

TEST(HealthProberTest, StopAbortsAProbeInFlight) {
  FakeEngine engine;
  engine.SetHealthAndHold(200, 0);
  router::WorkerStatusTable table;
  ASSERT_TRUE(table.Add("w1", true).ok());
  HealthProberOptions options;
  options.probe_interval_ms = 20;
  options.timeout_ms = 30000;
  auto prober = std::make_unique<HealthProber>(
      &table, std::vector<ingest::EngineSpec>{Engine("w1", engine.url())}, options);
  ASSERT_TRUE(prober->Start().ok());
  ASSERT_TRUE(WaitFor([&] { return engine.held() > 0; }));

  const auto start = steady_clock::now();
  prober.reset();  // the destructor stops
  EXPECT_LT(steady_clock::now() - start, milliseconds(2000));
}

TEST(HealthProberTest, ValidateAcceptsHttpControlUrls) {
  for (const char* control : {"http://127.0.0.1:8000", "http://127.0.0.1:8000/",
                              "http://engine-0.local:8000", "http://[::1]:8000", "http://host"}) {
    EXPECT_TRUE(HealthProber::Validate({Engine("e1", control)}).ok()) << control;
  }
  EXPECT_TRUE(HealthProber::Validate({Engine("e1", "")}).ok());
  EXPECT_TRUE(HealthProber::Validate({}).ok());
}

TEST(HealthProberTest, ValidateRejectsHttpsAsUnsupported) {
  Status status = HealthProber::Validate({Engine("ok", ""), Engine("e1", "https://h:8443")});
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("engine 'e1'"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("https is not supported"), std::string::npos) << status.message();
}

TEST(HealthProberTest, ValidateRejectsMalformedControlUrls) {
  for (const char* control :
       {"ftp://h:21", "http://", "http://:8000", "http://h:", "http://h:0", "http://h:65536",
        "http://h:80x", "http://h:8000/v1", "http://user@h:8000", "http://h:8000?x=1",
        "http://::1:8000", "http://[::1", "http://[::1]8000"}) {
    Status status = HealthProber::Validate({Engine("e1", control)});
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << control;
    EXPECT_NE(status.message().find("engine 'e1': control:"), std::string::npos)
        << control << " -> " << status.message();
  }
}

TEST(HealthProberTest, ValidateRejectsAnEngineWhoseWorkersDoNotExpand) {
  ingest::EngineSpec engine = Engine("e1", "http://127.0.0.1:8000", 2);
  engine.events = "tcp://127.0.0.1:65535";  // rank 1 would be past 65535
  Status status = HealthProber::Validate({engine});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("engine 'e1'"), std::string::npos) << status.message();
}

TEST(HealthProberTest, StartChecksItsInputsAndRunsOnce) {
  router::WorkerStatusTable table;
  HealthProber https(&table, {Engine("e1", "https://h:8443")});
  EXPECT_EQ(https.Start().code(), StatusCode::kInvalidArgument);

  HealthProberOptions zero;
  zero.probe_interval_ms = 0;
  HealthProber no_interval(&table, {}, zero);
  EXPECT_EQ(no_interval.Start().code(), StatusCode::kInvalidArgument);

  HealthProber nothing_to_probe(&table, {Engine("quiet", "")});
  EXPECT_TRUE(nothing_to_probe.Start().ok());
  EXPECT_EQ(nothing_to_probe.Start().code(), StatusCode::kFailedPrecondition);
  nothing_to_probe.Stop();

  HealthProber stopped(&table, {});
  stopped.Stop();
  EXPECT_EQ(stopped.Start().code(), StatusCode::kFailedPrecondition);
}

TEST(HealthProberTest, OutcomesForUnregisteredWorkersAreDropped) {
  FakeEngine engine;
  router::WorkerStatusTable table;
  HealthProber prober(&table, {Engine("nobody", engine.url())}, FastOptions());
  ASSERT_TRUE(prober.Start().ok());
  ASSERT_TRUE(WaitFor([&] { return engine.health_requests() >= 2; }));
  EXPECT_TRUE(table.All().empty());
}

}  // namespace
}  // namespace kvgov::connectors
