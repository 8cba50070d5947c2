#include "kvgov/codec/gateway_api.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "codec/json_fields.h"
#include "kvgov/core/engine_events.h"

namespace kvgov {
namespace {

using Json = nlohmann::json;

Status FieldError(std::string_view field, std::string_view problem) {
  return Status::InvalidArgument("$." + std::string(field) + ": " + std::string(problem));
}

// The chat fields vLLM's chat completions hand to the chat template, which
// the tokenizer must see too for the tokens to be the engine's.
constexpr const char* kChatTemplateFields[] = {"add_generation_prompt", "continue_final_message",
                                               "chat_template", "chat_template_kwargs", "tools"};

Result<GatewayRequest> Decode(GatewayEndpoint endpoint, const Json& json) {
  if (!json.is_object()) return Status::InvalidArgument("$: want a JSON object");
  GatewayRequest request;
  auto model = json.find("model");
  if (model == json.end()) return FieldError("model", "missing required field");
  if (!model->is_string() || model->get_ref<const std::string&>().empty()) {
    return FieldError("model", "want a non-empty string");
  }
  request.model = model->get<std::string>();
  if (json.contains("cache_salt")) {
    return FieldError("cache_salt",
                      "set by kvgov from the caller's tenant; a client may not send one");
  }
  if (auto stream = json.find("stream"); stream != json.end() && !stream->is_null()) {
    if (!stream->is_boolean()) return FieldError("stream", "want true or false");
    request.stream = stream->get<bool>();
  }
  request.ask_usage = request.stream && !json.contains("stream_options");
  Json tokenize = {{"model", request.model}};
  if (endpoint == GatewayEndpoint::kCompletions) {
    auto prompt = json.find("prompt");
    if (prompt == json.end()) return FieldError("prompt", "missing required field");
    if (prompt->is_string()) {
      tokenize["prompt"] = *prompt;
    } else if (prompt->is_array() && !prompt->empty() &&
               std::all_of(prompt->begin(), prompt->end(),
                           [](const Json& id) { return id.is_number_integer(); })) {
      for (const Json& id : *prompt) request.token_ids.push_back(id.get<int64_t>());
      KVGOV_RETURN_IF_ERROR(CheckTokenIds(request.token_ids, "$.prompt"));
      return request;
    } else if (prompt->is_array() && !prompt->empty()) {
      return FieldError("prompt",
                        "a batch of prompts is not supported by the gateway; send one request "
                        "per prompt");
    } else {
      return FieldError("prompt", "want a string or a non-empty array of token ids");
    }
  } else {
    auto messages = json.find("messages");
    if (messages == json.end()) return FieldError("messages", "missing required field");
    if (!messages->is_array() || messages->empty()) {
      return FieldError("messages", "want a non-empty array");
    }
    tokenize["messages"] = *messages;
    tokenize["add_generation_prompt"] = true;
    for (const char* field : kChatTemplateFields) {
      if (auto it = json.find(field); it != json.end()) tokenize[field] = *it;
    }
  }
  request.tokenize_body = codec_internal::Dump(tokenize);
  return request;
}

}  // namespace

Result<GatewayRequest> DecodeGatewayRequestJson(GatewayEndpoint endpoint, std::string_view body,
                                                const JsonLimits& limits) {
  KVGOV_ASSIGN_OR_RETURN(Json json, codec_internal::ParseJson(body, limits));
  return Decode(endpoint, json);
}

std::string ForwardedBody(std::string_view body, std::string_view salt, bool ask_usage) {
  std::string members;
  if (!salt.empty()) members = "\"cache_salt\":" + codec_internal::Dump(Json(std::string(salt)));
  if (ask_usage) {
    members += std::string(members.empty() ? "" : ",") +
               "\"stream_options\":{\"include_usage\":true}";
  }
  if (members.empty()) return std::string(body);
  const size_t open = body.find('{');
  const size_t next = body.find_first_not_of(" \t\r\n", open + 1);
  const bool empty_object = next != std::string_view::npos && body[next] == '}';
  std::string out(body.substr(0, open + 1));
  out += members;
  if (!empty_object) out += ',';
  out += body.substr(open + 1);
  return out;
}

std::optional<EngineUsage> DecodeEngineUsage(std::string_view json, const JsonLimits& limits) {
  Result<Json> parsed = codec_internal::ParseJson(json, limits);
  if (!parsed.ok() || !parsed->is_object()) return std::nullopt;
  auto usage = parsed->find("usage");
  if (usage == parsed->end() || !usage->is_object()) return std::nullopt;
  EngineUsage out;
  if (auto prompt = usage->find("prompt_tokens");
      prompt != usage->end() && prompt->is_number_integer()) {
    out.prompt_tokens = prompt->get<int64_t>();
  }
  if (auto details = usage->find("prompt_tokens_details");
      details != usage->end() && details->is_object()) {
    if (auto cached = details->find("cached_tokens");
        cached != details->end() && cached->is_number_integer()) {
      out.cached_tokens = cached->get<int64_t>();
    }
  }
  auto choices = parsed->find("choices");
  out.usage_only = choices == parsed->end() || (choices->is_array() && choices->empty());
  return out;
}

std::vector<std::string> SseSplitter::Push(std::string_view bytes) {
  buffer_ += bytes;
  std::vector<std::string> events;
  size_t start = 0;
  for (size_t end; (end = buffer_.find("\n\n", start)) != std::string::npos; start = end + 2) {
    events.push_back(buffer_.substr(start, end + 2 - start));
  }
  buffer_.erase(0, start);
  return events;
}

std::string_view SseSplitter::Data(std::string_view event) {
  const size_t at = event.rfind("data:", 0) == 0 ? 0 : event.find("\ndata:");
  if (at == std::string_view::npos) return "";
  std::string_view data = event.substr(at == 0 ? 5 : at + 6);
  data = data.substr(0, data.find('\n'));
  while (!data.empty() && data.front() == ' ') data.remove_prefix(1);
  return data;
}

Result<std::vector<int64_t>> DecodeTokenizeAnswerJson(std::string_view body,
                                                      const JsonLimits& limits) {
  KVGOV_ASSIGN_OR_RETURN(Json json, codec_internal::ParseJson(body, limits));
  if (!json.is_object() || !json.contains("tokens") || !json["tokens"].is_array()) {
    return Status::InvalidArgument("tokenize answer: want an object with a \"tokens\" array");
  }
  std::vector<int64_t> tokens;
  tokens.reserve(json["tokens"].size());
  for (const Json& id : json["tokens"]) {
    if (!id.is_number_integer()) {
      return Status::InvalidArgument("tokenize answer: $.tokens: want integers");
    }
    tokens.push_back(id.get<int64_t>());
  }
  KVGOV_RETURN_IF_ERROR(CheckTokenIds(tokens, "tokenize answer: $.tokens"));
  return tokens;
}

std::string EncodeOpenAIErrorJson(std::string_view message, std::string_view type,
                                  std::string_view param, std::string_view code) {
  return codec_internal::Dump(
      {{"error",
        {{"message", message},
         {"type", type},
         {"param", param.empty() ? Json(nullptr) : Json(std::string(param))},
         {"code", code}}}});
}

std::string EncodeOpenAIErrorEvent(std::string_view message) {
  return "data: " + EncodeOpenAIErrorJson(message, "upstream_error", "", "upstream_failed") +
         "\n\ndata: [DONE]\n\n";
}

std::string EncodeModelsJson(std::span<const std::string> models) {
  Json data = Json::array();
  for (const std::string& model : models) {
    data.push_back({{"id", model}, {"object", "model"}, {"owned_by", "kvgov"}});
  }
  return codec_internal::Dump({{"object", "list"}, {"data", std::move(data)}});
}

}  // namespace kvgov
