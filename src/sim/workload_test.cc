#include "kvgov/sim/workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

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
      EXPECT_EQ(request.tokens.size(),
                previous->second->tokens.size() +
                    static_cast<size_t>(options.answer_tokens + options.message_tokens));
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
  ConversationWorkloadOptions conversation;
  conversation.max_turns = conversation.min_turns - 1;
  EXPECT_EQ(ConversationWorkload(conversation).status().code(), StatusCode::kInvalidArgument);
  DocumentQaWorkloadOptions documents;
  documents.max_document_tokens = documents.min_document_tokens - 1;
  EXPECT_EQ(DocumentQaWorkload(documents).status().code(), StatusCode::kInvalidArgument);
  BurstWorkloadOptions burst;
  burst.burst_prompts = burst.prompts + 1;
  EXPECT_EQ(BurstWorkload(burst).status().code(), StatusCode::kInvalidArgument);
}

// Arrival order, ids 0, 1, 2, ... and every answer a length.
void ExpectOrderedAndAnswered(const std::vector<SimRequest>& trace) {
  for (size_t i = 0; i < trace.size(); ++i) {
    EXPECT_EQ(trace[i].id, i);
    if (i > 0) {
      EXPECT_GE(trace[i].arrival_s, trace[i - 1].arrival_s);
    }
    EXPECT_GE(trace[i].output_tokens, 1);
  }
}

TEST(ConversationWorkloadTest, SessionsGrowTheirTranscriptFromOneSystemPrompt) {
  ConversationWorkloadOptions options;
  options.sessions = 30;
  Result<std::vector<SimRequest>> trace = ConversationWorkload(options);
  ASSERT_TRUE(trace.ok());
  ExpectOrderedAndAnswered(*trace);
  std::map<std::string, const SimRequest*> last_turn;
  std::map<std::string, int> turns;
  const std::vector<int64_t> system_prompt(
      trace->front().tokens.begin(), trace->front().tokens.begin() + options.system_prompt_tokens);
  for (const SimRequest& request : *trace) {
    EXPECT_TRUE(IsPrefix(system_prompt, request.tokens));
    if (auto previous = last_turn.find(request.session); previous != last_turn.end()) {
      // The transcript so far, its answer, then a new message of at least 16.
      EXPECT_TRUE(IsPrefix(previous->second->tokens, request.tokens));
      EXPECT_GE(request.tokens.size(), previous->second->tokens.size() +
                                           static_cast<size_t>(previous->second->output_tokens) +
                                           16);
    }
    last_turn[request.session] = &request;
    ++turns[request.session];
  }
  EXPECT_EQ(turns.size(), 30u);
  for (const auto& [session, count] : turns) {
    EXPECT_GE(count, options.min_turns) << session;
    EXPECT_LE(count, options.max_turns) << session;
  }
  Result<std::vector<SimRequest>> again = ConversationWorkload(options);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->back().tokens, trace->back().tokens);
}

TEST(DocumentQaWorkloadTest, PopularDocumentsAreAskedAboutMoreOften) {
  DocumentQaWorkloadOptions options;
  options.documents = 10;
  options.min_document_tokens = 100;
  options.max_document_tokens = 200;
  options.requests = 2000;
  Result<std::vector<SimRequest>> trace = DocumentQaWorkload(options);
  ASSERT_TRUE(trace.ok());
  ExpectOrderedAndAnswered(*trace);
  std::map<std::string, int> asked;
  std::map<std::string, std::vector<int64_t>> document;
  for (const SimRequest& request : *trace) {
    ++asked[request.session];
    auto [it, first] = document.emplace(request.session, request.tokens);
    if (!first) {
      // The longest prefix two questions share is the document itself.
      size_t common = 0;
      while (common < it->second.size() && common < request.tokens.size() &&
             it->second[common] == request.tokens[common]) {
        ++common;
      }
      it->second.resize(common);
    }
  }
  for (const auto& [name, tokens] : document) {
    if (asked[name] < 5) continue;  // a rare document's questions may share their first token
    EXPECT_GE(tokens.size(), 100u) << name;
    EXPECT_LE(tokens.size(), 200u + 1) << name;
  }
  // Zipf with s = 1.1: document 0 about 2.1x as often as document 1.
  EXPECT_GT(asked["document-0"], asked["document-1"]);
  EXPECT_GT(asked["document-1"], asked["document-9"]);
}

TEST(BurstWorkloadTest, BurstsArriveInTheirWindowOnTheirPrompts) {
  BurstWorkloadOptions options;
  Result<std::vector<SimRequest>> trace = BurstWorkload(options);
  ASSERT_TRUE(trace.ok());
  ExpectOrderedAndAnswered(*trace);
  std::map<std::string, std::vector<const SimRequest*>> by_group;
  for (const SimRequest& request : *trace) by_group[request.session].push_back(&request);
  ASSERT_EQ(by_group.size(), static_cast<size_t>(options.bursts) + 1);  // and "background"
  std::set<std::vector<int64_t>> burst_prompts;
  for (int b = 0; b < options.bursts; ++b) {
    const std::vector<const SimRequest*>& burst = by_group["burst-" + std::to_string(b)];
    ASSERT_EQ(burst.size(), static_cast<size_t>(options.burst_requests));
    const double start = options.duration_s * (b + 1) / (options.bursts + 1);
    for (const SimRequest* request : burst) {
      EXPECT_GE(request->arrival_s, start);
      EXPECT_LT(request->arrival_s, start + options.burst_window_s);
      burst_prompts.emplace(request->tokens.begin(),
                            request->tokens.begin() + options.prompt_tokens);
    }
  }
  EXPECT_EQ(burst_prompts.size(), static_cast<size_t>(options.burst_prompts));
  const double background = static_cast<double>(by_group["background"].size());
  EXPECT_NEAR(background, options.background_per_s * options.duration_s,
              4 * std::sqrt(options.background_per_s * options.duration_s));
}

}  // namespace
}  // namespace kvgov::sim
