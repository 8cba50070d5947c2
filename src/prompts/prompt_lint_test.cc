#include "kvgov/prompts/prompt_lint.h"

#include <gtest/gtest.h>

namespace kvgov::prompts {
namespace {

std::string Static(size_t n) { return std::string(n, 's'); }

std::vector<std::string> Kinds(std::string_view text) {
  std::vector<std::string> kinds;
  for (const VolatileSpan& span : FindVolatile(text)) kinds.emplace_back(span.kind);
  return kinds;
}

TEST(FindVolatileTest, NamesDatesTimesIdsAndTimestamps) {
  EXPECT_EQ(Kinds("today is 2026-12-04, it is 09:41:07.123 now"),
            (std::vector<std::string>{"date", "time"}));
  EXPECT_EQ(Kinds("request 3f2b8c1e-9a4d-4e7f-8b2a-1c0d9e8f7a6b done"),
            (std::vector<std::string>{"uuid"}));
  EXPECT_EQ(Kinds("ts=1796371200 ms=1796371200123"),
            (std::vector<std::string>{"unix_time", "unix_time"}));
  EXPECT_EQ(Kinds("trace 4bf92f3577b34da6a3ce929d0e0e4736"), (std::vector<std::string>{"hex_id"}));
  // Not volatile: versions, ratios, plain numbers, words, long decimal runs.
  EXPECT_TRUE(Kinds("version 1.2.3, ratio 16:9x, 42 apples, deadbeef, 12345678901234").empty());
  EXPECT_TRUE(Kinds("the year 2026 and 25:61 are not a time").empty());
  EXPECT_TRUE(Kinds("abcdefabcdefabcdef has no digit").empty());
}

TEST(FindVolatileTest, MaskingReplacesEachSpanByItsKind) {
  EXPECT_EQ(MaskVolatile("at 9:05 on 2026-12-04 id 3f2b8c1e-9a4d-4e7f-8b2a-1c0d9e8f7a6b."),
            "at <time> on <date> id <uuid>.");
  EXPECT_EQ(MaskVolatile("nothing here"), "nothing here");
}

LintRequest Chat(std::string system, std::string question) {
  LintRequest request;
  request.parts.push_back({"messages[0].content", std::move(system), false, false});
  request.parts.push_back({"messages[1].content", std::move(question), true, false});
  return request;
}

std::vector<std::string> Rules(const std::vector<LintFinding>& findings) {
  std::vector<std::string> rules;
  for (const LintFinding& finding : findings) rules.push_back(finding.rule);
  return rules;
}

TEST(LintPromptsTest, AVolatileSpanBeforeStaticContentIsReported) {
  const LintRequest stamped = Chat("It is 2026-12-04 09:41. " + Static(500), "hi");
  const std::vector<LintFinding> findings = LintPrompts(std::span(&stamped, 1));
  ASSERT_EQ(Rules(findings), std::vector<std::string>{"volatile_before_static"});
  EXPECT_EQ(findings[0].where, "messages[0].content");
  EXPECT_NE(findings[0].detail.find("a date ('2026-12-04') at character 6"), std::string::npos)
      << findings[0].detail;

  // After the static content, or in the last message, it costs nothing.
  const LintRequest at_end = Chat(Static(500) + " It is 2026-12-04 09:41.", "hi");
  EXPECT_TRUE(LintPrompts(std::span(&at_end, 1)).empty());
  const LintRequest in_question = Chat(Static(500), "It is 2026-12-04 09:41, what now?");
  EXPECT_TRUE(LintPrompts(std::span(&in_question, 1)).empty());
}

LintRequest WithTools(std::vector<ToolForm> tools) {
  LintRequest request = Chat(Static(300), "q");
  request.tools = std::move(tools);
  return request;
}

TEST(LintPromptsTest, AToolSerializedTwoWaysIsNondeterministicJson) {
  const ToolForm sorted{"search", R"({"description":"d","name":"search"})",
                        R"({"description":"d","name":"search"})"};
  const ToolForm unsorted{"search", R"({"name":"search","description":"d"})",
                          R"({"description":"d","name":"search"})"};
  const std::vector<LintRequest> differing = {WithTools({sorted}), WithTools({unsorted})};
  const std::vector<LintFinding> findings = LintPrompts(differing);
  ASSERT_EQ(Rules(findings), std::vector<std::string>{"nondeterministic_json"});
  EXPECT_EQ(findings[0].request, 1u);

  const std::vector<LintRequest> same = {WithTools({sorted}), WithTools({sorted})};
  EXPECT_TRUE(LintPrompts(same).empty());
  // A changed definition is a change, not a serialization.
  const ToolForm changed{"search", R"({"description":"e","name":"search"})",
                         R"({"description":"e","name":"search"})"};
  const std::vector<LintRequest> edited = {WithTools({sorted}), WithTools({changed})};
  EXPECT_TRUE(LintPrompts(edited).empty());
}

TEST(LintPromptsTest, TheSameToolsInAnotherOrderAreReported) {
  const ToolForm a{"a", "{}", "{}"};
  const ToolForm b{"b", "{}", "{}"};
  const std::vector<LintRequest> swapped = {WithTools({a, b}), WithTools({b, a})};
  EXPECT_EQ(Rules(LintPrompts(swapped)), std::vector<std::string>{"tool_order"});
  const std::vector<LintRequest> kept = {WithTools({a, b}), WithTools({a, b})};
  EXPECT_TRUE(LintPrompts(kept).empty());
  const std::vector<LintRequest> grown = {WithTools({a}), WithTools({a, b})};
  EXPECT_TRUE(LintPrompts(grown).empty());
}

LintRequest WithBreakpoint(std::string system) {
  LintRequest request;
  request.parts.push_back({"system[0].text", std::move(system), false, true});
  request.parts.push_back({"messages[0].content", "question", true, false});
  return request;
}

TEST(LintPromptsTest, ContentChangingBeforeABreakpointIsReported) {
  // Volatile before the breakpoint, in one request (and, costing the
  // static rest, the volatile rule too).
  const LintRequest stamped = WithBreakpoint("Now: 10:41. " + Static(400));
  EXPECT_EQ(Rules(LintPrompts(std::span(&stamped, 1))),
            (std::vector<std::string>{"volatile_before_static", "breakpoint_changes"}));
  // Differing between requests, beyond any volatile span.
  const std::vector<LintRequest> edited = {WithBreakpoint("user alice. " + Static(100)),
                                           WithBreakpoint("user bob. " + Static(100))};
  const std::vector<LintFinding> findings = LintPrompts(edited);
  ASSERT_EQ(Rules(findings), std::vector<std::string>{"breakpoint_changes"});
  EXPECT_EQ(findings[0].request, 1u);
  EXPECT_EQ(findings[0].where, "system[0].text");
  // The same cached prefix every time: nothing.
  const std::vector<LintRequest> steady = {WithBreakpoint(Static(100)),
                                           WithBreakpoint(Static(100))};
  EXPECT_TRUE(LintPrompts(steady).empty());
}

}  // namespace
}  // namespace kvgov::prompts
