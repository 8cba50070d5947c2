#pragma once

// The bodies the gateway reads and writes (docs/formats/gateway.md).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/codec/json_codec.h"
#include "kvgov/core/status.h"

namespace kvgov {

/// The wires the gateway serves: OpenAI's completions, chat completions and
/// Responses, and Anthropic's Messages (the last two decoded as the chat
/// completion an engine makes of them: messages_api.h).
enum class GatewayEndpoint { kCompletions, kChatCompletions, kMessages, kResponses };

/// What the gateway needs from an OpenAI request; the body itself is
/// forwarded as sent (WithCacheSalt).
struct GatewayRequest {
  std::string model;
  bool stream = false;
  /// A stream whose client set no stream_options: the gateway asks the
  /// engine for usage (include_usage) and strips that chunk again.
  bool ask_usage = false;
  /// The prompt as token ids, when the client sent them.
  std::vector<int64_t> token_ids;
  /// Otherwise the body to POST to the engine's /tokenize.
  std::string tokenize_body;
  /// A Responses request's previous_response_id: the engine prepends that
  /// response's conversation, which only the engine that answered it holds.
  std::string previous_response_id;
};

/// Decodes under `limits`. InvalidArgument names the field as "$.field: ..."
/// (a client-sent cache_salt included); ResourceExhausted over a limit.
Result<GatewayRequest> DecodeGatewayRequestJson(GatewayEndpoint endpoint, std::string_view body,
                                                const JsonLimits& limits);

/// `body` (a JSON object) with "cache_salt":"<salt>" (when `salt` is not
/// empty) and "stream_options":{"include_usage":true} (when `ask_usage`) as
/// its first members; every other byte unchanged.
std::string ForwardedBody(std::string_view body, std::string_view salt, bool ask_usage);

/// The legs of a prefill/decode handoff (docs/formats/gateway.md,
/// "Prefill/decode disaggregation"). `forwarded` is a body ForwardedBody
/// made from one DecodeGatewayRequestJson accepted: a client may send none
/// of the fields written here.
///
/// vLLM's NixlConnector, prefill leg: one token (max_tokens, and
/// max_completion_tokens when present, set to 1), in one body (stream
/// false, no stream_options), no min_tokens or min_completion_tokens, and
/// kv_transfer_params asking for a remote decode.
Result<std::string> NixlPrefillBody(std::string_view forwarded);
/// The kv_transfer_params of a prefill answer, as the engine sent them
/// (opaque: their fields change between vLLM releases); nothing when absent,
/// null or empty (the engine freed the blocks at once, and the decode leg
/// prefills itself). InvalidArgument for an answer that is not a JSON
/// object or params that are not an object.
Result<std::optional<std::string>> DecodeKvTransferParams(std::string_view answer,
                                                          const JsonLimits& limits);
/// The decode leg: `forwarded` with "kv_transfer_params": `params` as its
/// first member, every other byte unchanged.
std::string NixlDecodeBody(std::string_view forwarded, std::string_view params);
/// SGLang's PD protocol: the one body both legs get, with bootstrap_host,
/// bootstrap_port and bootstrap_room (masked to 63 bits, as SGLang's router
/// draws it).
Result<std::string> BootstrapBody(std::string_view forwarded, std::string_view host, int port,
                                  uint64_t room);

/// The limits an engine's answer is decoded with: its choices may be as
/// long as the answer.
JsonLimits UsageLimits();

/// A non-streamed answer is held whole (its usage is read from it); an
/// engine's answer past this, far beyond any completion's, is refused.
inline constexpr size_t kMaxWholeAnswerBytes = size_t{32} << 20;

/// What an engine reported using: from a whole answer, or from the data of
/// one SSE event that carries usage.
struct EngineUsage {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens; 0 when absent
  bool usage_only = false;    // an SSE event with usage and no choices (include_usage's)
};
/// Nothing when the JSON carries no usage object (or is not JSON).
std::optional<EngineUsage> DecodeEngineUsage(std::string_view json, const JsonLimits& limits);
/// A whole (non-streamed) answer: InvalidArgument naming the problem when
/// it is not a JSON object; else its usage, nothing when it carries none.
Result<std::optional<EngineUsage>> DecodeWholeAnswer(std::string_view json,
                                                     const JsonLimits& limits);

/// Splits a stream of server-sent events into whole events. Thread-
/// compatible.
class SseSplitter {
 public:
  /// Appends bytes; returns the events they completed, each with its
  /// terminating blank line.
  std::vector<std::string> Push(std::string_view bytes);
  /// Whatever is left after the stream ended (an unterminated event).
  std::string Rest() { return std::move(buffer_); }

  /// The payload of an event's `data:` line ("" when it has none).
  static std::string_view Data(std::string_view event);

 private:
  std::string buffer_;
};

/// The tokens of an engine's /tokenize answer ({"tokens": [...], ...}).
Result<std::vector<int64_t>> DecodeTokenizeAnswerJson(std::string_view body,
                                                      const JsonLimits& limits);

/// The text of an engine's /detokenize answer: vLLM's {"prompt": ...};
/// {"text": ...} is read too.
Result<std::string> DecodeDetokenizeAnswerJson(std::string_view body, const JsonLimits& limits);

/// {"error": {"message", "type", "param" (null when empty), "code"}}.
std::string EncodeOpenAIErrorJson(std::string_view message, std::string_view type,
                                  std::string_view param, std::string_view code);

/// The same as one SSE event, for a failure after the first byte, followed
/// by the stream's end ("data: [DONE]").
std::string EncodeOpenAIErrorEvent(std::string_view message);

/// GET /v1/models: {"object": "list", "data": [{"id", "object": "model", ...}]}.
std::string EncodeModelsJson(std::span<const std::string> models);

}  // namespace kvgov
