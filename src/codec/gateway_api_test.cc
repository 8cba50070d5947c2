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
  EXPECT_EQ(nlohmann::json::parse(Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],)"
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
  EXPECT_EQ(
      message(Completions(R"({"model":"m","prompt":["a","b"]})")).rfind("$.prompt: a batch", 0),
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

TEST(GatewayApiTest, AClientMayNotNameAHandoffsPeer) {
  for (const char* field :
       {"kv_transfer_params", "bootstrap_host", "bootstrap_port", "bootstrap_room"}) {
    const std::string body =
        std::string(R"({"model":"m","prompt":[1],")") + field + R"(":{"remote_host":"x"}})";
    EXPECT_EQ(Completions(body).status().message(),
              std::string("$.") + field +
                  ": set by kvgov's gateway for a disaggregated handoff; a client may not send it");
  }
}

// vLLM's toy proxy: one token, one body, the remote decode asked for.
TEST(GatewayApiTest, ThePrefillLegAsksForOneTokenAndARemoteDecode) {
  Result<std::string> leg = NixlPrefillBody(
      R"({"cache_salt":"s","stream_options":{"include_usage":true},"model":"m","prompt":[1],)"
      R"("stream":true,"max_tokens":64,"max_completion_tokens":64,"min_tokens":8,)"
      R"("temperature":0.5})");
  ASSERT_TRUE(leg.ok()) << leg.status().ToString();
  const nlohmann::json body = nlohmann::json::parse(*leg);
  EXPECT_EQ(body["max_tokens"], 1);
  EXPECT_EQ(body["max_completion_tokens"], 1);
  EXPECT_EQ(body["stream"], false);
  EXPECT_FALSE(body.contains("stream_options"));
  EXPECT_FALSE(body.contains("min_tokens"));
  EXPECT_EQ(body["cache_salt"], "s");
  EXPECT_EQ(body["temperature"], 0.5);
  EXPECT_EQ(body["kv_transfer_params"],
            nlohmann::json::parse(R"({"do_remote_decode":true,"do_remote_prefill":false,)"
                                  R"("remote_engine_id":null,"remote_block_ids":null,)"
                                  R"("remote_host":null,"remote_port":null})"));
  // A client that set no max_completion_tokens gets none.
  EXPECT_FALSE(nlohmann::json::parse(*NixlPrefillBody(R"({"model":"m","prompt":[1]})"))
                   .contains("max_completion_tokens"));
  EXPECT_EQ(NixlPrefillBody("[1]").status().code(), StatusCode::kInvalidArgument);
}

TEST(GatewayApiTest, ThePrefillAnswersParamsGoToTheDecodeLegAsSent) {
  Result<std::optional<std::string>> params = DecodeKvTransferParams(
      R"({"choices":[{"text":"x"}],"kv_transfer_params":{"do_remote_prefill":true,)"
      R"("remote_engine_id":"e1","remote_block_ids":[[1,2]],"remote_host":"10.0.0.1",)"
      R"("remote_port":5600,"future_field":{"a":1}}})",
      JsonLimits{});
  ASSERT_TRUE(params.ok()) << params.status().ToString();
  ASSERT_TRUE(params->has_value());
  const std::string leg = NixlDecodeBody(R"({"model":"m","stream":true})", **params);
  const nlohmann::json body = nlohmann::json::parse(leg);
  EXPECT_EQ(body["kv_transfer_params"]["remote_block_ids"], nlohmann::json::parse("[[1,2]]"));
  EXPECT_EQ(body["kv_transfer_params"]["future_field"]["a"], 1);  // opaque: kept
  EXPECT_EQ(body["stream"], true);
  EXPECT_TRUE(leg.ends_with(R"("model":"m","stream":true})"));  // the rest byte for byte

  // The engine freed the blocks at once: no params, the decode leg prefills.
  for (const char* answer :
       {R"({"choices":[]})", R"({"kv_transfer_params":null})", R"({"kv_transfer_params":{}})"}) {
    Result<std::optional<std::string>> none = DecodeKvTransferParams(answer, JsonLimits{});
    ASSERT_TRUE(none.ok()) << answer;
    EXPECT_FALSE(none->has_value()) << answer;
  }
  EXPECT_EQ(
      DecodeKvTransferParams(R"({"kv_transfer_params":[1]})", JsonLimits{}).status().message(),
      "$.kv_transfer_params: want an object");
  EXPECT_FALSE(DecodeKvTransferParams("not json", JsonLimits{}).ok());
}

TEST(GatewayApiTest, SGLangsBootstrapFieldsGoIntoTheOneBody) {
  Result<std::string> body =
      BootstrapBody(R"({"model":"m","stream":true})", "10.0.0.7", 8998, ~uint64_t{0});
  ASSERT_TRUE(body.ok()) << body.status().ToString();
  const nlohmann::json json = nlohmann::json::parse(*body);
  EXPECT_EQ(json["bootstrap_host"], "10.0.0.7");
  EXPECT_EQ(json["bootstrap_port"], 8998);
  EXPECT_EQ(json["bootstrap_room"].get<uint64_t>(), uint64_t{INT64_MAX});
  EXPECT_EQ(json["stream"], true);
}

TEST(GatewayApiTest, UsageIsAskedForOnlyWhenTheClientDidNotSayAnything) {
  EXPECT_TRUE(Completions(R"({"model":"m","prompt":[1],"stream":true})")->ask_usage);
  EXPECT_FALSE(Completions(R"({"model":"m","prompt":[1]})")->ask_usage);
  EXPECT_FALSE(Completions(R"({"model":"m","prompt":[1],"stream":true,)"
                           R"("stream_options":{"include_usage":false}})")
                   ->ask_usage);
}

TEST(GatewayApiTest, TheEnginesUsageIsReadFromAnswersAndEvents) {
  std::optional<EngineUsage> whole =
      DecodeEngineUsage(R"({"choices":[{"text":"x"}],"usage":{"prompt_tokens":64,)"
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

// A whole answer that is not a JSON object is an error naming why; one
// without usage is an answer with no usage.
TEST(GatewayApiTest, AWholeAnswerMustBeAJsonObject) {
  Result<std::optional<EngineUsage>> answer =
      DecodeWholeAnswer(R"({"choices":[{"text":"x"}],"usage":{"prompt_tokens":7}})", JsonLimits{});
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  ASSERT_TRUE(answer->has_value());
  EXPECT_EQ((*answer)->prompt_tokens, 7);
  Result<std::optional<EngineUsage>> no_usage =
      DecodeWholeAnswer(R"({"choices":[{"text":"x"}]})", JsonLimits{});
  ASSERT_TRUE(no_usage.ok());
  EXPECT_FALSE(no_usage->has_value());

  Result<std::optional<EngineUsage>> html =
      DecodeWholeAnswer("<html><body>502 Bad Gateway</body></html>", JsonLimits{});
  ASSERT_FALSE(html.ok());
  EXPECT_EQ(html.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(html.status().message().find("malformed JSON"), std::string::npos)
      << html.status().message();
  Result<std::optional<EngineUsage>> array = DecodeWholeAnswer("[1,2]", JsonLimits{});
  ASSERT_FALSE(array.ok());
  EXPECT_NE(array.status().message().find("a JSON array, not an object"), std::string::npos)
      << array.status().message();
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
        ASSERT_EQ(now.ok(), before.ok()) << body << "\n now: " << now.status().ToString()
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
  EXPECT_TRUE(
      DecodeGatewayRequestWithNlohmann(GatewayEndpoint::kCompletions, body, JsonLimits{}).ok());
  const Result<GatewayRequest> now =
      DecodeGatewayRequestJson(GatewayEndpoint::kCompletions, body, JsonLimits{});
  ASSERT_EQ(now.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(now.status().message().find("64 bits"), std::string::npos) << now.status().ToString();
}

}  // namespace
}  // namespace kvgov::codec_testing
