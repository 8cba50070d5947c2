#include "kvgov/connectors/invalidation_connector.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "connectors/test_support.h"

namespace kvgov::connectors {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
using Json = nlohmann::json;

// One POST as the fake owner saw it.
struct Seen {
  std::string path;
  std::string body;
  std::string content_type;
  std::string authorization;  // "" when the header was absent
  bool had_authorization = false;
};

// A fake cache owner on 127.0.0.1: answers the i-th POST (any path) with
// statuses[i], then `then` for every later one, and records each request.
// With echo_authorization, error bodies repeat the Authorization header, as
// a careless owner might.
class FakeOwner {
 public:
  explicit FakeOwner(std::vector<int> statuses, int then = 200, bool echo_authorization = false)
      : statuses_(std::move(statuses)), then_(then), echo_authorization_(echo_authorization) {
    server_.Post(R"(/.*)", [this](const httplib::Request& request, httplib::Response& response) {
      std::lock_guard lock(mu_);
      const size_t call = seen_.size();
      seen_.push_back(Seen{request.path, request.body, request.get_header_value("Content-Type"),
                           request.get_header_value("Authorization"),
                           request.has_header("Authorization")});
      response.status = call < statuses_.size() ? statuses_[call] : then_;
      if (response.status >= 200 && response.status <= 299) {
        response.set_content(R"({"ok":true})", "application/json");
      } else if (echo_authorization_) {
        response.set_content("rejected, you sent: " + request.get_header_value("Authorization"),
                             "text/plain");
      } else {
        response.set_content("busy\nretry later", "text/plain");
      }
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    listener_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(milliseconds(1));
  }

  ~FakeOwner() {
    server_.stop();
    listener_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  std::vector<Seen> seen() const {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  const std::vector<int> statuses_;
  const int then_;
  const bool echo_authorization_;
  httplib::Server server_;
  std::thread listener_;
  int port_ = -1;
  mutable std::mutex mu_;
  std::vector<Seen> seen_;  // guarded by mu_
};

RetryPolicy Fast(int max_attempts = 5) {
  RetryPolicy retry;
  retry.max_attempts = max_attempts;
  retry.initial_backoff_ms = 1;
  retry.multiplier = 2.0;
  retry.max_backoff_ms = 4;
  retry.timeout_ms = 2000;
  return retry;
}

ConnectorConfig Config(std::string kind, std::string control, RetryPolicy retry = Fast()) {
  ConnectorConfig config;
  config.kind = std::move(kind);
  config.control = std::move(control);
  config.retry = retry;
  if (config.kind == "webhook") config.webhook_path = "/kv/evict";
  return config;
}

std::unique_ptr<InvalidationConnector> Make(const ConnectorConfig& config) {
  Result<std::unique_ptr<InvalidationConnector>> connector = MakeConnector(config);
  EXPECT_TRUE(connector.ok()) << connector.status().ToString();
  return connector.ok() ? std::move(connector).value() : nullptr;
}

EvictionRequest Request(std::vector<std::string> spans = {"00ab", "ff10"}) {
  EvictionRequest request;
  request.worker = "w1";
  request.span_digests = std::move(spans);
  request.reason = "poisoned_kv";
  request.directive_id = "dir-42";
  return request;
}

TEST(InvalidationConnectorTest, VllmResetsTheWholePrefixCacheAndIsDegradedWhenSpansWereNamed) {
  FakeOwner owner({}, 200);
  std::unique_ptr<InvalidationConnector> connector = Make(Config("vllm", owner.url() + "/"));
  ASSERT_NE(connector, nullptr);
  EXPECT_EQ(connector->name(), "vllm");
  std::atomic<bool> cancel{false};

  Result<DispatchResult> result = connector->Dispatch(Request(), cancel);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->acknowledged);
  EXPECT_EQ(result->scope, KVEvictionScope::kWholePrefixCache);
  EXPECT_TRUE(result->degraded);
  EXPECT_EQ(result->degrade_reason, "exact_span_unsupported_whole_prefix_flush");
  EXPECT_EQ(result->connector, "vllm");
  ASSERT_EQ(result->attempts.size(), 1u);
  EXPECT_EQ(result->attempts[0].http_status, 200);
  EXPECT_EQ(result->attempts[0].error, "");
  EXPECT_GT(result->attempts[0].at_ms, 0);

  std::vector<Seen> seen = owner.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].path, "/reset_prefix_cache");
  EXPECT_EQ(seen[0].body, "");
  EXPECT_FALSE(seen[0].had_authorization);

  // A whole flush nobody asked to be exact is not degraded.
  Result<DispatchResult> plain = connector->Dispatch(Request({}), cancel);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_TRUE(plain->acknowledged);
  EXPECT_FALSE(plain->degraded);
  EXPECT_EQ(plain->degrade_reason, "");
}

TEST(InvalidationConnectorTest, SglangBusyAnswersAreRetriedWithGrowingBackoff) {
  FakeOwner owner({400, 400}, 200);
  RetryPolicy retry;
  retry.initial_backoff_ms = 50;
  retry.multiplier = 3.0;
  retry.max_backoff_ms = 1000;
  std::unique_ptr<InvalidationConnector> connector = Make(Config("sglang", owner.url(), retry));
  ASSERT_NE(connector, nullptr);
  std::atomic<bool> cancel{false};

  Result<DispatchResult> result = connector->Dispatch(Request(), cancel);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->acknowledged);
  EXPECT_EQ(result->scope, KVEvictionScope::kWholePrefixCache);
  EXPECT_TRUE(result->degraded);
  ASSERT_EQ(result->attempts.size(), 3u);
  EXPECT_EQ(result->attempts[0].http_status, 400);
  EXPECT_EQ(result->attempts[1].http_status, 400);
  EXPECT_EQ(result->attempts[2].http_status, 200);
  EXPECT_EQ(result->attempts[0].error, "HTTP 400: busy retry later");
  EXPECT_EQ(result->attempts[2].error, "");

  // Pauses of 50 then 150 ms: lower bounds a little under, upper bounds
  // loose, and the second gap longer than the first.
  const int64_t first_gap = result->attempts[1].at_ms - result->attempts[0].at_ms;
  const int64_t second_gap = result->attempts[2].at_ms - result->attempts[1].at_ms;
  EXPECT_GE(first_gap, 45);
  EXPECT_GE(second_gap, 140);
  EXPECT_GT(second_gap, first_gap);
  EXPECT_LT(second_gap, 5000);

  std::vector<Seen> seen = owner.seen();
  ASSERT_EQ(seen.size(), 3u);
  for (const Seen& request : seen) EXPECT_EQ(request.path, "/flush_cache");
}

TEST(InvalidationConnectorTest, ConflictRateLimitAndServerErrorsAreRetried) {
  FakeOwner owner({409, 429, 503}, 200);
  std::unique_ptr<InvalidationConnector> connector = Make(Config("sglang", owner.url()));
  ASSERT_NE(connector, nullptr);
  std::atomic<bool> cancel{false};

  Result<DispatchResult> result = connector->Dispatch(Request(), cancel);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(result->attempts.size(), 4u);
  EXPECT_EQ(result->attempts[0].http_status, 409);
  EXPECT_EQ(result->attempts[1].http_status, 429);
  EXPECT_EQ(result->attempts[2].http_status, 503);
  EXPECT_EQ(result->attempts[3].http_status, 200);
}

TEST(InvalidationConnectorTest, LmcacheClearSendsTheConfiguredInstanceAndLocation) {
  FakeOwner owner({}, 200);
  ConnectorConfig config = Config("lmcache", owner.url());
  config.lmcache_instance_id = "inst-7";
  config.lmcache_location = "LocalDiskBackend";
  std::unique_ptr<InvalidationConnector> connector = Make(config);
  ASSERT_NE(connector, nullptr);
  std::atomic<bool> cancel{false};

  Result<DispatchResult> result = connector->Dispatch(Request(), cancel);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->acknowledged);
  EXPECT_EQ(result->scope, KVEvictionScope::kWholePrefixCache);
  EXPECT_TRUE(result->degraded);
  EXPECT_EQ(result->connector, "lmcache");

  std::vector<Seen> seen = owner.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].path, "/clear");
  EXPECT_EQ(seen[0].content_type, "application/json");
  EXPECT_EQ(Json::parse(seen[0].body),
            (Json{{"instance_id", "inst-7"}, {"location", "LocalDiskBackend"}}));
}

TEST(InvalidationConnectorTest, LmcacheDefaultsAreLmcachesOwn) {
  const ConnectorConfig config;
  EXPECT_EQ(config.lmcache_instance_id, "lmcache_default_instance");
  EXPECT_EQ(config.lmcache_location, "LocalCPUBackend");
}

TEST(InvalidationConnectorTest, WebhookPostsTheExactSpans) {
  FakeOwner owner({}, 200);
  std::unique_ptr<InvalidationConnector> connector = Make(Config("webhook", owner.url()));
  ASSERT_NE(connector, nullptr);
  std::atomic<bool> cancel{false};

  Result<DispatchResult> result = connector->Dispatch(Request({"00ab", "FF10", "3c"}), cancel);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->acknowledged);
  EXPECT_EQ(result->scope, KVEvictionScope::kExactSpan);
  EXPECT_FALSE(result->degraded);
  EXPECT_EQ(result->degrade_reason, "");
  EXPECT_EQ(result->connector, "webhook");

  std::vector<Seen> seen = owner.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].path, "/kv/evict");
  EXPECT_EQ(seen[0].content_type, "application/json");
  const Json body = Json::parse(seen[0].body);
  EXPECT_EQ(body, (Json{{"directive_id", "dir-42"},
                        {"worker", "w1"},
                        {"reason", "poisoned_kv"},
                        {"spans", {"00ab", "FF10", "3c"}}}));
}

TEST(InvalidationConnectorTest, WebhookRefusesAnExactSpanRequestNamingNoSpanBeforeAnyRequest) {
  FakeOwner owner({}, 200);
  std::unique_ptr<InvalidationConnector> connector = Make(Config("webhook", owner.url()));
  ASSERT_NE(connector, nullptr);
  std::atomic<bool> cancel{false};

  Result<DispatchResult> empty = connector->Dispatch(Request({}), cancel);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("at least one span"), std::string::npos)
      << empty.status().message();

  Result<DispatchResult> not_hex = connector->Dispatch(Request({"00ab", "xyz"}), cancel);
  ASSERT_FALSE(not_hex.ok());
  EXPECT_EQ(not_hex.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(not_hex.status().message().find("span 1"), std::string::npos)
      << not_hex.status().message();

  EXPECT_TRUE(owner.seen().empty());
}

TEST(InvalidationConnectorTest, NotFoundFailsAtOnceNamingTheUrl) {
  FakeOwner owner({}, 404);
  std::unique_ptr<InvalidationConnector> connector = Make(Config("vllm", owner.url()));
  ASSERT_NE(connector, nullptr);
  std::atomic<bool> cancel{false};

  Result<DispatchResult> result = connector->Dispatch(Request(), cancel);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kNotFound);
  const std::string message = result.status().message();
  EXPECT_NE(message.find(owner.url() + "/reset_prefix_cache"), std::string::npos) << message;
  EXPECT_NE(message.find("HTTP 404"), std::string::npos) << message;
  EXPECT_NE(message.find("VLLM_SERVER_DEV_MODE=1"), std::string::npos) << message;
  EXPECT_EQ(owner.seen().size(), 1u);
}

TEST(InvalidationConnectorTest, OtherClientErrorsAreNotRetried) {
  FakeOwner owner({}, 403);
  std::unique_ptr<InvalidationConnector> connector = Make(Config("webhook", owner.url()));
  ASSERT_NE(connector, nullptr);
  std::atomic<bool> cancel{false};

  Result<DispatchResult> result = connector->Dispatch(Request(), cancel);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(owner.seen().size(), 1u);
}

TEST(InvalidationConnectorTest, ServerErrorsGiveUpAfterMaxAttemptsWithTheLastStatus) {
  FakeOwner owner({500, 500}, 502);
  std::unique_ptr<InvalidationConnector> connector = Make(Config("sglang", owner.url(), Fast(3)));
  ASSERT_NE(connector, nullptr);
  std::atomic<bool> cancel{false};

  Result<DispatchResult> result = connector->Dispatch(Request(), cancel);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kUnavailable);
  const std::string message = result.status().message();
  EXPECT_NE(message.find("3 attempts"), std::string::npos) << message;
  EXPECT_NE(message.find("last: HTTP 502"), std::string::npos) << message;
  EXPECT_NE(message.find(owner.url() + "/flush_cache"), std::string::npos) << message;
  EXPECT_EQ(owner.seen().size(), 3u);
}

TEST(InvalidationConnectorTest, ClosedPortIsRetriedThenFails) {
  ClosedPort port;
  std::unique_ptr<InvalidationConnector> connector = Make(Config("vllm", port.url(), Fast(3)));
  ASSERT_NE(connector, nullptr);
  std::atomic<bool> cancel{false};

  Result<DispatchResult> result = connector->Dispatch(Request(), cancel);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kUnavailable);
  const std::string message = result.status().message();
  EXPECT_NE(message.find("3 attempts"), std::string::npos) << message;
  EXPECT_NE(message.find("cannot connect"), std::string::npos) << message;
}

TEST(InvalidationConnectorTest, CancelDuringBackoffReturnsPromptly) {
  FakeOwner owner({}, 500);
  RetryPolicy retry;
  retry.max_attempts = 5;
  retry.initial_backoff_ms = 60000;
  retry.max_backoff_ms = 60000;
  std::unique_ptr<InvalidationConnector> connector = Make(Config("sglang", owner.url(), retry));
  ASSERT_NE(connector, nullptr);
  std::atomic<bool> cancel{false};

  std::future<Result<DispatchResult>> dispatch =
      std::async(std::launch::async, [&] { return connector->Dispatch(Request(), cancel); });
  ASSERT_TRUE(WaitFor([&] { return owner.seen().size() == 1; }));
  // The connector is in (or entering) its 60 s pause now.
  std::this_thread::sleep_for(milliseconds(20));
  const auto cancelled_at = steady_clock::now();
  cancel.store(true);
  ASSERT_EQ(dispatch.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const auto took = steady_clock::now() - cancelled_at;
  EXPECT_LT(took, std::chrono::seconds(1));

  Result<DispatchResult> result = dispatch.get();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status(), Status::Unavailable("cancelled"));
  EXPECT_EQ(owner.seen().size(), 1u);
}

TEST(InvalidationConnectorTest, AlreadyCancelledDispatchMakesNoRequest) {
  FakeOwner owner({}, 200);
  std::unique_ptr<InvalidationConnector> connector = Make(Config("vllm", owner.url()));
  ASSERT_NE(connector, nullptr);
  std::atomic<bool> cancel{true};

  Result<DispatchResult> result = connector->Dispatch(Request(), cancel);
  EXPECT_EQ(result.status(), Status::Unavailable("cancelled"));
  EXPECT_TRUE(owner.seen().empty());
}

TEST(InvalidationConnectorTest, BearerTokenIsSentAndNeverAppearsInErrors) {
  const std::string token = "s3cr3t-Admin-Token-value";
  {
    FakeOwner owner({}, 200);
    ConnectorConfig config = Config("sglang", owner.url());
    config.admin_token = token;
    std::unique_ptr<InvalidationConnector> connector = Make(config);
    ASSERT_NE(connector, nullptr);
    std::atomic<bool> cancel{false};
    Result<DispatchResult> result = connector->Dispatch(Request(), cancel);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    std::vector<Seen> seen = owner.seen();
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].authorization, "Bearer " + token);
  }
  {
    // An owner that echoes the header back in its error bodies.
    FakeOwner owner({}, 500, /*echo_authorization=*/true);
    ConnectorConfig config = Config("webhook", owner.url(), Fast(2));
    config.admin_token = token;
    std::unique_ptr<InvalidationConnector> connector = Make(config);
    ASSERT_NE(connector, nullptr);
    std::atomic<bool> cancel{false};
    Result<DispatchResult> result = connector->Dispatch(Request(), cancel);
    ASSERT_FALSE(result.ok());
    const std::string message = result.status().message();
    EXPECT_NE(message.find("rejected, you sent: Bearer"), std::string::npos) << message;
    EXPECT_EQ(message.find(token), std::string::npos) << message;
    EXPECT_EQ(message.find("s3cr3t"), std::string::npos) << message;
    std::vector<Seen> seen = owner.seen();
    ASSERT_EQ(seen.size(), 2u);
    for (const Seen& request : seen) EXPECT_EQ(request.authorization, "Bearer " + token);
  }
  {
    // A token that cannot go in a header is refused without being repeated.
    ConnectorConfig config = Config("vllm", "http://127.0.0.1:1");
    config.admin_token = token + "\r\nX-Evil: 1";
    Result<std::unique_ptr<InvalidationConnector>> connector = MakeConnector(config);
    ASSERT_FALSE(connector.ok());
    EXPECT_EQ(connector.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(connector.status().message().find("s3cr3t"), std::string::npos);
  }
}

TEST(InvalidationConnectorTest, MakeConnectorRefusesBadConfiguration) {
  auto refused = [](const ConnectorConfig& config, std::string_view needle) {
    Result<std::unique_ptr<InvalidationConnector>> connector = MakeConnector(config);
    if (connector.ok()) return testing::AssertionFailure() << "accepted";
    if (connector.status().code() != StatusCode::kInvalidArgument ||
        connector.status().message().find(needle) == std::string::npos) {
      return testing::AssertionFailure() << connector.status().ToString();
    }
    return testing::AssertionSuccess();
  };
  const std::string control = "http://127.0.0.1:8000";
  EXPECT_TRUE(refused(Config("trtllm", control), "unknown kind 'trtllm'"));
  EXPECT_TRUE(refused(Config("vllm", "https://127.0.0.1:8000"), "https"));
  EXPECT_TRUE(refused(Config("vllm", "http://127.0.0.1:8000/v1"), "no user, path or query"));
  EXPECT_TRUE(refused(Config("vllm", ""), "http://HOST:PORT"));

  ConnectorConfig no_path = Config("webhook", control);
  no_path.webhook_path = "";
  EXPECT_TRUE(refused(no_path, "webhook_path"));
  ConnectorConfig query_path = Config("webhook", control);
  query_path.webhook_path = "/evict?token=x";
  EXPECT_TRUE(refused(query_path, "webhook_path"));
  ConnectorConfig stray_path = Config("vllm", control);
  stray_path.webhook_path = "/evict";
  EXPECT_TRUE(refused(stray_path, "applies only to kind webhook"));

  ConnectorConfig no_instance = Config("lmcache", control);
  no_instance.lmcache_instance_id = "";
  EXPECT_TRUE(refused(no_instance, "lmcache_instance_id"));

  RetryPolicy zero_attempts = Fast();
  zero_attempts.max_attempts = 0;
  EXPECT_TRUE(refused(Config("vllm", control, zero_attempts), "max_attempts"));
  RetryPolicy shrinking = Fast();
  shrinking.multiplier = 0.5;
  EXPECT_TRUE(refused(Config("vllm", control, shrinking), "multiplier"));
  RetryPolicy no_timeout = Fast();
  no_timeout.timeout_ms = 0;
  EXPECT_TRUE(refused(Config("vllm", control, no_timeout), "timeout_ms"));
  RetryPolicy inverted = Fast();
  inverted.max_backoff_ms = 0;
  EXPECT_TRUE(refused(Config("vllm", control, inverted), "max_backoff_ms"));
}

}  // namespace
}  // namespace kvgov::connectors
