#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvgov/core/status.h"

namespace kvgov::sim {

/// One request of a trace: who sends which prompt when.
struct SimRequest {
  uint64_t id = 0;       // 0, 1, 2, ... in arrival order
  double arrival_s = 0;  // seconds from the trace's start
  std::string tenant;    // "" for a single-tenant workload
  std::string session;   // for reports: which conversation or group it belongs to
  std::vector<int64_t> tokens;
  int64_t output_tokens = 0;  // what the answer generates (0: not modeled)
};

/// Agents: each tenant's sessions share the tenant's system prompt, and
/// every turn re-sends the whole transcript so far (the previous turns'
/// messages and answers) plus a new message, so the transcript grows turn
/// by turn. Sessions start at random times and think between turns.
struct AgentWorkloadOptions {
  int tenants = 6;
  int sessions_per_tenant = 10;
  int turns = 8;
  int64_t system_prompt_tokens = 3072;
  int64_t message_tokens = 256;       // each new user message (or tool result)
  int64_t answer_tokens = 192;        // each answer (output_tokens), re-sent with the next turn
  double session_starts_per_s = 2.0;  // Poisson rate of new sessions
  double think_time_s = 2.0;          // mean gap between a session's turns
  uint64_t seed = 1;
};

/// llm-d's shared-prefix benchmark (benchmarking/73-capacity): groups share
/// a long system prompt; each request is one group's prompt plus a fresh
/// question, arriving as a Poisson process.
struct SharedPrefixWorkloadOptions {
  int groups = 150;
  int64_t system_prompt_tokens = 6144;
  int64_t question_tokens = 1200;
  // Mean answer length (SimRequest::output_tokens), drawn exponentially and
  // capped at 8x the mean; 0: answers are not modeled (llm-d's published
  // figure is TTFT alone). Nonzero draws from the trace's generator after
  // each question, so it gives a different trace from 0.
  int64_t answer_tokens = 0;
  int requests = 2400;
  double requests_per_s = 16.0;
  uint64_t seed = 1;
};

/// Multi-turn chat: people in conversation with one assistant. Every
/// session opens with the same short system prompt and re-sends its whole
/// transcript each turn; sessions have a random number of turns, messages
/// and answers of random length, and people think for a long time between
/// turns, so a conversation's KV must survive minutes of other traffic.
struct ConversationWorkloadOptions {
  int sessions = 240;
  int min_turns = 2;
  int max_turns = 10;  // uniform in [min_turns, max_turns]
  int64_t system_prompt_tokens = 512;
  int64_t message_tokens = 192;       // mean of exponential draws, at least 16
  int64_t answer_tokens = 320;        // mean of exponential draws, at least 16
  double session_starts_per_s = 2.0;  // Poisson rate of new sessions
  double think_time_s = 20.0;         // mean gap between a session's turns
  uint64_t seed = 1;
};

/// Long-document question answering: a library of long documents, each
/// asked about several times (popular documents far more often: Zipf),
/// every prompt the whole document plus a short question.
struct DocumentQaWorkloadOptions {
  int documents = 40;
  int64_t min_document_tokens = 8192;
  int64_t max_document_tokens = 32768;  // uniform in [min, max]
  int64_t question_tokens = 128;        // mean of exponential draws, at least 16
  int64_t answer_tokens = 192;          // mean of exponential draws, at least 1
  double zipf_exponent = 1.1;           // document popularity
  int requests = 600;
  double requests_per_s = 3.0;
  uint64_t seed = 1;
};

/// A burst: steady background traffic over a set of shared prompts, then
/// `burst_requests` arriving within `burst_window_s`, several times. The
/// burst's requests share the same few prompts, so many of them arrive
/// while the first of their prefix is still being prefilled.
struct BurstWorkloadOptions {
  int prompts = 16;
  int64_t prompt_tokens = 4096;
  int64_t suffix_tokens = 256;  // unique per request
  int64_t answer_tokens = 128;  // mean of exponential draws, at least 1
  double background_per_s = 4.0;
  double duration_s = 60.0;
  int bursts = 3;  // evenly spaced inside the duration
  int burst_requests = 200;
  double burst_window_s = 0.5;
  int burst_prompts = 4;  // the burst's requests use only the first few prompts
  uint64_t seed = 1;
};

/// Deterministic under the options (the seed included): the same options
/// give the same trace on every machine. InvalidArgument for a count or
/// rate that is not positive.
Result<std::vector<SimRequest>> AgentWorkload(const AgentWorkloadOptions& options);
Result<std::vector<SimRequest>> SharedPrefixWorkload(const SharedPrefixWorkloadOptions& options);
Result<std::vector<SimRequest>> ConversationWorkload(const ConversationWorkloadOptions& options);
Result<std::vector<SimRequest>> DocumentQaWorkload(const DocumentQaWorkloadOptions& options);
Result<std::vector<SimRequest>> BurstWorkload(const BurstWorkloadOptions& options);

/// Distinct full blocks a workload's shared prefixes need (what the llm-d
/// setup sizes KV capacity against).
int64_t SharedPrefixBlocks(const SharedPrefixWorkloadOptions& options, int64_t block_size);

}  // namespace kvgov::sim
