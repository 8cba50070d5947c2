#include "kvgov/codec/lint_api.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "codec/json_fields.h"
#include "json/bounded_json.h"

namespace kvgov {
namespace {

using Ordered = nlohmann::ordered_json;
using json_internal::ChildPath;
using json_internal::IndexPath;
using json_internal::PathError;

std::string Dump(const Ordered& json) {
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Keys sorted, at every depth: nlohmann::json's objects are ordered maps.
std::string Canonical(const Ordered& json) {
  return nlohmann::json::parse(Dump(json))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Every string in `json` masked (MaskVolatile), keys kept.
Ordered Masked(const Ordered& json) {
  if (json.is_string()) return prompts::MaskVolatile(json.get_ref<const std::string&>());
  Ordered out = json;
  if (json.is_object()) {
    for (auto it = out.begin(); it != out.end(); ++it) it.value() = Masked(it.value());
  } else if (json.is_array()) {
    for (Ordered& item : out) item = Masked(item);
  }
  return out;
}

bool HasCacheControl(const Ordered& block) {
  return block.is_object() && block.contains("cache_control");
}

bool LooksAnthropic(const Ordered& request) {
  if (request.contains("system")) return true;
  const Ordered* tools = request.contains("tools") ? &request["tools"] : nullptr;
  if (tools && tools->is_array()) {
    for (const Ordered& tool : *tools) {
      if (tool.is_object() && tool.contains("input_schema")) return true;
    }
  }
  if (request.contains("messages") && request["messages"].is_array()) {
    for (const Ordered& message : request["messages"]) {
      if (!message.is_object() || !message.contains("content") || !message["content"].is_array()) {
        continue;
      }
      for (const Ordered& block : message["content"]) {
        if (HasCacheControl(block)) return true;
      }
    }
  }
  return false;
}

// The text of a content value (a string, or blocks with "text"): the parts
// it makes, each with its path, and the text joined.
struct Content {
  std::vector<prompts::PromptPart> parts;
  std::string joined;
};

Result<Content> ReadContent(const Ordered& content, const std::string& path, bool last_turn) {
  Content out;
  if (content.is_string()) {
    out.joined = content.get<std::string>();
    out.parts.push_back({path, out.joined, last_turn, false});
    return out;
  }
  if (!content.is_array()) return PathError(path, "want a string or an array of content blocks");
  for (size_t j = 0; j < content.size(); ++j) {
    const Ordered& block = content[j];
    const std::string block_path = IndexPath(path, j);
    if (!block.is_object()) return PathError(block_path, "want an object");
    // Tool results and images carry no text the lint reads; they keep
    // their place (an image changes nothing a cache rule names).
    if (!block.contains("text")) continue;
    if (!block["text"].is_string())
      return PathError(ChildPath(block_path, "text"), "want a string");
    const std::string& text = block["text"].get_ref<const std::string&>();
    if (!out.joined.empty()) out.joined += "\n";
    out.joined += text;
    out.parts.push_back({ChildPath(block_path, "text"), text, last_turn, HasCacheControl(block)});
  }
  return out;
}

Result<std::string> ReadModel(const Ordered& request, const std::string& path) {
  if (!request.contains("model"))
    return PathError(ChildPath(path, "model"), "missing required field");
  if (!request["model"].is_string() || request["model"].get_ref<const std::string&>().empty()) {
    return PathError(ChildPath(path, "model"), "want a non-empty string");
  }
  return request["model"].get<std::string>();
}

Result<const Ordered*> ReadMessages(const Ordered& request, const std::string& path) {
  const std::string messages_path = ChildPath(path, "messages");
  if (!request.contains("messages")) return PathError(messages_path, "missing required field");
  const Ordered& messages = request["messages"];
  if (!messages.is_array() || messages.empty())
    return PathError(messages_path, "want a non-empty array");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string message_path = IndexPath(messages_path, i);
    if (!messages[i].is_object()) return PathError(message_path, "want an object");
    if (!messages[i].contains("role") || !messages[i]["role"].is_string()) {
      return PathError(ChildPath(message_path, "role"), "want a string");
    }
    if (!messages[i].contains("content")) {
      return PathError(ChildPath(message_path, "content"), "missing required field");
    }
  }
  return &messages;
}

// A tool as the lint compares it.
prompts::ToolForm ToolFormOf(const Ordered& tool, const std::string& name) {
  return {name, Dump(tool), Canonical(tool)};
}

// `tools` in name order with their keys sorted (the fixed form).
Ordered FixedTools(const Ordered& tools, const std::vector<std::string>& names) {
  std::vector<size_t> order(tools.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return names[a] < names[b]; });
  Ordered out = Ordered::array();
  for (size_t i : order) out.push_back(Ordered::parse(Canonical(Masked(tools[i]))));
  return out;
}

// What both formats begin with: the model, the messages and the tools
// array (null when there is none), checked.
struct Lowering {
  LintedRequest out;
  const Ordered* messages = nullptr;
  std::string messages_path;
  const Ordered* tools = nullptr;
  std::string tools_path;
};

Result<Lowering> BeginLowering(const Ordered& request, const std::string& path,
                               std::string format) {
  Lowering lowering;
  lowering.out.format = std::move(format);
  KVGOV_ASSIGN_OR_RETURN(lowering.out.model, ReadModel(request, path));
  KVGOV_ASSIGN_OR_RETURN(lowering.messages, ReadMessages(request, path));
  lowering.messages_path = ChildPath(path, "messages");
  if (request.contains("tools")) {
    lowering.tools = &request["tools"];
    lowering.tools_path = ChildPath(path, "tools");
    if (!lowering.tools->is_array()) return PathError(lowering.tools_path, "want an array");
    lowering.out.lint.tools_where = lowering.tools_path;
  }
  return lowering;
}

Result<LintedRequest> LowerOpenAI(const Ordered& request, const std::string& path) {
  KVGOV_ASSIGN_OR_RETURN(Lowering lowering, BeginLowering(request, path, "openai"));
  LintedRequest& out = lowering.out;
  const Ordered* messages = lowering.messages;
  Ordered chat = {{"model", out.model}, {"messages", *messages}};
  Ordered fixed = {{"model", out.model}, {"messages", Masked(*messages)}};

  std::vector<prompts::PromptPart> tool_parts;
  if (lowering.tools != nullptr) {
    const Ordered& tools = *lowering.tools;
    std::vector<std::string> names;
    for (size_t k = 0; k < tools.size(); ++k) {
      const Ordered& tool = tools[k];
      const std::string tool_path = IndexPath(lowering.tools_path, k);
      const Ordered* function =
          tool.is_object() && tool.contains("function") ? &tool["function"] : nullptr;
      if (function == nullptr || !function->is_object() || !function->contains("name") ||
          !(*function)["name"].is_string()) {
        return PathError(ChildPath(ChildPath(tool_path, "function"), "name"),
                         "want a string (tools are {\"type\":\"function\",\"function\":{...}})");
      }
      names.push_back((*function)["name"].get<std::string>());
      out.lint.tools.push_back(ToolFormOf(tool, names.back()));
      tool_parts.push_back({tool_path, Dump(tool), false, false});
    }
    chat["tools"] = tools;
    fixed["tools"] = FixedTools(tools, names);
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string content_path = ChildPath(IndexPath(lowering.messages_path, i), "content");
    KVGOV_ASSIGN_OR_RETURN(Content content, ReadContent((*messages)[i]["content"], content_path,
                                                        i + 1 == messages->size()));
    for (prompts::PromptPart& part : content.parts) out.lint.parts.push_back(std::move(part));
    // Chat templates render the tools into the system prompt: after it.
    if (i == 0) {
      for (prompts::PromptPart& part : tool_parts) out.lint.parts.push_back(std::move(part));
    }
  }
  out.chat_body = Dump(chat);
  out.fixed_chat_body = Dump(fixed);
  return std::move(out);
}

Result<LintedRequest> LowerAnthropic(const Ordered& request, const std::string& path) {
  KVGOV_ASSIGN_OR_RETURN(Lowering lowering, BeginLowering(request, path, "anthropic"));
  LintedRequest& out = lowering.out;
  const Ordered* messages = lowering.messages;
  // Anthropic's cache order: tools, then system, then messages.
  Ordered chat_tools = Ordered::array();
  Ordered fixed_tools = Ordered::array();
  if (lowering.tools != nullptr) {
    const Ordered& tools = *lowering.tools;
    std::vector<std::string> names;
    for (size_t k = 0; k < tools.size(); ++k) {
      const Ordered& tool = tools[k];
      const std::string tool_path = IndexPath(lowering.tools_path, k);
      if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string()) {
        return PathError(ChildPath(tool_path, "name"), "want a string");
      }
      names.push_back(tool["name"].get<std::string>());
      Ordered definition = tool;
      definition.erase("cache_control");
      out.lint.tools.push_back(ToolFormOf(definition, names.back()));
      out.lint.parts.push_back({tool_path, Dump(definition), false, HasCacheControl(tool)});
      Ordered function = {{"name", names.back()}};
      if (tool.contains("description")) function["description"] = tool["description"];
      if (tool.contains("input_schema")) function["parameters"] = tool["input_schema"];
      chat_tools.push_back({{"type", "function"}, {"function", function}});
    }
    for (const Ordered& tool : FixedTools(chat_tools, names)) fixed_tools.push_back(tool);
  }
  Ordered chat_messages = Ordered::array();
  if (request.contains("system")) {
    KVGOV_ASSIGN_OR_RETURN(Content system,
                           ReadContent(request["system"], ChildPath(path, "system"), false));
    for (prompts::PromptPart& part : system.parts) out.lint.parts.push_back(std::move(part));
    chat_messages.push_back({{"role", "system"}, {"content", system.joined}});
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const Ordered& message = (*messages)[i];
    const std::string content_path = ChildPath(IndexPath(lowering.messages_path, i), "content");
    KVGOV_ASSIGN_OR_RETURN(
        Content content, ReadContent(message["content"], content_path, i + 1 == messages->size()));
    for (prompts::PromptPart& part : content.parts) out.lint.parts.push_back(std::move(part));
    chat_messages.push_back({{"role", message["role"]}, {"content", content.joined}});
  }
  Ordered chat = {{"model", out.model}, {"messages", chat_messages}};
  Ordered fixed = {{"model", out.model}, {"messages", Masked(chat_messages)}};
  if (!chat_tools.empty()) {
    chat["tools"] = chat_tools;
    fixed["tools"] = fixed_tools;
  }
  out.chat_body = Dump(chat);
  out.fixed_chat_body = Dump(fixed);
  return std::move(out);
}

}  // namespace

Result<std::vector<LintedRequest>> DecodeLintRequestJson(std::string_view text,
                                                         const JsonLimits& limits) {
  // The bounded parser first (limits, duplicate keys); then an order-keeping
  // parse of the same, now checked, bytes: the lint needs key order.
  KVGOV_RETURN_IF_ERROR(codec_internal::ParseJson(text, limits).status());
  try {
    const Ordered body = Ordered::parse(text);
    if (!body.is_object()) return PathError("$", "want an object");
    std::string format;
    if (body.contains("format")) {
      if (!body["format"].is_string() ||
          (body["format"] != "openai" && body["format"] != "anthropic")) {
        return PathError("$.format", "want \"openai\" or \"anthropic\"");
      }
      format = body["format"].get<std::string>();
    }
    if (!body.contains("requests")) return PathError("$.requests", "missing required field");
    const Ordered& requests = body["requests"];
    if (!requests.is_array() || requests.empty()) {
      return PathError("$.requests", "want a non-empty array of chat or messages requests");
    }
    if (requests.size() > kMaxLintRequests) {
      return Status::ResourceExhausted("$.requests: " + std::to_string(requests.size()) +
                                       " requests, over the limit of " +
                                       std::to_string(kMaxLintRequests));
    }
    std::vector<LintedRequest> out;
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::string path = IndexPath("$.requests", i);
      if (!requests[i].is_object()) return PathError(path, "want an object");
      const bool anthropic = format.empty() ? LooksAnthropic(requests[i]) : format == "anthropic";
      KVGOV_ASSIGN_OR_RETURN(LintedRequest lowered, anthropic ? LowerAnthropic(requests[i], path)
                                                              : LowerOpenAI(requests[i], path));
      out.push_back(std::move(lowered));
    }
    return out;
  } catch (const nlohmann::json::exception& e) {
    return Status::Internal(std::string("lint codec: ") + e.what());
  }
}

std::string EncodeLintAnswerJson(const LintAnswer& answer) {
  nlohmann::json findings = nlohmann::json::array();
  for (const prompts::LintFinding& finding : answer.findings) {
    findings.push_back({{"rule", finding.rule},
                        {"request", finding.request},
                        {"where", finding.where},
                        {"detail", finding.detail}});
  }
  nlohmann::json requests = nlohmann::json::array();
  for (size_t i = 0; i < answer.prompt_tokens.size(); ++i) {
    requests.push_back(
        {{"format", i < answer.formats.size() ? answer.formats[i] : ""},
         {"prompt_tokens", answer.prompt_tokens[i]},
         {"stable_prefix_tokens",
          i < answer.stable_prefix_tokens.size() ? answer.stable_prefix_tokens[i] : 0}});
  }
  nlohmann::json out = {{"findings", std::move(findings)}, {"requests", std::move(requests)}};
  if (answer.shared_prefix_tokens) out["shared_prefix_tokens"] = *answer.shared_prefix_tokens;
  if (answer.shared_prefix_tokens_if_fixed) {
    out["shared_prefix_tokens_if_fixed"] = *answer.shared_prefix_tokens_if_fixed;
  }
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvgov
