#include "kvgov/sim/workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace kvgov::sim {
namespace {

bool IsPrefix(const std::vector<int64_t>& head, const std::vector<int64_t>& of) {
  return head.size() <= of.size() && std::equal(head.begin(), head.end(), of.begin());
}

TEST(AgentWorkloadTest, IsDeterministicUnderItsSeed) {
  AgentWorkloadOptions options;
  Result<std::vector<SimRequest>> a = AgentWorkload(options);
  Result<std::vector<SimRequest>> b = AgentWorkload(options);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].tokens, (*b)[i].tokens);
    EXPECT_EQ((*a)[i].arrival_s, (*b)[i].arrival_s);
  }
  options.seed = 2;
  Result<std::vector<SimRequest>> c = AgentWorkload(options);
  ASSERT_TRUE(c.ok());
  EXPECT_NE((*a)[0].tokens, (*c)[0].tokens);
}

TEST(AgentWorkloadTest, EachTurnResendsTheGrowingTranscript) {
  AgentWorkloadOptions options;
  options.tenants = 2;
  options.sessions_per_tenant = 3;
  options.turns = 4;
  Result<std::vector<SimRequest>> trace = AgentWorkload(options);
  ASSERT_TRUE(trace.ok());
  ASSERT_EQ(trace->size(), 2u * 3u * 4u);
  std::map<std::string, const SimRequest*> last_turn;
  std::map<std::string, std::vector<int64_t>> system_prompt;
  for (size_t i = 0; i < trace->size(); ++i) {
    const SimRequest& request = (*trace)[i];
    EXPECT_EQ(request.id, i);
    if (i > 0) {
      EXPECT_GE(request.arrival_s, (*trace)[i - 1].arrival_s);
    }
    auto previous = last_turn.find(request.session);
    if (previous != last_turn.end()) {
      EXPECT_TRUE(IsPrefix(previous->second->tokens, request.tokens));
      EXPECT_EQ(request.tokens.size(), previous->second->tokens.size() +
                                           static_cast<size_t>(options.answer_tokens +
                                                               options.message_tokens));
    }
    last_turn[request.session] = &request;
    // Every session of a tenant opens with the tenant's system prompt.
    std::vector<int64_t> head(request.tokens.begin(),
                              request.tokens.begin() + options.system_prompt_tokens);
    auto [it, inserted] = system_prompt.emplace(request.tenant, head);
    if (!inserted) {
      EXPECT_EQ(it->second, head);
    }
  }
  EXPECT_EQ(system_prompt.size(), 2u);
  EXPECT_NE(system_prompt["tenant-0"], system_prompt["tenant-1"]);
}

TEST(SharedPrefixWorkloadTest, RequestsAreAGroupPromptPlusAFreshQuestion) {
  SharedPrefixWorkloadOptions options;
  options.groups = 5;
  options.requests = 200;
  Result<std::vector<SimRequest>> trace = SharedPrefixWorkload(options);
  ASSERT_TRUE(trace.ok());
  ASSERT_EQ(trace->size(), 200u);
  std::map<std::string, std::vector<int64_t>> heads;
  for (const SimRequest& request : *trace) {
    ASSERT_EQ(request.tokens.size(), 6144u + 1200u);
    EXPECT_TRUE(request.tenant.empty());
    std::vector<int64_t> head(request.tokens.begin(), request.tokens.begin() + 6144);
    auto [it, inserted] = heads.emplace(request.session, head);
    if (!inserted) {
      EXPECT_EQ(it->second, head);
    }
  }
  EXPECT_EQ(heads.size(), 5u);
  // About 16 requests per second by default.
  EXPECT_NEAR(trace->back().arrival_s, 200.0 / 16.0, 3.0);
  EXPECT_EQ(SharedPrefixBlocks(options, 16), 5 * 384);
}

// Agents' answers are generated; shared-prefix answers only when asked for,
// drawn around their mean and capped, and without them the trace is the one
// llm-d's benchmark reports.
TEST(WorkloadTest, AnswersHaveTheLengthsAskedFor) {
  AgentWorkloadOptions agent;
  agent.tenants = 1;
  agent.sessions_per_tenant = 2;
  Result<std::vector<SimRequest>> turns = AgentWorkload(agent);
  ASSERT_TRUE(turns.ok());
  for (const SimRequest& request : *turns) EXPECT_EQ(request.output_tokens, 192);

  SharedPrefixWorkloadOptions shared;
  shared.groups = 5;
  shared.requests = 2000;
  Result<std::vector<SimRequest>> silent = SharedPrefixWorkload(shared);
  ASSERT_TRUE(silent.ok());
  for (const SimRequest& request : *silent) EXPECT_EQ(request.output_tokens, 0);
  shared.answer_tokens = 100;
  Result<std::vector<SimRequest>> answered = SharedPrefixWorkload(shared);
  ASSERT_TRUE(answered.ok());
  double total = 0;
  int64_t longest = 0;
  for (const SimRequest& request : *answered) {
    EXPECT_GE(request.output_tokens, 1);
    total += static_cast<double>(request.output_tokens);
    longest = std::max(longest, request.output_tokens);
  }
  EXPECT_LE(longest, 800);
  EXPECT_NEAR(total / 2000.0, 100.0, 10.0);
  shared.answer_tokens = -1;
  EXPECT_EQ(SharedPrefixWorkload(shared).status().code(), StatusCode::kInvalidArgument);
}

TEST(WorkloadTest, RefusesNonPositiveShapes) {
  AgentWorkloadOptions agent;
  agent.turns = 0;
  EXPECT_EQ(AgentWorkload(agent).status().code(), StatusCode::kInvalidArgument);
  SharedPrefixWorkloadOptions shared;
  shared.requests_per_s = 0;
  EXPECT_EQ(SharedPrefixWorkload(shared).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvgov::sim
