// DecodeLintRequestJson, the body of POST /v1/lint/prompt, and the lint run
// on what it decodes. Checked, beyond no crash, leak or exception: only the
// documented error codes, each message led by its path; every decoded
// request has a model, a format, and chat bodies that are JSON objects with
// a non-empty messages array (the engine tokenizes them); every part's
// volatile spans lie inside its text, in order, apart, and masking twice
// changes nothing more; each finding names a request that exists; small
// limits only ever refuse.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "json_check.h"
#include "kvgov/codec/lint_api.h"
#include "kvgov/prompts/prompt_lint.h"

namespace kvgov::fuzz {
namespace {

void CheckChatBody(const std::string& body, const char* which) {
  const nlohmann::json json = nlohmann::json::parse(body, nullptr, false);
  FUZZ_CHECK(json.is_object(), "%s is not a JSON object: %s", which, body.c_str());
  FUZZ_CHECK(json.contains("messages") && json["messages"].is_array() && !json["messages"].empty(),
             "%s without a non-empty messages array: %s", which, body.c_str());
}

void CheckPart(const prompts::PromptPart& part) {
  CheckUtf8(part.text, "part text");
  size_t end = 0;
  for (const prompts::VolatileSpan& span : prompts::FindVolatile(part.text)) {
    FUZZ_CHECK(
        span.length > 0 && span.offset >= end && span.offset + span.length <= part.text.size(),
        "span [%zu, +%zu) after %zu in a %zu-byte text", span.offset, span.length, end,
        part.text.size());
    end = span.offset + span.length;
  }
  const std::string masked = prompts::MaskVolatile(part.text);
  FUZZ_CHECK(prompts::MaskVolatile(masked) == masked, "masking twice changed the text");
}

void Check(const std::vector<LintedRequest>& requests) {
  FUZZ_CHECK(!requests.empty() && requests.size() <= kMaxLintRequests, "%zu requests",
             requests.size());
  std::vector<prompts::LintRequest> lint;
  for (const LintedRequest& request : requests) {
    FUZZ_CHECK(!request.model.empty(), "a request without a model");
    FUZZ_CHECK(request.format == "openai" || request.format == "anthropic", "format '%s'",
               request.format.c_str());
    CheckChatBody(request.chat_body, "chat_body");
    CheckChatBody(request.fixed_chat_body, "fixed_chat_body");
    for (const prompts::PromptPart& part : request.lint.parts) CheckPart(part);
    lint.push_back(request.lint);
  }
  for (const prompts::LintFinding& finding : prompts::LintPrompts(lint)) {
    FUZZ_CHECK(finding.request < requests.size(), "a finding of request %zu of %zu",
               finding.request, requests.size());
    FUZZ_CHECK(!finding.rule.empty() && !finding.detail.empty(), "a finding without words");
  }
}

bool Same(const std::vector<LintedRequest>& a, const std::vector<LintedRequest>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].chat_body != b[i].chat_body || a[i].fixed_chat_body != b[i].fixed_chat_body) {
      return false;
    }
  }
  return true;
}

}  // namespace
}  // namespace kvgov::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgov;
  using namespace kvgov::fuzz;
  RunJsonDecoder<std::vector<LintedRequest>>(AsText(data, size), DecodeLintRequestJson, Check,
                                             Same);
  return 0;
}
