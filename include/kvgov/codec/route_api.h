#pragma once

// The bodies of POST /v1/route (docs/formats/route-api.md).

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/codec/gateway_api.h"
#include "kvgov/codec/json_codec.h"
#include "kvgov/router/router.h"

namespace kvgov {

/// Decodes {"model", "tenant"?, "token_ids" | "token_ids_b64", "lora_name"?,
/// "workers"?}. model and exactly one of the token fields are required;
/// unknown fields are rejected. Errors as the other decoders
/// (ResourceExhausted over limits, InvalidArgument with the field path
/// otherwise).
Result<router::RouteRequest> DecodeRouteRequestJson(std::string_view text,
                                                    const JsonLimits& limits);

/// Token ids as route-api.md's compact form: padded base64 (RFC 4648 §4) of
/// each id as a little-endian uint32. REQUIRES: ids in 0..kMaxTokenId.
std::string EncodeTokenIdsBase64(std::span<const int64_t> token_ids);

/// The ids back; InvalidArgument naming `field` for a length that is not
/// padded base64 of whole uint32s, a character outside the alphabet, or an
/// id over kMaxTokenId ("token_ids_b64[3]: ...").
Result<std::vector<int64_t>> DecodeTokenIdsBase64(std::string_view text, std::string_view field);

/// POST /v1/route/explain (docs/formats/console.md): /v1/route's body, with
/// "prompt", text for the model's engine to tokenize, allowed in place of
/// "token_ids"; exactly one of the two.
struct ExplainRequest {
  router::RouteRequest route;
  std::string prompt;
};
Result<ExplainRequest> DecodeExplainRequestJson(std::string_view text, const JsonLimits& limits);

/// POST /v1/route/{id}/done's body, which may be empty: {"usage": {...}},
/// the engine's usage as its answer carried it (prompt_tokens required;
/// completion_tokens, total_tokens and prompt_tokens_details.cached_tokens
/// optional; counts 0 ... 2^31-1, cached_tokens at most prompt_tokens).
/// Only such a report counts as a ride_engine saving (docs/adr/0028).
struct RouteDoneReport {
  std::optional<EngineUsage> usage;
};
Result<RouteDoneReport> DecodeRouteDoneJson(std::string_view text, const JsonLimits& limits);

/// The decision: the chosen worker, the salt, the verdict and every
/// candidate with its overlap, credit, load, cost and eligibility.
std::string EncodeRouteDecisionJson(const router::RouteDecision& decision);

/// A decision that found no eligible worker (answered 503): the decision,
/// each candidate saying why, and {"error": {"code": "unavailable", ...}}.
std::string EncodeUnroutableDecisionJson(const router::RouteDecision& decision);

}  // namespace kvgov
