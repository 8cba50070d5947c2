#include "kvgov/codec/lint_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvgov {
namespace {

using Json = nlohmann::json;

std::vector<LintedRequest> Decode(const std::string& text) {
  Result<std::vector<LintedRequest>> decoded = DecodeLintRequestJson(text, {});
  EXPECT_TRUE(decoded.ok()) << decoded.status().ToString();
  return decoded.ok() ? *decoded : std::vector<LintedRequest>{};
}

TEST(LintApiTest, AnOpenAIChatIsLoweredInTheOrderATemplateRendersIt) {
  const std::vector<LintedRequest> requests = Decode(R"({"requests":[{"model":"llama",
    "messages":[{"role":"system","content":"be brief, it is 10:41"},
                {"role":"user","content":[{"type":"text","text":"hi"}]}],
    "tools":[{"type":"function","function":{"name":"b","parameters":{"z":1,"a":2}}},
             {"type":"function","function":{"name":"a"}}]}]})");
  ASSERT_EQ(requests.size(), 1u);
  const LintedRequest& r = requests[0];
  EXPECT_EQ(r.format, "openai");
  EXPECT_EQ(r.model, "llama");
  ASSERT_EQ(r.lint.parts.size(), 4u);  // system, both tools, the question
  EXPECT_EQ(r.lint.parts[0].where, "$.requests[0].messages[0].content");
  EXPECT_EQ(r.lint.parts[1].where, "$.requests[0].tools[0]");
  EXPECT_EQ(r.lint.parts[3].where, "$.requests[0].messages[1].content[0].text");
  EXPECT_TRUE(r.lint.parts[3].last_turn);
  EXPECT_FALSE(r.lint.parts[0].last_turn);
  ASSERT_EQ(r.lint.tools.size(), 2u);
  EXPECT_EQ(r.lint.tools[0].as_sent,
            R"({"type":"function","function":{"name":"b","parameters":{"z":1,"a":2}}})");
  EXPECT_EQ(r.lint.tools[0].canonical,
            R"({"function":{"name":"b","parameters":{"a":2,"z":1}},"type":"function"})");
  // As sent, and fixed: volatile spans masked, tools sorted by name and key.
  EXPECT_EQ(Json::parse(r.chat_body)["messages"][0]["content"], "be brief, it is 10:41");
  const Json fixed = Json::parse(r.fixed_chat_body);
  EXPECT_EQ(fixed["messages"][0]["content"], "be brief, it is <time>");
  EXPECT_EQ(fixed["tools"][0]["function"]["name"], "a");
  EXPECT_EQ(fixed["tools"][1]["function"]["name"], "b");
}

TEST(LintApiTest, AnAnthropicRequestKeepsItsCacheOrderAndBreakpoints) {
  const std::vector<LintedRequest> requests = Decode(R"({"requests":[{"model":"llama",
    "system":[{"type":"text","text":"rules","cache_control":{"type":"ephemeral"}}],
    "tools":[{"name":"search","description":"d","input_schema":{"type":"object"}}],
    "messages":[{"role":"user","content":"question"}]}]})");
  ASSERT_EQ(requests.size(), 1u);
  const LintedRequest& r = requests[0];
  EXPECT_EQ(r.format, "anthropic");
  ASSERT_EQ(r.lint.parts.size(), 3u);
  EXPECT_EQ(r.lint.parts[0].where, "$.requests[0].tools[0]");  // tools, system, messages
  EXPECT_EQ(r.lint.parts[1].where, "$.requests[0].system[0].text");
  EXPECT_TRUE(r.lint.parts[1].cache_breakpoint);
  EXPECT_FALSE(r.lint.parts[2].cache_breakpoint);
  // Tokenized as the OpenAI chat it amounts to.
  const Json chat = Json::parse(r.chat_body);
  EXPECT_EQ(chat["messages"][0], Json({{"role", "system"}, {"content", "rules"}}));
  EXPECT_EQ(chat["messages"][1], Json({{"role", "user"}, {"content", "question"}}));
  EXPECT_EQ(chat["tools"][0]["function"]["parameters"], Json({{"type", "object"}}));
}

TEST(LintApiTest, BadBodiesAreRefusedNamingWhere) {
  auto error = [](const std::string& text) {
    Result<std::vector<LintedRequest>> decoded = DecodeLintRequestJson(text, {});
    return decoded.ok() ? std::string("accepted") : decoded.status().message();
  };
  EXPECT_EQ(error(R"({})"), "$.requests: missing required field");
  EXPECT_EQ(error(R"({"requests":[]})"),
            "$.requests: want a non-empty array of chat or messages requests");
  EXPECT_EQ(error(R"({"requests":[{"messages":[{"role":"user","content":"x"}]}]})"),
            "$.requests[0].model: missing required field");
  EXPECT_EQ(error(R"({"requests":[{"model":"m","messages":[{"role":"user"}]}]})"),
            "$.requests[0].messages[0].content: missing required field");
  EXPECT_EQ(error(R"({"requests":[{"model":"m","messages":[{"role":"user","content":7}]}]})"),
            "$.requests[0].messages[0].content: want a string or an array of content blocks");
  EXPECT_EQ(error(R"({"format":"gemini","requests":[]})"),
            "$.format: want \"openai\" or \"anthropic\"");
  EXPECT_EQ(
      error(
          R"({"requests":[{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}]})"),
      "$.requests[0].tools[0].function.name: want a string (tools are "
      "{\"type\":\"function\",\"function\":{...}})");
  std::string many = R"({"requests":[)";
  for (size_t i = 0; i <= kMaxLintRequests; ++i) {
    many +=
        std::string(i ? "," : "") + R"({"model":"m","messages":[{"role":"user","content":"x"}]})";
  }
  EXPECT_EQ(error(many + "]}"), "$.requests: 65 requests, over the limit of 64");
  // The bounded parser's limits and duplicate-key rule hold here too.
  EXPECT_NE(error(R"({"requests":[],"requests":[]})").find("duplicate"), std::string::npos);
}

TEST(LintApiTest, TheAnswerCarriesFindingsAndTokenFigures) {
  LintAnswer answer;
  answer.findings.push_back({"tool_order", 1, "$.requests[1].tools", "why"});
  answer.formats = {"openai", "openai"};
  answer.prompt_tokens = {120, 118};
  answer.stable_prefix_tokens = {9, 9};
  answer.shared_prefix_tokens = 9;
  answer.shared_prefix_tokens_if_fixed = 110;
  const Json json = Json::parse(EncodeLintAnswerJson(answer));
  EXPECT_EQ(json["findings"][0]["rule"], "tool_order");
  EXPECT_EQ(json["requests"][1]["prompt_tokens"], 118);
  EXPECT_EQ(json["shared_prefix_tokens_if_fixed"], 110);
  EXPECT_FALSE(Json::parse(EncodeLintAnswerJson(LintAnswer{})).contains("shared_prefix_tokens"));
}

}  // namespace
}  // namespace kvgov
