// The gateway's upstream client against stand-in engine servers on
// loopback (vLLM and SGLang themselves cannot run here): where each kind
// tokenizes, and what a failure says.

#include "kvgov/connectors/openai_upstream.h"

#include <httplib.h>

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "connectors/test_support.h"

namespace kvgov::connectors {
namespace {

// Answers POST `path` with `status` and `body`; anything else is 404.
class StandInEngine {
 public:
  // `requests_per_connection` 1: the engine closes every connection after
  // its answer, as an engine past its keep-alive timeout does.
  StandInEngine(std::string path, int status, std::string body,
                size_t requests_per_connection = 100) {
    server_.set_keep_alive_max_count(requests_per_connection);
    server_.Post(
        path, [this, status, body](const httplib::Request& request, httplib::Response& response) {
          received_ = request.body;
          client_ports_.push_back(request.remote_port);
          response.status = status;
          response.set_content(body, "application/json");
        });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    WaitFor([this] { return server_.is_running(); });
  }
  ~StandInEngine() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& received() const { return received_; }
  // The client port of every request: one per connection.
  const std::vector<int>& client_ports() const { return client_ports_; }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::string received_;  // read after the call returned
  std::vector<int> client_ports_;
};

constexpr std::string_view kAnswer = R"({"count":3,"max_model_len":8192,"tokens":[1,20,300]})";

TEST(TokenizeTest, EachKindAtItsOwnPath) {
  EXPECT_EQ(TokenizePath(ingest::EngineKind::kVllm), "/tokenize");
  EXPECT_EQ(TokenizePath(ingest::EngineKind::kSglang), "/v1/tokenize");
  StandInEngine vllm("/tokenize", 200, std::string(kAnswer));
  StandInEngine sglang("/v1/tokenize", 200, std::string(kAnswer));
  UpstreamConnections connections(UpstreamTimeouts{});  // closed before the engines stop
  const std::string body = R"({"model":"m","prompt":"a b c"})";
  Result<std::vector<int64_t>> tokens =
      connections.Tokenize(vllm.url(), ingest::EngineKind::kVllm, body);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  EXPECT_EQ(*tokens, (std::vector<int64_t>{1, 20, 300}));
  EXPECT_EQ(vllm.received(), body);

  tokens = connections.Tokenize(sglang.url(), ingest::EngineKind::kSglang, body);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  EXPECT_EQ(tokens->size(), 3u);
  // The vLLM path on an SGLang server is not found, and says where it asked.
  tokens = connections.Tokenize(sglang.url(), ingest::EngineKind::kVllm, body);
  ASSERT_EQ(tokens.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(tokens.status().message().find("/tokenize: HTTP 404"), std::string::npos)
      << tokens.status().ToString();
}

TEST(TokenizeTest, AFailureNamesItsCause) {
  // An older SGLang refuses chat messages on its tokenizer.
  StandInEngine refusing("/v1/tokenize", 400, R"({"detail":"prompt: field required"})");
  StandInEngine garbled("/tokenize", 200, R"({"tokens":"many"})");
  UpstreamConnections connections(UpstreamTimeouts{});
  Result<std::vector<int64_t>> refused =
      connections.Tokenize(refusing.url(), ingest::EngineKind::kSglang, R"({"messages":[]})");
  ASSERT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("HTTP 400: {\"detail\":\"prompt: field required\"}"),
            std::string::npos)
      << refused.status().ToString();

  Result<std::vector<int64_t>> bad =
      connections.Tokenize(garbled.url(), ingest::EngineKind::kVllm, "{}");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().ToString();

  const ClosedPort closed;
  Result<std::vector<int64_t>> unreachable =
      connections.Tokenize(closed.url(), ingest::EngineKind::kVllm, "{}");
  ASSERT_EQ(unreachable.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(unreachable.status().message().find(closed.url()), std::string::npos);
}

// Forwards `body` and returns what the engine answered.
std::string Forwarded(UpstreamConnections& connections, const std::string& url) {
  std::string got;
  UpstreamAnswer answer;
  Status status = connections.Forward(
      url, "/v1/completions", "{}", [](int, std::string_view) { return true; },
      [&](std::string_view chunk) {
        got += chunk;
        return true;
      },
      &answer);
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(answer.status, 200);
  return got;
}

TEST(UpstreamConnectionsTest, AConnectionReadToItsEndIsKept) {
  StandInEngine engine("/v1/completions", 200, R"({"ok":1})");
  UpstreamConnections connections(UpstreamTimeouts{});
  EXPECT_EQ(Forwarded(connections, engine.url()), R"({"ok":1})");
  EXPECT_EQ(Forwarded(connections, engine.url()), R"({"ok":1})");
  ASSERT_EQ(engine.client_ports().size(), 2u);
  EXPECT_EQ(engine.client_ports()[0], engine.client_ports()[1]);
}

TEST(UpstreamConnectionsTest, AKeptConnectionTheEngineClosedIsReplaced) {
  StandInEngine engine("/v1/completions", 200, R"({"ok":2})", /*requests_per_connection=*/1);
  UpstreamConnections connections(UpstreamTimeouts{});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Forwarded(connections, engine.url()), R"({"ok":2})");
  ASSERT_EQ(engine.client_ports().size(), 3u);  // each request reached the engine once
  EXPECT_NE(engine.client_ports()[0], engine.client_ports()[1]);
}

}  // namespace
}  // namespace kvgov::connectors
