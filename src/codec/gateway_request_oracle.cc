#include "codec/gateway_request_oracle.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "codec/json_fields.h"
#include "kvgov/core/engine_events.h"

namespace kvgov::codec_testing {
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

Result<GatewayRequest> DecodeGatewayRequestWithNlohmann(GatewayEndpoint endpoint,
                                                        std::string_view body,
                                                        const JsonLimits& limits) {
  KVGOV_ASSIGN_OR_RETURN(Json json, codec_internal::ParseJson(body, limits));
  return Decode(endpoint, json);
}

bool SameDecodedRequest(const GatewayRequest& a, const GatewayRequest& b) {
  const auto tokenize = [](const std::string& body) {
    return body.empty() ? Json() : Json::parse(body, nullptr, /*allow_exceptions=*/false);
  };
  return a.model == b.model && a.stream == b.stream && a.ask_usage == b.ask_usage &&
         a.token_ids == b.token_ids && tokenize(a.tokenize_body) == tokenize(b.tokenize_body);
}

}  // namespace kvgov::codec_testing
