#pragma once

// The Anthropic Messages wire of the gateway (docs/formats/gateway.md,
// "Anthropic Messages"): the chat completion an engine makes of a Messages
// request, the usage it reports, and errors in Anthropic's shape.

#include <optional>
#include <string>
#include <string_view>

#include "kvgov/codec/gateway_api.h"
#include "kvgov/codec/json_codec.h"
#include "kvgov/core/status.h"

namespace kvgov {

/// The OpenAI chat completion request vLLM makes of an Anthropic Messages
/// request before it applies the chat template (its
/// to_chat_completion_request): `system` (a string, or text blocks joined
/// with no separator, blocks of Anthropic's billing header left out) as the
/// first system message; a user's tool_result blocks as tool messages
/// before the user's own content; an assistant's tool_use blocks as its
/// tool_calls, their input as Python's json.dumps writes it; text and
/// image blocks as content parts (one text part as a plain string);
/// thinking blocks left out; `tools` as functions; `tool_choice`,
/// `max_tokens`, `stop_sequences`, `temperature`, `top_p`, `top_k` and
/// `stream` carried over. `cache_control` and `metadata` change nothing an
/// engine tokenizes and are left out. Parsed under `limits`;
/// InvalidArgument names the field as "$.field: ...".
Result<std::string> MessagesChatRequestJson(std::string_view body, const JsonLimits& limits);

/// The chat completion vLLM and SGLang make of an OpenAI Responses request:
/// `instructions` as the system message; `input` a string (one user
/// message) or items: messages (content a string or input_text/output_text
/// parts, input_image as an image part), function_call items as the
/// assistant's tool_calls, function_call_output items as tool messages;
/// function `tools` as chat tools; `max_output_tokens` as max_tokens;
/// `stream`. The conversation of `previous_response_id` is the engine's to
/// prepend: it is not in the result. Errors as MessagesChatRequestJson.
Result<std::string> ResponsesChatRequestJson(std::string_view body, const JsonLimits& limits);

/// A Responses answer's usage: the whole response's `usage`, or a stream's
/// `response.completed` event's `response.usage`: input_tokens (the whole
/// prompt) and input_tokens_details.cached_tokens. Nothing for anything
/// else.
std::optional<EngineUsage> DecodeResponsesUsage(std::string_view json, const JsonLimits& limits);

/// The response id a Responses answer carries: the whole response's `id`,
/// or a stream's `response.created` event's `response.id`; "" otherwise.
std::string DecodeResponseId(std::string_view json, const JsonLimits& limits);

/// The usage an Anthropic answer reports: the whole message's `usage`, a
/// stream's `message_start` event's `message.usage` or a `message_delta`
/// event's `usage`. The prompt is input_tokens + cache_read_input_tokens +
/// cache_creation_input_tokens (Anthropic counts the cached part apart);
/// cached_tokens is cache_read_input_tokens. Nothing for anything else.
std::optional<EngineUsage> DecodeMessagesUsage(std::string_view json, const JsonLimits& limits);

/// A whole Messages answer's usage: InvalidArgument when the answer is not
/// a JSON object, nothing when it has no usage.
Result<std::optional<EngineUsage>> DecodeWholeMessagesAnswer(std::string_view json,
                                                             const JsonLimits& limits);

/// Anthropic's error body: {"type":"error","error":{"type","message"}}.
/// `type` is Anthropic's for the status (MessagesErrorType).
std::string EncodeMessagesErrorJson(int status, std::string_view message);

/// An error event ending a stream that broke off (api_error).
std::string EncodeMessagesErrorEvent(std::string_view message);

/// Anthropic's error type for an HTTP status: invalid_request_error (400),
/// authentication_error (401), permission_error (403), not_found_error
/// (404), request_too_large (413), rate_limit_error (429),
/// overloaded_error (529), api_error otherwise.
std::string_view MessagesErrorType(int status);

}  // namespace kvgov
