#include "kvgov/codec/messages_api.h"

#include <nlohmann/json.hpp>

#include "codec/json_fields.h"
#include "json/bounded_json.h"

namespace kvgov {
namespace {

using Ordered = nlohmann::ordered_json;
using json_internal::ChildPath;
using json_internal::IndexPath;
using json_internal::PathError;

// Anthropic's billing header block: vLLM drops it ("a per-request hash
// that defeats prefix caching").
constexpr std::string_view kBillingHeader = "x-anthropic-billing-header";

// A scalar as Python's json.dumps writes it (ensure_ascii, as nlohmann's).
std::string PythonScalar(const Ordered& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
}

// json.dumps(value) with Python's defaults: ", " and ": " separators, keys
// in the order sent, non-ASCII escaped. vLLM writes a tool_use block's input
// this way into the tool call's arguments, which the chat template renders.
std::string PythonDumps(const Ordered& value) {
  if (value.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += PythonScalar(Ordered(it.key())) + ": " + PythonDumps(it.value());
    }
    return out + "}";
  }
  if (value.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < value.size(); ++i) {
      if (i > 0) out += ", ";
      out += PythonDumps(value[i]);
    }
    return out + "]";
  }
  return PythonScalar(value);
}

bool IsType(const Ordered& block, std::string_view type) {
  return block.is_object() && block.contains("type") && block["type"].is_string() &&
         block["type"].get_ref<const std::string&>() == type;
}

Result<std::string> TextOf(const Ordered& block, const std::string& path) {
  if (!block.contains("text") || !block["text"].is_string()) {
    return PathError(ChildPath(path, "text"), "want a string");
  }
  return block["text"].get<std::string>();
}

// A text or image block as an OpenAI content part.
Result<Ordered> ContentPart(const Ordered& block, const std::string& path) {
  if (IsType(block, "text")) {
    KVGOV_ASSIGN_OR_RETURN(std::string text, TextOf(block, path));
    return Ordered{{"type", "text"}, {"text", std::move(text)}};
  }
  const Ordered* source = block.contains("source") ? &block["source"] : nullptr;
  if (source == nullptr || !source->is_object()) {
    return PathError(ChildPath(path, "source"), "want an object");
  }
  std::string url;
  if (IsType(*source, "base64")) {
    if (!source->contains("data") || !(*source)["data"].is_string()) {
      return PathError(ChildPath(ChildPath(path, "source"), "data"), "want a string");
    }
    const std::string media = source->value("media_type", std::string("image/png"));
    url = "data:" + media + ";base64," + (*source)["data"].get<std::string>();
  } else if (source->contains("url") && (*source)["url"].is_string()) {
    url = (*source)["url"].get<std::string>();
  } else {
    return PathError(ChildPath(path, "source"), "want a base64 or url source");
  }
  return Ordered{{"type", "image_url"}, {"image_url", {{"url", std::move(url)}}}};
}

// Content parts as a message's content: one text part as its string.
Ordered ContentOf(Ordered parts) {
  if (parts.size() == 1 && parts[0]["type"] == "text") return parts[0]["text"];
  return parts;
}

// The text of a tool_result's content: a string, or text blocks joined
// with "\n".
Result<std::string> ToolResultText(const Ordered& block, const std::string& path) {
  if (!block.contains("content") || block["content"].is_null()) return std::string();
  const Ordered& content = block["content"];
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return PathError(ChildPath(path, "content"), "want a string or content blocks");
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    if (!IsType(content[i], "text")) continue;
    KVGOV_ASSIGN_OR_RETURN(std::string piece,
                           TextOf(content[i], IndexPath(ChildPath(path, "content"), i)));
    if (!text.empty()) text += "\n";
    text += piece;
  }
  return text;
}

// One Anthropic message as the chat messages vLLM makes of it.
Status LowerMessage(const Ordered& message, const std::string& path, Ordered& chat) {
  if (!message.is_object() || !message.contains("role") || !message["role"].is_string()) {
    return PathError(ChildPath(path, "role"), "want \"user\" or \"assistant\"");
  }
  const std::string role = message["role"].get<std::string>();
  if (role != "user" && role != "assistant") {
    return PathError(ChildPath(path, "role"), "want \"user\" or \"assistant\"");
  }
  if (!message.contains("content")) return PathError(ChildPath(path, "content"), "missing");
  const Ordered& content = message["content"];
  const std::string content_path = ChildPath(path, "content");
  if (content.is_string()) {
    chat.push_back({{"role", role}, {"content", content}});
    return Status::Ok();
  }
  if (!content.is_array()) return PathError(content_path, "want a string or content blocks");
  Ordered parts = Ordered::array();
  Ordered tool_calls = Ordered::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const Ordered& block = content[i];
    const std::string block_path = IndexPath(content_path, i);
    if (!block.is_object() || !block.contains("type") || !block["type"].is_string()) {
      return PathError(ChildPath(block_path, "type"), "want a string");
    }
    if (IsType(block, "text") || IsType(block, "image")) {
      KVGOV_ASSIGN_OR_RETURN(Ordered part, ContentPart(block, block_path));
      parts.push_back(std::move(part));
    } else if (IsType(block, "tool_use")) {
      if (!block.contains("id") || !block["id"].is_string() || !block.contains("name") ||
          !block["name"].is_string()) {
        return PathError(block_path, "a tool_use block wants a string id and name");
      }
      const Ordered input = block.contains("input") ? block["input"] : Ordered::object();
      tool_calls.push_back(
          {{"id", block["id"]},
           {"type", "function"},
           {"function", {{"name", block["name"]}, {"arguments", PythonDumps(input)}}}});
    } else if (IsType(block, "tool_result")) {
      if (role == "assistant") {
        KVGOV_ASSIGN_OR_RETURN(std::string text, ToolResultText(block, block_path));
        parts.push_back({{"type", "text"}, {"text", "Tool result: " + text}});
        continue;
      }
      if (!block.contains("tool_use_id") || !block["tool_use_id"].is_string()) {
        return PathError(ChildPath(block_path, "tool_use_id"), "want a string");
      }
      KVGOV_ASSIGN_OR_RETURN(std::string text, ToolResultText(block, block_path));
      // Before the user's own content, as vLLM emits them.
      chat.push_back({{"role", "tool"}, {"tool_call_id", block["tool_use_id"]}, {"content", text}});
    }
    // thinking, redacted_thinking and unknown blocks: nothing an engine
    // renders from a Messages request's history.
  }
  if (role == "assistant") {
    Ordered turn = {{"role", "assistant"}};
    turn["content"] = parts.empty() ? Ordered(nullptr) : ContentOf(parts);
    if (!tool_calls.empty()) turn["tool_calls"] = tool_calls;
    if (!parts.empty() || !tool_calls.empty()) chat.push_back(std::move(turn));
  } else if (!parts.empty()) {
    chat.push_back({{"role", "user"}, {"content", ContentOf(parts)}});
  }
  return Status::Ok();
}

Result<Ordered> LowerRequest(const Ordered& request) {
  if (!request.is_object()) return PathError("$", "want a JSON object");
  Ordered chat = Ordered::object();
  if (!request.contains("model") || !request["model"].is_string()) {
    return PathError("$.model", "want a non-empty string");
  }
  chat["model"] = request["model"];
  Ordered messages = Ordered::array();
  if (request.contains("system") && !request["system"].is_null()) {
    const Ordered& system = request["system"];
    std::string text;
    if (system.is_string()) {
      text = system.get<std::string>();
    } else if (system.is_array()) {
      for (size_t i = 0; i < system.size(); ++i) {
        KVGOV_ASSIGN_OR_RETURN(std::string piece, TextOf(system[i], IndexPath("$.system", i)));
        if (std::string_view(piece).starts_with(kBillingHeader)) continue;
        text += piece;
      }
    } else {
      return PathError("$.system", "want a string or text blocks");
    }
    messages.push_back({{"role", "system"}, {"content", text}});
  }
  if (!request.contains("messages") || !request["messages"].is_array() ||
      request["messages"].empty()) {
    return PathError("$.messages", "want a non-empty array");
  }
  for (size_t i = 0; i < request["messages"].size(); ++i) {
    KVGOV_RETURN_IF_ERROR(
        LowerMessage(request["messages"][i], IndexPath("$.messages", i), messages));
  }
  chat["messages"] = std::move(messages);
  if (request.contains("tools") && !request["tools"].is_null()) {
    const Ordered& tools = request["tools"];
    if (!tools.is_array()) return PathError("$.tools", "want an array");
    Ordered functions = Ordered::array();
    for (size_t i = 0; i < tools.size(); ++i) {
      const Ordered& tool = tools[i];
      if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string()) {
        return PathError(ChildPath(IndexPath("$.tools", i), "name"), "want a string");
      }
      Ordered function = {{"name", tool["name"]}};
      if (tool.contains("description")) function["description"] = tool["description"];
      Ordered schema = tool.contains("input_schema") ? tool["input_schema"] : Ordered::object();
      if (schema.is_object() && !schema.contains("type")) schema["type"] = "object";
      function["parameters"] = std::move(schema);
      functions.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    chat["tools"] = std::move(functions);
    if (!request.contains("tool_choice")) chat["tool_choice"] = "auto";
  }
  if (request.contains("tool_choice") && request["tool_choice"].is_object()) {
    const Ordered& choice = request["tool_choice"];
    if (IsType(choice, "auto")) chat["tool_choice"] = "auto";
    if (IsType(choice, "any")) chat["tool_choice"] = "required";
    if (IsType(choice, "none")) chat["tool_choice"] = "none";
    if (IsType(choice, "tool") && choice.contains("name")) {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", choice["name"]}}}};
    }
  }
  if (request.contains("max_tokens")) chat["max_tokens"] = request["max_tokens"];
  if (request.contains("stop_sequences")) chat["stop"] = request["stop_sequences"];
  for (const char* field : {"temperature", "top_p", "top_k"}) {
    if (request.contains(field)) chat[field] = request[field];
  }
  if (request.contains("stream")) chat["stream"] = request["stream"];
  // Carried over as vLLM does (its Messages request has cache_salt and
  // kv_transfer_params), so the gateway refuses a client's own by name.
  for (const char* field :
       {"cache_salt", "kv_transfer_params", "bootstrap_host", "bootstrap_port", "bootstrap_room"}) {
    if (request.contains(field)) chat[field] = request[field];
  }
  return chat;
}

// The object at `json`'s top level, parsed under `limits`.
Result<Ordered> ParseObject(std::string_view json, const JsonLimits& limits) {
  // The bounded parser first (limits, duplicate keys); then an order-keeping
  // parse of the same, now checked, bytes.
  KVGOV_RETURN_IF_ERROR(codec_internal::ParseJson(json, limits).status());
  try {
    return Ordered::parse(json);
  } catch (const nlohmann::json::exception& e) {
    return PathError("$", std::string("malformed JSON: ") + e.what());
  }
}

std::optional<EngineUsage> UsageOf(const Ordered& usage) {
  if (!usage.is_object() || !usage.contains("input_tokens")) return std::nullopt;
  EngineUsage out;
  auto count = [&usage](const char* field) -> int64_t {
    return usage.contains(field) && usage[field].is_number_integer() ? usage[field].get<int64_t>()
                                                                     : 0;
  };
  out.cached_tokens = count("cache_read_input_tokens");
  out.prompt_tokens =
      count("input_tokens") + out.cached_tokens + count("cache_creation_input_tokens");
  return out;
}

// A Responses input item's content: a string, or parts (input_text,
// output_text, input_image) as chat content.
Result<Ordered> ResponsesContent(const Ordered& content, const std::string& path) {
  if (content.is_string()) return content;
  if (!content.is_array()) return PathError(path, "want a string or content parts");
  Ordered parts = Ordered::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const Ordered& part = content[i];
    const std::string part_path = IndexPath(path, i);
    if (IsType(part, "input_text") || IsType(part, "output_text") || IsType(part, "text")) {
      KVGOV_ASSIGN_OR_RETURN(std::string text, TextOf(part, part_path));
      parts.push_back({{"type", "text"}, {"text", std::move(text)}});
    } else if (IsType(part, "input_image")) {
      if (!part.contains("image_url") || !part["image_url"].is_string()) {
        return PathError(ChildPath(part_path, "image_url"), "want a string");
      }
      parts.push_back({{"type", "image_url"}, {"image_url", {{"url", part["image_url"]}}}});
    } else {
      return PathError(ChildPath(part_path, "type"), "want input_text, output_text or input_image");
    }
  }
  return ContentOf(std::move(parts));
}

Result<Ordered> LowerResponsesRequest(const Ordered& request) {
  if (!request.is_object()) return PathError("$", "want a JSON object");
  if (!request.contains("model") || !request["model"].is_string()) {
    return PathError("$.model", "want a non-empty string");
  }
  Ordered chat = {{"model", request["model"]}};
  Ordered messages = Ordered::array();
  if (request.contains("instructions") && request["instructions"].is_string()) {
    messages.push_back({{"role", "system"}, {"content", request["instructions"]}});
  }
  if (!request.contains("input")) return PathError("$.input", "missing required field");
  const Ordered& input = request["input"];
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
  } else if (input.is_array()) {
    for (size_t i = 0; i < input.size(); ++i) {
      const Ordered& item = input[i];
      const std::string path = IndexPath("$.input", i);
      if (!item.is_object()) return PathError(path, "want an object");
      if (IsType(item, "function_call")) {
        if (!item.contains("call_id") || !item.contains("name") || !item["name"].is_string()) {
          return PathError(path, "a function_call wants call_id and name");
        }
        const Ordered arguments = item.contains("arguments") ? item["arguments"] : Ordered("{}");
        messages.push_back(
            {{"role", "assistant"},
             {"content", nullptr},
             {"tool_calls",
              Ordered::array(
                  {{{"id", item["call_id"]},
                    {"type", "function"},
                    {"function", {{"name", item["name"]}, {"arguments", arguments}}}}})}});
      } else if (IsType(item, "function_call_output")) {
        if (!item.contains("call_id")) return PathError(ChildPath(path, "call_id"), "missing");
        const Ordered output = item.contains("output") ? item["output"] : Ordered("");
        messages.push_back({{"role", "tool"},
                            {"tool_call_id", item["call_id"]},
                            {"content", output.is_string() ? output : Ordered(output.dump())}});
      } else {
        if (!item.contains("role") || !item["role"].is_string()) {
          return PathError(ChildPath(path, "role"), "want a string");
        }
        std::string role = item["role"].get<std::string>();
        if (role == "developer") role = "system";
        if (!item.contains("content")) return PathError(ChildPath(path, "content"), "missing");
        KVGOV_ASSIGN_OR_RETURN(Ordered content,
                               ResponsesContent(item["content"], ChildPath(path, "content")));
        messages.push_back({{"role", role}, {"content", std::move(content)}});
      }
    }
  } else {
    return PathError("$.input", "want a string or an array of items");
  }
  if (messages.empty()) return PathError("$.input", "want at least one item");
  chat["messages"] = std::move(messages);
  if (request.contains("tools") && request["tools"].is_array()) {
    Ordered functions = Ordered::array();
    for (size_t i = 0; i < request["tools"].size(); ++i) {
      const Ordered& tool = request["tools"][i];
      if (!IsType(tool, "function")) continue;  // built-in tools render nothing here
      if (!tool.contains("name") || !tool["name"].is_string()) {
        return PathError(ChildPath(IndexPath("$.tools", i), "name"), "want a string");
      }
      Ordered function = {{"name", tool["name"]}};
      if (tool.contains("description")) function["description"] = tool["description"];
      if (tool.contains("parameters")) function["parameters"] = tool["parameters"];
      functions.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    if (!functions.empty()) chat["tools"] = std::move(functions);
  }
  if (request.contains("max_output_tokens")) chat["max_tokens"] = request["max_output_tokens"];
  for (const char* field : {"temperature", "top_p", "stream", "cache_salt", "kv_transfer_params",
                            "bootstrap_host", "bootstrap_port", "bootstrap_room"}) {
    if (request.contains(field)) chat[field] = request[field];
  }
  return chat;
}

}  // namespace

Result<std::string> ResponsesChatRequestJson(std::string_view body, const JsonLimits& limits) {
  KVGOV_ASSIGN_OR_RETURN(const Ordered request, ParseObject(body, limits));
  KVGOV_ASSIGN_OR_RETURN(const Ordered chat, LowerResponsesRequest(request));
  return chat.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<EngineUsage> DecodeResponsesUsage(std::string_view json, const JsonLimits& limits) {
  Result<Ordered> parsed = ParseObject(json, limits);
  if (!parsed.ok() || !parsed->is_object()) return std::nullopt;
  const Ordered* response = &*parsed;
  if (IsType(*parsed, "response.completed") || IsType(*parsed, "response.incomplete")) {
    if (!parsed->contains("response")) return std::nullopt;
    response = &(*parsed)["response"];
  }
  if (!response->is_object() || !response->contains("usage") || !(*response)["usage"].is_object()) {
    return std::nullopt;
  }
  const Ordered& usage = (*response)["usage"];
  if (!usage.contains("input_tokens") || !usage["input_tokens"].is_number_integer()) {
    return std::nullopt;
  }
  EngineUsage out;
  out.prompt_tokens = usage["input_tokens"].get<int64_t>();
  if (usage.contains("input_tokens_details") && usage["input_tokens_details"].is_object()) {
    const Ordered& details = usage["input_tokens_details"];
    if (details.contains("cached_tokens") && details["cached_tokens"].is_number_integer()) {
      out.cached_tokens = details["cached_tokens"].get<int64_t>();
    }
  }
  return out;
}

std::string DecodeResponseId(std::string_view json, const JsonLimits& limits) {
  Result<Ordered> parsed = ParseObject(json, limits);
  if (!parsed.ok() || !parsed->is_object()) return "";
  const Ordered* response = &*parsed;
  if (IsType(*parsed, "response.created") && parsed->contains("response")) {
    response = &(*parsed)["response"];
  } else if (!parsed->contains("object") || (*parsed)["object"] != "response") {
    return "";  // another event, or not a response
  }
  if (!response->is_object() || !response->contains("id") || !(*response)["id"].is_string()) {
    return "";
  }
  return (*response)["id"].get<std::string>();
}

Result<std::string> MessagesChatRequestJson(std::string_view body, const JsonLimits& limits) {
  KVGOV_ASSIGN_OR_RETURN(const Ordered request, ParseObject(body, limits));
  KVGOV_ASSIGN_OR_RETURN(const Ordered chat, LowerRequest(request));
  return chat.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<EngineUsage> DecodeMessagesUsage(std::string_view json, const JsonLimits& limits) {
  Result<Ordered> event = ParseObject(json, limits);
  if (!event.ok() || !event->is_object()) return std::nullopt;
  if (IsType(*event, "message_start") && event->contains("message") &&
      (*event)["message"].is_object() && (*event)["message"].contains("usage")) {
    return UsageOf((*event)["message"]["usage"]);
  }
  if (event->contains("usage")) return UsageOf((*event)["usage"]);
  return std::nullopt;
}

Result<std::optional<EngineUsage>> DecodeWholeMessagesAnswer(std::string_view json,
                                                             const JsonLimits& limits) {
  KVGOV_ASSIGN_OR_RETURN(const Ordered answer, ParseObject(json, limits));
  if (!answer.is_object()) {
    return Status::InvalidArgument(std::string("$: the answer is a JSON ") + answer.type_name() +
                                   ", not an object");
  }
  if (!answer.contains("usage")) return std::optional<EngineUsage>();
  return UsageOf(answer["usage"]);
}

std::string_view MessagesErrorType(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 529:
      return "overloaded_error";
    default:
      return "api_error";
  }
}

std::string EncodeMessagesErrorJson(int status, std::string_view message) {
  return Ordered{{"type", "error"},
                 {"error", {{"type", MessagesErrorType(status)}, {"message", message}}}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string EncodeMessagesErrorEvent(std::string_view message) {
  return "event: error\ndata: " + EncodeMessagesErrorJson(500, message) + "\n\n";
}

}  // namespace kvgov
