#include "kvgov/codec/gateway_api.h"

#include <algorithm>

#include <map>
#include <new>
#include <vector>

#include <nlohmann/json.hpp>
#include <simdjson.h>

#include "codec/json_fields.h"
#include "kvgov/codec/messages_api.h"
#include "json/bounded_json.h"
#include "kvgov/core/engine_events.h"

namespace kvgov {
namespace {

using Json = nlohmann::json;

Status FieldError(std::string_view field, std::string_view problem) {
  return Status::InvalidArgument("$." + std::string(field) + ": " + std::string(problem));
}

// The chat fields vLLM's chat completions hand to the chat template, which
// the tokenizer must see too for the tokens to be the engine's.
// What the gateway writes into a handoff's legs (NixlPrefillBody,
// NixlDecodeBody, BootstrapBody).
constexpr std::string_view kHandoffFields[] = {"kv_transfer_params", "bootstrap_host",
                                               "bootstrap_port", "bootstrap_room"};

constexpr std::string_view kChatTemplateFields[] = {"add_generation_prompt",
                                                    "continue_final_message", "chat_template",
                                                    "chat_template_kwargs", "tools"};

// Where the structure walk is, for the path of an error: each open
// container's key (objects) or index (arrays).
struct PathFrame {
  std::string_view key;
  size_t index = 0;
  bool array = false;
};

std::string PathOf(const std::vector<PathFrame>& frames) {
  std::string path = "$";
  for (const PathFrame& frame : frames) {
    path = frame.array ? json_internal::IndexPath(path, frame.index)
                       : json_internal::ChildPath(path, frame.key);
  }
  return path;
}

// What the bounded nlohmann parser refuses while it parses, checked over
// the parsed document: an array over the item limit, a repeated key. The
// depth limit is simdjson's own (the parser's max_depth).
Status CheckStructure(const simdjson::dom::element& element, const JsonLimits& limits,
                      std::vector<PathFrame>& frames) {
  if (element.is_array()) {
    const simdjson::dom::array array = element.get_array().value_unsafe();
    frames.push_back({{}, 0, true});
    for (const simdjson::dom::element item : array) {
      if (frames.back().index >= limits.max_array_items) {
        frames.pop_back();
        return Status::ResourceExhausted(PathOf(frames) + ": array has more than " +
                                         std::to_string(limits.max_array_items) + " items");
      }
      KVGOV_RETURN_IF_ERROR(CheckStructure(item, limits, frames));
      ++frames.back().index;
    }
    frames.pop_back();
  } else if (element.is_object()) {
    const simdjson::dom::object object = element.get_object().value_unsafe();
    // Most objects have a handful of keys: a linear scan beats a set.
    std::vector<std::string_view> keys;
    frames.push_back({});
    for (const simdjson::dom::key_value_pair field : object) {
      frames.back().key = field.key;
      if (std::find(keys.begin(), keys.end(), field.key) != keys.end()) {
        return json_internal::PathError(PathOf(frames), "duplicate key");
      }
      keys.push_back(field.key);
      KVGOV_RETURN_IF_ERROR(CheckStructure(field.value, limits, frames));
    }
    frames.pop_back();
  }
  return Status::Ok();
}

// A JSON value as compact text, for the tokenize body.
std::string Minified(const simdjson::dom::element& element) { return simdjson::minify(element); }

Result<GatewayRequest> Decode(GatewayEndpoint endpoint, const simdjson::dom::element& root) {
  if (!root.is_object()) return Status::InvalidArgument("$: want a JSON object");
  const simdjson::dom::object json = root.get_object().value_unsafe();
  GatewayRequest request;
  simdjson::dom::element model;
  if (json["model"].get(model) != simdjson::SUCCESS) {
    return FieldError("model", "missing required field");
  }
  std::string_view model_name;
  if (model.get(model_name) != simdjson::SUCCESS || model_name.empty()) {
    return FieldError("model", "want a non-empty string");
  }
  request.model = std::string(model_name);
  if (json["cache_salt"].error() == simdjson::SUCCESS) {
    return FieldError("cache_salt",
                      "set by kvgov from the caller's tenant; a client may not send one");
  }
  // A client naming a handoff's peer could point a decode worker at any
  // host it likes, or at another tenant's pinned KV.
  for (const std::string_view field : kHandoffFields) {
    if (json[field].error() == simdjson::SUCCESS) {
      return FieldError(field,
                        "set by kvgov's gateway for a disaggregated handoff; a client "
                        "may not send it");
    }
  }
  if (simdjson::dom::element stream;
      json["stream"].get(stream) == simdjson::SUCCESS && !stream.is_null()) {
    if (stream.get(request.stream) != simdjson::SUCCESS) {
      return FieldError("stream", "want true or false");
    }
  }
  request.ask_usage = request.stream && json["stream_options"].error() != simdjson::SUCCESS;
  // {"model":...,...}: the members in key order, as nlohmann's objects
  // print them, so the body does not depend on the client's member order.
  std::map<std::string_view, std::string> tokenize = {{"model", Minified(model)}};
  if (endpoint == GatewayEndpoint::kCompletions) {
    simdjson::dom::element prompt;
    if (json["prompt"].get(prompt) != simdjson::SUCCESS) {
      return FieldError("prompt", "missing required field");
    }
    if (prompt.is_string()) {
      tokenize["prompt"] = Minified(prompt);
    } else if (prompt.is_array()) {
      const simdjson::dom::array ids = prompt.get_array().value_unsafe();
      const bool all_integers = std::all_of(
          ids.begin(), ids.end(),
          [](const simdjson::dom::element& id) { return id.is_int64() || id.is_uint64(); });
      if (ids.size() == 0) {
        return FieldError("prompt", "want a string or a non-empty array of token ids");
      }
      if (!all_integers) {
        return FieldError("prompt",
                          "a batch of prompts is not supported by the gateway; send one request "
                          "per prompt");
      }
      request.token_ids.reserve(ids.size());
      for (const simdjson::dom::element id : ids) {
        // An id past int64 reads as negative, as nlohmann's would: refused.
        request.token_ids.push_back(id.is_int64()
                                        ? id.get_int64().value_unsafe()
                                        : static_cast<int64_t>(id.get_uint64().value_unsafe()));
      }
      KVGOV_RETURN_IF_ERROR(CheckTokenIds(request.token_ids, "$.prompt"));
      return request;
    } else {
      return FieldError("prompt", "want a string or a non-empty array of token ids");
    }
  } else {
    simdjson::dom::element messages;
    if (json["messages"].get(messages) != simdjson::SUCCESS) {
      return FieldError("messages", "missing required field");
    }
    if (!messages.is_array() || messages.get_array().value_unsafe().size() == 0) {
      return FieldError("messages", "want a non-empty array");
    }
    tokenize["messages"] = Minified(messages);
    tokenize["add_generation_prompt"] = "true";
    for (const std::string_view field : kChatTemplateFields) {
      if (simdjson::dom::element value; json[field].get(value) == simdjson::SUCCESS) {
        tokenize[field] = Minified(value);
      }
    }
  }
  std::string body = "{";
  for (const auto& [key, value] : tokenize) {
    if (body.size() > 1) body += ',';
    body += '"';
    body += key;  // one of the names above: nothing to escape
    body += "\":";
    body += value;
  }
  request.tokenize_body = body + "}";
  return request;
}

}  // namespace

namespace {

// A JSON value's kind, in the words nlohmann's type_name() uses.
const char* TypeName(const simdjson::dom::element& element) {
  switch (element.type()) {
    case simdjson::dom::element_type::ARRAY:
      return "array";
    case simdjson::dom::element_type::OBJECT:
      return "object";
    case simdjson::dom::element_type::STRING:
      return "string";
    case simdjson::dom::element_type::BOOL:
      return "boolean";
    case simdjson::dom::element_type::NULL_VALUE:
      return "null";
    default:
      return "number";
  }
}

// `read(root)` over `body` parsed by simdjson under `limits`, with the
// bounded nlohmann parser's refusals (CheckStructure) and its messages.
template <typename T, typename Read>
Result<T> ReadParsed(std::string_view body, const JsonLimits& limits, Read read) {
  if (body.size() > limits.max_bytes) {
    return Status::ResourceExhausted("$: body is " + std::to_string(body.size()) +
                                     " bytes, over the limit of " +
                                     std::to_string(limits.max_bytes));
  }
  // simdjson reads ahead of the last byte: the body is copied into padded
  // memory, and the parser sized for it (a parser per call: its buffers
  // would otherwise stay at the largest body each thread saw).
  try {
    const simdjson::padded_string padded(body);
    simdjson::dom::parser parser;
    // simdjson counts the document itself as a level: max_depth + 1 lets
    // max_depth nested containers through, as the limit means.
    if (parser.allocate(std::max<size_t>(body.size(), 1), limits.max_depth + 1) !=
        simdjson::SUCCESS) {
      return Status::ResourceExhausted("$: no memory to parse a body of " +
                                       std::to_string(body.size()) + " bytes");
    }
    simdjson::dom::element root;
    const simdjson::error_code parsed = parser.parse(padded).get(root);
    if (parsed == simdjson::DEPTH_ERROR) {
      return Status::ResourceExhausted("$: nesting deeper than " +
                                       std::to_string(limits.max_depth));
    }
    if (parsed == simdjson::NUMBER_ERROR) {
      // simdjson keeps integers to 64 bits; nlohmann read larger ones as
      // doubles. No OpenAI field takes one.
      return json_internal::PathError(
          "$",
          "malformed JSON: a number that is not JSON, out of a double's range, or an "
          "integer that does not fit in 64 bits");
    }
    if (parsed != simdjson::SUCCESS) {
      return json_internal::PathError(
          "$", std::string("malformed JSON: ") + simdjson::error_message(parsed));
    }
    std::vector<PathFrame> frames;
    KVGOV_RETURN_IF_ERROR(CheckStructure(root, limits, frames));
    return read(root);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("$: no memory to parse a body of " +
                                     std::to_string(body.size()) + " bytes");
  }
}

}  // namespace

Result<GatewayRequest> DecodeGatewayRequestJson(GatewayEndpoint endpoint, std::string_view body,
                                                const JsonLimits& limits) {
  if (endpoint == GatewayEndpoint::kMessages) {
    // Tokenized as the chat completion the engine makes of it; a Messages
    // stream reports usage unasked (message_start, message_delta).
    KVGOV_ASSIGN_OR_RETURN(const std::string chat, MessagesChatRequestJson(body, limits));
    KVGOV_ASSIGN_OR_RETURN(
        GatewayRequest request,
        DecodeGatewayRequestJson(GatewayEndpoint::kChatCompletions, chat, limits));
    request.ask_usage = false;
    return request;
  }
  if (endpoint == GatewayEndpoint::kResponses) {
    // Tokenized as the chat completion the engine makes of it; a Responses
    // stream reports usage unasked (response.completed).
    KVGOV_ASSIGN_OR_RETURN(const std::string chat, ResponsesChatRequestJson(body, limits));
    KVGOV_ASSIGN_OR_RETURN(
        GatewayRequest request,
        DecodeGatewayRequestJson(GatewayEndpoint::kChatCompletions, chat, limits));
    request.ask_usage = false;
    const nlohmann::json sent = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (const auto previous = sent.find("previous_response_id");
        previous != sent.end() && !previous->is_null()) {
      if (!previous->is_string() || previous->get_ref<const std::string&>().empty()) {
        return FieldError("previous_response_id", "want a non-empty string");
      }
      request.previous_response_id = previous->get<std::string>();
    }
    return request;
  }
  return ReadParsed<GatewayRequest>(body, limits, [endpoint](const simdjson::dom::element& root) {
    return Decode(endpoint, root);
  });
}

namespace {

// `body` (a JSON object) with `members` ("k":v,...) first, every other byte
// unchanged.
std::string PrependMembers(std::string_view body, std::string_view members) {
  const size_t open = body.find('{');
  const size_t next = body.find_first_not_of(" \t\r\n", open + 1);
  const bool empty_object = next != std::string_view::npos && body[next] == '}';
  std::string out(body.substr(0, open + 1));
  out += members;
  if (!empty_object) out += ',';
  out += body.substr(open + 1);
  return out;
}

}  // namespace

std::string ForwardedBody(std::string_view body, std::string_view salt, bool ask_usage) {
  std::string members;
  if (!salt.empty()) members = "\"cache_salt\":" + codec_internal::Dump(Json(std::string(salt)));
  if (ask_usage) {
    members +=
        std::string(members.empty() ? "" : ",") + "\"stream_options\":{\"include_usage\":true}";
  }
  if (members.empty()) return std::string(body);
  return PrependMembers(body, members);
}

namespace {

// The forwarded body as an object, to edit a leg of a handoff. The body
// already passed DecodeGatewayRequestJson's limits.
Result<Json> ForwardedObject(std::string_view forwarded) {
  Json body = Json::parse(forwarded, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return Status::InvalidArgument("$: the forwarded body is not a JSON object");
  }
  return body;
}

}  // namespace

Result<std::string> NixlPrefillBody(std::string_view forwarded) {
  KVGOV_ASSIGN_OR_RETURN(Json body, ForwardedObject(forwarded));
  // vLLM's own proxies (toy_proxy_server.py, production-stack's orchestrated
  // mode): one token, in one body, and no lower bound it could not meet.
  body["max_tokens"] = 1;
  if (body.contains("max_completion_tokens")) body["max_completion_tokens"] = 1;
  body["stream"] = false;
  body.erase("stream_options");
  body.erase("min_tokens");
  body.erase("min_completion_tokens");
  body["kv_transfer_params"] = {{"do_remote_decode", true},    {"do_remote_prefill", false},
                                {"remote_engine_id", nullptr}, {"remote_block_ids", nullptr},
                                {"remote_host", nullptr},      {"remote_port", nullptr}};
  return codec_internal::Dump(body);
}

Result<std::optional<std::string>> DecodeKvTransferParams(std::string_view answer,
                                                          const JsonLimits& limits) {
  KVGOV_ASSIGN_OR_RETURN(Json parsed, codec_internal::ParseJson(answer, limits));
  if (!parsed.is_object()) {
    return Status::InvalidArgument("$: the prefill answer is not a JSON object");
  }
  auto params = parsed.find("kv_transfer_params");
  if (params == parsed.end() || params->is_null()) return std::optional<std::string>();
  if (!params->is_object()) {
    return Status::InvalidArgument("$.kv_transfer_params: want an object");
  }
  if (params->empty()) return std::optional<std::string>();
  return std::optional<std::string>(codec_internal::Dump(*params));
}

std::string NixlDecodeBody(std::string_view forwarded, std::string_view params) {
  return PrependMembers(forwarded, "\"kv_transfer_params\":" + std::string(params));
}

Result<std::string> BootstrapBody(std::string_view forwarded, std::string_view host, int port,
                                  uint64_t room) {
  KVGOV_ASSIGN_OR_RETURN(Json body, ForwardedObject(forwarded));
  // SGLang's router injects these three into the one body both legs get
  // (sgl-model-gateway pd_router.rs); the room fits in an i64.
  body["bootstrap_host"] = std::string(host);
  body["bootstrap_port"] = port;
  body["bootstrap_room"] = room & static_cast<uint64_t>(INT64_MAX);
  return codec_internal::Dump(body);
}

namespace {

// The usage of an answer or an SSE event's data (an object).
std::optional<EngineUsage> UsageOf(const simdjson::dom::object& answer) {
  simdjson::dom::object usage;
  if (answer["usage"].get(usage) != simdjson::SUCCESS) return std::nullopt;
  EngineUsage out;
  if (int64_t prompt = 0; usage["prompt_tokens"].get(prompt) == simdjson::SUCCESS) {
    out.prompt_tokens = prompt;
  }
  if (simdjson::dom::object details;
      usage["prompt_tokens_details"].get(details) == simdjson::SUCCESS) {
    if (int64_t cached = 0; details["cached_tokens"].get(cached) == simdjson::SUCCESS) {
      out.cached_tokens = cached;
    }
  }
  simdjson::dom::element choices;
  if (answer["choices"].get(choices) != simdjson::SUCCESS) {
    out.usage_only = true;
  } else if (simdjson::dom::array list; choices.get(list) == simdjson::SUCCESS) {
    out.usage_only = list.size() == 0;
  }
  return out;
}

}  // namespace

std::optional<EngineUsage> DecodeEngineUsage(std::string_view json, const JsonLimits& limits) {
  Result<std::optional<EngineUsage>> usage = DecodeWholeAnswer(json, limits);
  return usage.ok() ? *usage : std::nullopt;
}

JsonLimits UsageLimits() {
  JsonLimits limits;
  limits.max_bytes = size_t{64} << 20;
  return limits;
}

Result<std::optional<EngineUsage>> DecodeWholeAnswer(std::string_view json,
                                                     const JsonLimits& limits) {
  return ReadParsed<std::optional<EngineUsage>>(
      json, limits, [](const simdjson::dom::element& root) -> Result<std::optional<EngineUsage>> {
        simdjson::dom::object answer;
        if (root.get(answer) != simdjson::SUCCESS) {
          return Status::InvalidArgument(std::string("$: the answer is a JSON ") + TypeName(root) +
                                         ", not an object");
        }
        return UsageOf(answer);
      });
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
  return ReadParsed<std::vector<int64_t>>(
      body, limits, [](const simdjson::dom::element& root) -> Result<std::vector<int64_t>> {
        simdjson::dom::array ids;
        if (root["tokens"].get(ids) != simdjson::SUCCESS) {
          return Status::InvalidArgument("tokenize answer: want an object with a \"tokens\" array");
        }
        std::vector<int64_t> tokens;
        tokens.reserve(ids.size());
        for (const simdjson::dom::element id : ids) {
          int64_t value = 0;
          if (!id.is_int64() || id.get(value) != simdjson::SUCCESS) {
            return Status::InvalidArgument("tokenize answer: $.tokens: want integers");
          }
          tokens.push_back(value);
        }
        KVGOV_RETURN_IF_ERROR(CheckTokenIds(tokens, "tokenize answer: $.tokens"));
        return tokens;
      });
}

Result<std::string> DecodeDetokenizeAnswerJson(std::string_view body, const JsonLimits& limits) {
  KVGOV_ASSIGN_OR_RETURN(Json json, codec_internal::ParseJson(body, limits));
  for (const char* field : {"prompt", "text"}) {
    if (json.is_object() && json.contains(field) && json[field].is_string()) {
      return json[field].get<std::string>();
    }
  }
  return Status::InvalidArgument(
      "detokenize answer: want an object with a \"prompt\" (or \"text\") string");
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
