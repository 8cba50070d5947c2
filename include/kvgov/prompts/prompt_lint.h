#pragma once

// A lint for prompts, needing no traffic (docs/formats/prefix-diagnostics.md
// §5): the prompt-prefix rules (static content before volatile, one
// serialization, nothing changing before a cache breakpoint) checked on
// requests as a client would send them. The codec lowers OpenAI chat and
// Anthropic messages requests into LintRequest; the daemon adds what the
// engine's tokenizer says.

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvgov::prompts {

/// Text that changes from request to request by its nature.
struct VolatileSpan {
  size_t offset = 0;  // bytes into the text
  size_t length = 0;
  std::string_view kind;  // date, time, uuid, unix_time, hex_id
};

/// Every volatile-looking span of `text`, in order, not overlapping.
std::vector<VolatileSpan> FindVolatile(std::string_view text);

/// `text` with each volatile span replaced by a placeholder of its kind
/// (`<time>`): the prompt as it would be with that content moved out.
std::string MaskVolatile(std::string_view text);

/// One piece of a prompt's text, in the order the engine reads it.
struct PromptPart {
  std::string where;  // a JSON path into the request: "system", "messages[2].content"
  std::string text;
  bool last_turn = false;         // part of the final message: per request by nature
  bool cache_breakpoint = false;  // Anthropic cache_control here: the prefix through it is cached
};

/// A tool definition as sent and with its keys sorted.
struct ToolForm {
  std::string name;
  std::string as_sent;
  std::string canonical;
};

struct LintRequest {
  std::vector<PromptPart> parts;
  std::vector<ToolForm> tools;        // in the order sent
  std::string tools_where = "tools";  // where findings about the tools point
};

struct LintFinding {
  std::string
      rule;  // volatile_before_static, nondeterministic_json, tool_order, breakpoint_changes
  size_t request = 0;  // index into the requests given
  std::string where;
  std::string detail;
};

/// Characters of static prompt after a volatile span for it to count.
inline constexpr size_t kMinStaticAfterVolatile = 200;

/// The rules each request breaks on its own, and those the requests break
/// together (a tool serialized two ways, tools in two orders, the content
/// before one breakpoint differing).
std::vector<LintFinding> LintPrompts(std::span<const LintRequest> requests);

}  // namespace kvgov::prompts
