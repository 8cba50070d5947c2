#pragma once

// POST /v1/lint/prompt (docs/formats/prefix-diagnostics.md §5): the body,
// lowered into the lint's requests, and the answer.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/codec/json_codec.h"
#include "kvgov/core/status.h"
#include "kvgov/prompts/prompt_lint.h"

namespace kvgov {

/// The most requests one lint takes.
inline constexpr size_t kMaxLintRequests = 64;

/// One request of the body, OpenAI chat or Anthropic messages.
struct LintedRequest {
  std::string model;
  std::string format;  // "openai" or "anthropic"
  prompts::LintRequest lint;
  // The request as an OpenAI chat completion (model, messages, tools): what
  // the engine tokenizes, as the gateway would.
  std::string chat_body;
  // The same with every volatile span masked and the tools' keys sorted,
  // in name order: the prompt with the rules kept.
  std::string fixed_chat_body;
};

/// `{"requests":[...]}`; each request's format is told by its shape (a
/// top-level `system`, content blocks with `cache_control`, or tools with
/// `input_schema` make it Anthropic's) unless `"format"` names it.
/// InvalidArgument naming the path of what is wrong.
Result<std::vector<LintedRequest>> DecodeLintRequestJson(std::string_view text,
                                                         const JsonLimits& limits);

struct LintAnswer {
  std::vector<prompts::LintFinding> findings;
  std::vector<std::string> formats;
  std::vector<int64_t> prompt_tokens;         // per request, as the engine tokenized it
  std::vector<int64_t> stable_prefix_tokens;  // per request: up to its first volatile token
  // Across the requests (two or more): the token prefix they share as
  // sent, and as they would with the rules kept.
  std::optional<int64_t> shared_prefix_tokens;
  std::optional<int64_t> shared_prefix_tokens_if_fixed;
};

std::string EncodeLintAnswerJson(const LintAnswer& answer);

}  // namespace kvgov
