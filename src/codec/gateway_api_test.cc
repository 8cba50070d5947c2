#include "kvgov/codec/gateway_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvgov {
namespace {

Result<GatewayRequest> Completions(std::string_view body) {
  return DecodeGatewayRequestJson(GatewayEndpoint::kCompletions, body, JsonLimits{});
}
Result<GatewayRequest> Chat(std::string_view body) {
  return DecodeGatewayRequestJson(GatewayEndpoint::kChatCompletions, body, JsonLimits{});
}

TEST(GatewayApiTest, TokenIdsPassThroughAndTextGoesToTheTokenizer) {
  Result<GatewayRequest> ids = Completions(R"({"model":"m","prompt":[1,2,3],"stream":true})");
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(ids->token_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(ids->stream);
  EXPECT_TRUE(ids->tokenize_body.empty());

  Result<GatewayRequest> text = Completions(R"({"model":"m","prompt":"hello","max_tokens":4})");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_TRUE(text->token_ids.empty());
  EXPECT_EQ(nlohmann::json::parse(text->tokenize_body),
            nlohmann::json::parse(R"({"model":"m","prompt":"hello"})"));
}

// The tokenizer sees what the chat template sees.
TEST(GatewayApiTest, ChatMessagesGoToTheTokenizerWithTheTemplatesFields) {
  Result<GatewayRequest> chat = Chat(
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}],
          "chat_template_kwargs":{"enable_thinking":false},"temperature":0})");
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  const nlohmann::json body = nlohmann::json::parse(chat->tokenize_body);
  EXPECT_EQ(body["add_generation_prompt"], true);
  EXPECT_EQ(body["messages"][0]["content"], "hi");
  EXPECT_EQ(body["tools"].size(), 1u);
  EXPECT_EQ(body["chat_template_kwargs"]["enable_thinking"], false);
  EXPECT_FALSE(body.contains("temperature"));
  EXPECT_EQ(nlohmann::json::parse(
                Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],)"
                     R"("add_generation_prompt":false})")
                    ->tokenize_body)["add_generation_prompt"],
            false);
}

TEST(GatewayApiTest, ErrorsNameTheField) {
  auto message = [](const Result<GatewayRequest>& r) { return r.status().message(); };
  EXPECT_EQ(message(Completions(R"({"prompt":[1]})")), "$.model: missing required field");
  EXPECT_EQ(message(Completions(R"({"model":"","prompt":[1]})")),
            "$.model: want a non-empty string");
  EXPECT_EQ(message(Completions(R"({"model":"m","prompt":[1],"cache_salt":"x"})")),
            "$.cache_salt: set by kvgov from the caller's tenant; a client may not send one");
  EXPECT_EQ(message(Completions(R"({"model":"m","prompt":["a","b"]})")).rfind("$.prompt: a batch", 0),
            0u);
  EXPECT_EQ(message(Completions(R"({"model":"m","prompt":[1,-2]})")),
            "$.prompt[1]: want a token id in 0..2147483647, got -2");
  EXPECT_EQ(message(Completions(R"({"model":"m","prompt":[1],"stream":"yes"})")),
            "$.stream: want true or false");
  EXPECT_EQ(message(Chat(R"({"model":"m","messages":[]})")), "$.messages: want a non-empty array");
  EXPECT_EQ(message(Completions("[]")), "$: want a JSON object");
  JsonLimits tight;
  tight.max_bytes = 8;
  EXPECT_EQ(DecodeGatewayRequestJson(GatewayEndpoint::kCompletions, R"({"model":"mmmm"})", tight)
                .status()
                .code(),
            StatusCode::kResourceExhausted);
}

// Exactly one change: every byte the client sent stays where it was.
TEST(GatewayApiTest, TheSaltIsTheOnlyChange) {
  const std::string body = R"(  {"model":"m", "prompt":[1],"x-unknown":{"a":[1.50]}})";
  const std::string salted = WithCacheSalt(body, "abc");
  EXPECT_EQ(salted, R"(  {"cache_salt":"abc","model":"m", "prompt":[1],"x-unknown":{"a":[1.50]}})");
  EXPECT_EQ(WithCacheSalt("{ }", "s"), R"({"cache_salt":"s" })");
  EXPECT_EQ(nlohmann::json::parse(WithCacheSalt("{}", "s"))["cache_salt"], "s");
}

TEST(GatewayApiTest, TheTokenizeAnswerIsCheckedLikeAnyUntrustedBody) {
  Result<std::vector<int64_t>> tokens =
      DecodeTokenizeAnswerJson(R"({"count":2,"max_model_len":8,"tokens":[5,6]})", JsonLimits{});
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(*tokens, (std::vector<int64_t>{5, 6}));
  EXPECT_FALSE(DecodeTokenizeAnswerJson(R"({"tokens":"5"})", JsonLimits{}).ok());
  EXPECT_FALSE(DecodeTokenizeAnswerJson(R"({"tokens":[1.5]})", JsonLimits{}).ok());
  EXPECT_FALSE(DecodeTokenizeAnswerJson(R"({"tokens":[-1]})", JsonLimits{}).ok());
}

TEST(GatewayApiTest, ErrorsHaveOpenAIsShape) {
  const nlohmann::json error = nlohmann::json::parse(
      EncodeOpenAIErrorJson("no such model", "invalid_request_error", "", "model_not_found"));
  EXPECT_EQ(error["error"]["message"], "no such model");
  EXPECT_TRUE(error["error"]["param"].is_null());
  const std::string event = EncodeOpenAIErrorEvent("engine reset the connection");
  EXPECT_EQ(event.rfind("data: {", 0), 0u);
  EXPECT_NE(event.find("\n\ndata: [DONE]\n\n"), std::string::npos);
}

}  // namespace
}  // namespace kvgov
