#pragma once

// Bodies of the governance routes (docs/formats/governance-api.md).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/codec/json_codec.h"

namespace kvgov {

/// POST /v1/quarantine: the span by token ids (under the tenant's salt), by
/// text or chat messages the server tokenizes into them, or by a worker's
/// engine block hash.
struct QuarantineRequest {
  std::string model;
  std::string tenant;
  std::string lora_name;
  std::vector<int64_t> token_ids;
  /// In place of token_ids: text, tokenized by an engine of `model` as the
  /// gateway tokenizes a completion's prompt.
  std::string prompt;
  /// In place of token_ids: an OpenAI chat message array, as minified JSON
  /// text ("" when not given), tokenized with the engine's chat template as
  /// the gateway tokenizes a chat completion.
  std::string messages;
  std::string worker;
  std::optional<uint64_t> block_hash;
  int64_t group_idx = 0;
  std::string reason;
  bool invalidate = false;
};

/// model and reason are required, and exactly one of token_ids, prompt,
/// messages (a non-empty array of objects) or worker + block_hash; the
/// rules judge values, so `"prompt": ""` is no span. InvalidArgument naming
/// the field ("$.prompt: not with token_ids ..."), or ResourceExhausted past
/// `limits`, as the other decoders.
Result<QuarantineRequest> DecodeQuarantineRequestJson(std::string_view text,
                                                      const JsonLimits& limits);

/// POST /v1/quarantines/{id}/lift: why (required, not empty).
struct QuarantineLiftRequest {
  std::string reason;
};
Result<QuarantineLiftRequest> DecodeQuarantineLiftRequestJson(std::string_view text,
                                                              const JsonLimits& limits);

/// POST /v1/invalidations: a span (token ids, prompt or chat messages as in
/// QuarantineRequest, or a worker's block), a
/// whole scope ("worker" with `worker`, or "model"), or a tenant revocation
/// (scope "tenant" with `tenant`: every block of the tenant's salts so far,
/// of `model`, or of every model when `model` is "").
struct InvalidationRequest {
  std::string model;  // "" only with scope "tenant": every model
  std::string tenant;
  std::string lora_name;
  std::vector<int64_t> token_ids;
  std::string prompt;    // in place of token_ids, as QuarantineRequest::prompt
  std::string messages;  // in place of token_ids, as QuarantineRequest::messages
  std::string worker;
  std::optional<uint64_t> block_hash;
  int64_t group_idx = 0;
  std::string scope;  // "" (a span), "worker", "model" or "tenant"
  std::string reason;
  bool flush = false;  // scope "tenant" only: also reset the owners' prefix caches
};

/// reason is required, and exactly one of token_ids, prompt, messages,
/// worker + block_hash, or scope (prompt and messages stand where token_ids
/// may, never beside a scope). model is required except with scope
/// "tenant", which needs a non-empty tenant and takes no token_ids, prompt,
/// messages, worker, block_hash, lora_name or group_idx; flush is allowed
/// with scope "tenant" only. Those rules judge values, not presence:
/// `"worker": ""`, `"prompt": ""`, `"group_idx": 0` and `"flush": false`
/// are the defaults and pass everywhere. InvalidArgument naming the field
/// ("$.flush: only with scope tenant"), or ResourceExhausted past `limits`,
/// as the other decoders.
Result<InvalidationRequest> DecodeInvalidationRequestJson(std::string_view text,
                                                          const JsonLimits& limits);

}  // namespace kvgov
