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

enum class GatewayEndpoint { kCompletions, kChatCompletions };

/// What the gateway needs from an OpenAI request; the body itself is
/// forwarded as sent (WithCacheSalt).
struct GatewayRequest {
  std::string model;
  bool stream = false;
  /// The prompt as token ids, when the client sent them.
  std::vector<int64_t> token_ids;
  /// Otherwise the body to POST to the engine's /tokenize.
  std::string tokenize_body;
};

/// Decodes under `limits`. InvalidArgument names the field as "$.field: ..."
/// (a client-sent cache_salt included); ResourceExhausted over a limit.
Result<GatewayRequest> DecodeGatewayRequestJson(GatewayEndpoint endpoint, std::string_view body,
                                                const JsonLimits& limits);

/// `body` (a JSON object) with "cache_salt":"<salt>" as its first member;
/// every other byte unchanged.
std::string WithCacheSalt(std::string_view body, std::string_view salt);

/// The tokens of an engine's /tokenize answer ({"tokens": [...], ...}).
Result<std::vector<int64_t>> DecodeTokenizeAnswerJson(std::string_view body,
                                                      const JsonLimits& limits);

/// {"error": {"message", "type", "param" (null when empty), "code"}}.
std::string EncodeOpenAIErrorJson(std::string_view message, std::string_view type,
                                  std::string_view param, std::string_view code);

/// The same as one SSE event, for a failure after the first byte, followed
/// by the stream's end ("data: [DONE]").
std::string EncodeOpenAIErrorEvent(std::string_view message);

/// GET /v1/models: {"object": "list", "data": [{"id", "object": "model", ...}]}.
std::string EncodeModelsJson(std::span<const std::string> models);

}  // namespace kvgov
