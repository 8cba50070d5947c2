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
  StandInEngine(std::string path, int status, std::string body) {
    server_.Post(path, [this, status, body](const httplib::Request& request,
                                             httplib::Response& response) {
      received_ = request.body;
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

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::string received_;  // read after the call returned
};

constexpr std::string_view kAnswer = R"({"count":3,"max_model_len":8192,"tokens":[1,20,300]})";

TEST(TokenizeTest, EachKindAtItsOwnPath) {
  EXPECT_EQ(TokenizePath(ingest::EngineKind::kVllm), "/tokenize");
  EXPECT_EQ(TokenizePath(ingest::EngineKind::kSglang), "/v1/tokenize");
  const std::string body = R"({"model":"m","prompt":"a b c"})";
  StandInEngine vllm("/tokenize", 200, std::string(kAnswer));
  Result<std::vector<int64_t>> tokens =
      Tokenize(vllm.url(), ingest::EngineKind::kVllm, body, UpstreamTimeouts{});
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  EXPECT_EQ(*tokens, (std::vector<int64_t>{1, 20, 300}));
  EXPECT_EQ(vllm.received(), body);

  StandInEngine sglang("/v1/tokenize", 200, std::string(kAnswer));
  tokens = Tokenize(sglang.url(), ingest::EngineKind::kSglang, body, UpstreamTimeouts{});
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  EXPECT_EQ(tokens->size(), 3u);
  // The vLLM path on an SGLang server is not found, and says where it asked.
  tokens = Tokenize(sglang.url(), ingest::EngineKind::kVllm, body, UpstreamTimeouts{});
  ASSERT_EQ(tokens.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(tokens.status().message().find("/tokenize: HTTP 404"), std::string::npos)
      << tokens.status().ToString();
}

TEST(TokenizeTest, AFailureNamesItsCause) {
  // An older SGLang refuses chat messages on its tokenizer.
  StandInEngine refusing("/v1/tokenize", 400, R"({"detail":"prompt: field required"})");
  Result<std::vector<int64_t>> refused = Tokenize(
      refusing.url(), ingest::EngineKind::kSglang, R"({"messages":[]})", UpstreamTimeouts{});
  ASSERT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("HTTP 400: {\"detail\":\"prompt: field required\"}"),
            std::string::npos)
      << refused.status().ToString();

  StandInEngine garbled("/tokenize", 200, R"({"tokens":"many"})");
  Result<std::vector<int64_t>> bad =
      Tokenize(garbled.url(), ingest::EngineKind::kVllm, "{}", UpstreamTimeouts{});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().ToString();

  const ClosedPort closed;
  Result<std::vector<int64_t>> unreachable =
      Tokenize(closed.url(), ingest::EngineKind::kVllm, "{}", UpstreamTimeouts{});
  ASSERT_EQ(unreachable.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(unreachable.status().message().find(closed.url()), std::string::npos);
}

}  // namespace
}  // namespace kvgov::connectors
