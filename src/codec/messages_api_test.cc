#include "kvgov/codec/messages_api.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kvgov {
namespace {

using Json = nlohmann::ordered_json;

Json Chat(const std::string& messages_request) {
  Result<std::string> chat = MessagesChatRequestJson(messages_request, JsonLimits{});
  EXPECT_TRUE(chat.ok()) << chat.status().ToString();
  return chat.ok() ? Json::parse(*chat) : Json();
}

TEST(MessagesApiTest, SystemBlocksJoinWithoutTheBillingHeader) {
  const Json chat = Chat(R"({"model":"m","max_tokens":8,"system":[
      {"type":"text","text":"x-anthropic-billing-header: cc_version=1; hash=ab12"},
      {"type":"text","text":"You are ","cache_control":{"type":"ephemeral"}},
      {"type":"text","text":"terse."}],
    "messages":[{"role":"user","content":"hi"}],"metadata":{"user_id":"u"}})");
  EXPECT_EQ(chat["messages"][0], (Json{{"role", "system"}, {"content", "You are terse."}}));
  EXPECT_EQ(chat["messages"][1], (Json{{"role", "user"}, {"content", "hi"}}));
  EXPECT_EQ(chat["max_tokens"], 8);
  EXPECT_FALSE(chat.contains("metadata"));
}

TEST(MessagesApiTest, ToolUseAndResultsBecomeToolCallsAndToolMessages) {
  const Json chat = Chat(R"({"model":"m","max_tokens":8,
    "tools":[{"name":"get_weather","description":"d","input_schema":{"properties":{"city":{"type":"string"}}}}],
    "messages":[
      {"role":"user","content":"weather?"},
      {"role":"assistant","content":[{"type":"text","text":"Checking."},
        {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Zürich","days":[1,2]}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1",
        "content":[{"type":"text","text":"sunny"},{"type":"text","text":"20C"}]},
        {"type":"text","text":"thanks"}]}]})");
  const Json& messages = chat["messages"];
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[1]["content"], "Checking.");
  // json.dumps's separators and ASCII escapes, keys in the order sent.
  EXPECT_EQ(messages[1]["tool_calls"][0]["function"]["arguments"],
            "{\"city\": \"Z\\u00fcrich\", \"days\": [1, 2]}");
  EXPECT_EQ(messages[1]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(messages[2],
            (Json{{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "sunny\n20C"}}));
  EXPECT_EQ(messages[3], (Json{{"role", "user"}, {"content", "thanks"}}));
  EXPECT_EQ(chat["tools"][0]["function"]["parameters"]["type"], "object");
  EXPECT_EQ(chat["tool_choice"], "auto");
}

TEST(MessagesApiTest, ImagesBecomeImageUrlParts) {
  const Json chat = Chat(R"({"model":"m","max_tokens":8,"messages":[{"role":"user","content":[
      {"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"QUJD"}},
      {"type":"text","text":"what is it?"}]}]})");
  const Json& content = chat["messages"][0]["content"];
  ASSERT_TRUE(content.is_array());
  EXPECT_EQ(content[0]["image_url"]["url"], "data:image/jpeg;base64,QUJD");
  EXPECT_EQ(content[1]["text"], "what is it?");
}

TEST(MessagesApiTest, BadRequestsNameTheField) {
  for (const auto& [body, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"model":"m","messages":[]})", "$.messages"},
           {R"({"model":"m","messages":[{"role":"system","content":"x"}]})", "$.messages[0].role"},
           {R"({"model":"m","system":7,"messages":[{"role":"user","content":"x"}]})", "$.system"},
           {R"({"model":"m","messages":[{"role":"user","content":[{"type":"tool_result"}]}]})",
            "$.messages[0].content[0].tool_use_id"}}) {
    Result<std::string> chat = MessagesChatRequestJson(body, JsonLimits{});
    ASSERT_FALSE(chat.ok()) << body;
    EXPECT_EQ(chat.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(chat.status().message().starts_with(field)) << chat.status().message();
  }
}

TEST(MessagesApiTest, TheGatewayDecodesAMessagesRequestAsItsChatAndRefusesAClientSalt) {
  Result<GatewayRequest> request = DecodeGatewayRequestJson(
      GatewayEndpoint::kMessages,
      R"({"model":"m","max_tokens":8,"stream":true,"system":"S","messages":[{"role":"user","content":"hi"}]})",
      JsonLimits{});
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  EXPECT_EQ(request->model, "m");
  EXPECT_TRUE(request->stream);
  EXPECT_FALSE(request->ask_usage) << "a Messages stream reports usage unasked";
  const Json tokenize = Json::parse(request->tokenize_body);
  EXPECT_EQ(tokenize["messages"][0]["content"], "S");
  EXPECT_EQ(tokenize["add_generation_prompt"], true);

  Result<GatewayRequest> salted = DecodeGatewayRequestJson(
      GatewayEndpoint::kMessages,
      R"({"model":"m","cache_salt":"x","messages":[{"role":"user","content":"hi"}]})",
      JsonLimits{});
  ASSERT_FALSE(salted.ok());
  EXPECT_NE(salted.status().message().find("cache_salt"), std::string::npos);
}

TEST(MessagesApiTest, UsageCountsTheCachedPartInThePrompt) {
  const JsonLimits limits;
  Result<std::optional<EngineUsage>> whole = DecodeWholeMessagesAnswer(
      R"({"type":"message","content":[],"usage":{"input_tokens":10,"cache_read_input_tokens":32,
          "cache_creation_input_tokens":4,"output_tokens":5}})",
      limits);
  ASSERT_TRUE(whole.ok() && whole->has_value());
  EXPECT_EQ((*whole)->prompt_tokens, 46);
  EXPECT_EQ((*whole)->cached_tokens, 32);
  std::optional<EngineUsage> start = DecodeMessagesUsage(
      R"({"type":"message_start","message":{"usage":{"input_tokens":48,"output_tokens":0}}})",
      limits);
  ASSERT_TRUE(start);
  EXPECT_EQ(start->prompt_tokens, 48);
  std::optional<EngineUsage> delta = DecodeMessagesUsage(
      R"({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":16,"cache_read_input_tokens":32,"output_tokens":9}})",
      limits);
  ASSERT_TRUE(delta);
  EXPECT_EQ(delta->prompt_tokens, 48);
  EXPECT_EQ(delta->cached_tokens, 32);
  EXPECT_FALSE(DecodeMessagesUsage(R"({"type":"content_block_delta"})", limits));
  EXPECT_FALSE(DecodeWholeMessagesAnswer("[1]", limits).ok());
}

TEST(ResponsesApiTest, InputItemsBecomeTheChatTheEngineMakes) {
  Result<std::string> chat_json =
      ResponsesChatRequestJson(R"({"model":"m","instructions":"Be brief.",
    "max_output_tokens":5,"stream":true,"previous_response_id":"resp_1",
    "tools":[{"type":"function","name":"f","parameters":{"type":"object"}},{"type":"web_search"}],
    "input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]},
             {"type":"function_call","call_id":"c1","name":"f","arguments":"{\"a\": 1}"},
             {"type":"function_call_output","call_id":"c1","output":"42"},
             {"type":"message","role":"developer","content":"note"}]})",
                               JsonLimits{});
  ASSERT_TRUE(chat_json.ok()) << chat_json.status().ToString();
  const Json chat = Json::parse(*chat_json);
  const Json& messages = chat["messages"];
  ASSERT_EQ(messages.size(), 5u);
  EXPECT_EQ(messages[0], (Json{{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(messages[1], (Json{{"role", "user"}, {"content", "hi"}}));
  EXPECT_EQ(messages[2]["tool_calls"][0]["function"]["arguments"], "{\"a\": 1}");
  EXPECT_EQ(messages[3], (Json{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "42"}}));
  EXPECT_EQ(messages[4]["role"], "system");
  EXPECT_EQ(chat["tools"].size(), 1u) << "built-in tools render nothing";
  EXPECT_EQ(chat["max_tokens"], 5);
  EXPECT_FALSE(chat.contains("previous_response_id"));

  Result<GatewayRequest> request = DecodeGatewayRequestJson(
      GatewayEndpoint::kResponses,
      R"({"model":"m","input":"hello","previous_response_id":"resp_7"})", JsonLimits{});
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  EXPECT_EQ(request->previous_response_id, "resp_7");
  EXPECT_EQ(Json::parse(request->tokenize_body)["messages"][0]["content"], "hello");
  EXPECT_FALSE(DecodeGatewayRequestJson(GatewayEndpoint::kResponses,
                                        R"({"model":"m","input":"x","previous_response_id":7})",
                                        JsonLimits{})
                   .ok());
  EXPECT_FALSE(
      DecodeGatewayRequestJson(GatewayEndpoint::kResponses, R"({"model":"m"})", JsonLimits{}).ok());
}

TEST(ResponsesApiTest, UsageAndIdFromTheWholeResponseOrItsEvents) {
  const JsonLimits limits;
  const std::string whole =
      R"({"id":"resp_1","object":"response","usage":{"input_tokens":40,"input_tokens_details":{"cached_tokens":32},"output_tokens":3}})";
  ASSERT_TRUE(DecodeResponsesUsage(whole, limits));
  EXPECT_EQ(DecodeResponsesUsage(whole, limits)->prompt_tokens, 40);
  EXPECT_EQ(DecodeResponsesUsage(whole, limits)->cached_tokens, 32);
  EXPECT_EQ(DecodeResponseId(whole, limits), "resp_1");
  EXPECT_EQ(DecodeResponseId(R"({"type":"response.created","response":{"id":"resp_2"}})", limits),
            "resp_2");
  EXPECT_EQ(DecodeResponseId(R"({"type":"response.output_text.delta","delta":"x"})", limits), "");
  const std::string completed =
      R"({"type":"response.completed","response":{"id":"resp_2","usage":{"input_tokens":9,"output_tokens":1}}})";
  ASSERT_TRUE(DecodeResponsesUsage(completed, limits));
  EXPECT_EQ(DecodeResponsesUsage(completed, limits)->prompt_tokens, 9);
  EXPECT_FALSE(DecodeResponsesUsage(R"({"type":"response.created","response":{}})", limits));
}

TEST(MessagesApiTest, ErrorsInAnthropicsShape) {
  EXPECT_EQ(
      Json::parse(EncodeMessagesErrorJson(529, "busy")),
      (Json{{"type", "error"}, {"error", {{"type", "overloaded_error"}, {"message", "busy"}}}}));
  EXPECT_EQ(MessagesErrorType(404), "not_found_error");
  EXPECT_EQ(MessagesErrorType(502), "api_error");
  EXPECT_TRUE(EncodeMessagesErrorEvent("broke").starts_with("event: error\ndata: {"));
}

}  // namespace
}  // namespace kvgov
