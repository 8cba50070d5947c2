#include "kvgov/codec/gateway_api.h"

#include "codec/gateway_request_oracle.h"

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

// Every byte the client sent stays where it was.
TEST(GatewayApiTest, TheSaltAndTheUsageRequestAreTheOnlyChanges) {
  const std::string body = R"(  {"model":"m", "prompt":[1],"x-unknown":{"a":[1.50]}})";
  EXPECT_EQ(ForwardedBody(body, "abc", false),
            R"(  {"cache_salt":"abc","model":"m", "prompt":[1],"x-unknown":{"a":[1.50]}})");
  EXPECT_EQ(ForwardedBody(body, "", false), body);
  EXPECT_EQ(ForwardedBody(body, "", true),
            R"(  {"stream_options":{"include_usage":true},"model":"m", "prompt":[1],)"
            R"("x-unknown":{"a":[1.50]}})");
  EXPECT_EQ(ForwardedBody("{ }", "s", false), R"({"cache_salt":"s" })");
  const nlohmann::json both = nlohmann::json::parse(ForwardedBody("{}", "s", true));
  EXPECT_EQ(both["cache_salt"], "s");
  EXPECT_EQ(both["stream_options"]["include_usage"], true);
}

TEST(GatewayApiTest, UsageIsAskedForOnlyWhenTheClientDidNotSayAnything) {
  EXPECT_TRUE(Completions(R"({"model":"m","prompt":[1],"stream":true})")->ask_usage);
  EXPECT_FALSE(Completions(R"({"model":"m","prompt":[1]})")->ask_usage);
  EXPECT_FALSE(Completions(R"({"model":"m","prompt":[1],"stream":true,)"
                           R"("stream_options":{"include_usage":false}})")
                   ->ask_usage);
}

TEST(GatewayApiTest, TheEnginesUsageIsReadFromAnswersAndEvents) {
  std::optional<EngineUsage> whole = DecodeEngineUsage(
      R"({"choices":[{"text":"x"}],"usage":{"prompt_tokens":64,)"
      R"("prompt_tokens_details":{"cached_tokens":48}}})",
      JsonLimits{});
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->prompt_tokens, 64);
  EXPECT_EQ(whole->cached_tokens, 48);
  EXPECT_FALSE(whole->usage_only);
  std::optional<EngineUsage> event =
      DecodeEngineUsage(R"({"choices":[],"usage":{"prompt_tokens":3}})", JsonLimits{});
  ASSERT_TRUE(event.has_value());
  EXPECT_TRUE(event->usage_only);
  EXPECT_EQ(event->cached_tokens, 0);
  EXPECT_FALSE(DecodeEngineUsage(R"({"choices":[{"text":"x"}],"usage":null})", JsonLimits{}));
  EXPECT_FALSE(DecodeEngineUsage("[DONE]", JsonLimits{}));
}

// Events are whole however the bytes were cut.
TEST(GatewayApiTest, TheSplitterYieldsWholeEvents) {
  SseSplitter splitter;
  EXPECT_TRUE(splitter.Push("data: {\"a\"").empty());
  std::vector<std::string> events = splitter.Push(":1}\n\ndata: [DONE]\n\nda");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], "data: {\"a\":1}\n\n");
  EXPECT_EQ(SseSplitter::Data(events[0]), "{\"a\":1}");
  EXPECT_EQ(SseSplitter::Data(events[1]), "[DONE]");
  EXPECT_EQ(SseSplitter::Data("event: x\ndata: y\n\n"), "y");
  EXPECT_EQ(splitter.Rest(), "da");
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

namespace kvgov::codec_testing {
namespace {

// simdjson (ADR 0016) and the nlohmann decoder it replaced accept and
// refuse the same bodies, with the same codes, and decode them alike.
TEST(GatewayRequestDecoderTest, AgreesWithTheDecoderItReplaced) {
  const std::string deep_32 = std::string(31, '[') + "1" + std::string(31, ']');
  const std::string deep_33 = std::string(32, '[') + "1" + std::string(32, ']');
  const std::vector<std::string> bodies = {
      R"({"model":"m","prompt":[1,2,3],"stream":true})",
      R"({"model":"m","prompt":"a \"quoted\" \u00e9 text","stream":null})",
      R"({"model":"m","prompt":[1],"x":)" + deep_32 + "}",
      R"({"model":"m","prompt":[1],"x":)" + deep_33 + "}",
      R"({"model":"m","prompt":[1],"model":"n"})",
      R"({"model":"m","prompt":[1],"x":{"a":1,"a":2}})",
      R"({"model":"m","prompt":[1,2147483648]})",
      R"({"model":"m","prompt":[1,18446744073709551615]})",
      R"({"model":"m","prompt":[1.0]})",
      R"({"model":"m","prompt":[]})",
      R"({"model":"m","prompt":"x","stream":1})",
      R"({"model":"m","prompt":"\ud83d\ude00"})",
      R"({"model":"m","prompt":"x","stream_options":{"include_usage":false},"stream":true})",
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"t":1.5e3}],)"
      R"("add_generation_prompt":false,"chat_template_kwargs":{"k":[true,null]}})",
      R"({"model":"m","messages":{"role":"user"}})",
      R"({"model":"m","prompt":[1]} trailing)",
      R"({"model":"m","prompt":[1],})",
      "",
      "  ",
      R"({"model":"m","prompt":[1],"big":1e999})",
      R"({"model":"m","prompt":[-0]})",
      R"({"model":"m","prompt":[0,-0.0]})",
      R"({"model":"m","prompt":[123456789012345678901234]})",
      std::string(R"({"model":"m","prompt":[1]})") + '\0' + "  ",
  };
  JsonLimits small;
  small.max_array_items = 2;
  small.max_depth = 4;
  for (const JsonLimits& limits : {JsonLimits{}, small}) {
    for (const std::string& body : bodies) {
      for (GatewayEndpoint endpoint :
           {GatewayEndpoint::kCompletions, GatewayEndpoint::kChatCompletions}) {
        const Result<GatewayRequest> now = DecodeGatewayRequestJson(endpoint, body, limits);
        const Result<GatewayRequest> before =
            DecodeGatewayRequestWithNlohmann(endpoint, body, limits);
        ASSERT_EQ(now.ok(), before.ok())
            << body << "\n now: " << now.status().ToString()
            << "\n before: " << before.status().ToString();
        if (now.ok()) {
          EXPECT_TRUE(SameDecodedRequest(*now, *before)) << body;
        } else {
          EXPECT_EQ(now.status().code(), before.status().code())
              << body << "\n now: " << now.status().ToString()
              << "\n before: " << before.status().ToString();
          EXPECT_TRUE(now.status().message().starts_with("$")) << now.status().ToString();
        }
      }
    }
  }
}

// Where they differ, by design: simdjson keeps integers to 64 bits, so a
// body with a larger one anywhere is refused, naming why, where nlohmann
// read it as a double. No OpenAI field takes one.
TEST(GatewayRequestDecoderTest, AnIntegerPast64BitsIsRefusedWithItsReason) {
  const std::string body = R"({"model":"m","prompt":[1],"seed":123456789012345678901234})";
  EXPECT_TRUE(DecodeGatewayRequestWithNlohmann(GatewayEndpoint::kCompletions, body, JsonLimits{})
                  .ok());
  const Result<GatewayRequest> now =
      DecodeGatewayRequestJson(GatewayEndpoint::kCompletions, body, JsonLimits{});
  ASSERT_EQ(now.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(now.status().message().find("64 bits"), std::string::npos) << now.status().ToString();
}

}  // namespace
}  // namespace kvgov::codec_testing
