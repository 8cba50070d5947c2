#pragma once

// The bodies of POST /v1/route (docs/formats/route-api.md).

#include <string>
#include <string_view>

#include "kvgov/codec/json_codec.h"
#include "kvgov/router/router.h"

namespace kvgov {

/// Decodes {"model", "tenant"?, "token_ids", "lora_name"?, "workers"?}.
/// model and token_ids are required; unknown fields are rejected. Errors as
/// the other decoders (ResourceExhausted over limits, InvalidArgument with
/// the field path otherwise).
Result<router::RouteRequest> DecodeRouteRequestJson(std::string_view text,
                                                    const JsonLimits& limits);

/// POST /v1/route/explain (docs/formats/console.md): /v1/route's body, with
/// "prompt", text for the model's engine to tokenize, allowed in place of
/// "token_ids"; exactly one of the two.
struct ExplainRequest {
  router::RouteRequest route;
  std::string prompt;
};
Result<ExplainRequest> DecodeExplainRequestJson(std::string_view text, const JsonLimits& limits);

/// The decision: the chosen worker, the salt, the verdict and every
/// candidate with its overlap, credit, load, cost and eligibility.
std::string EncodeRouteDecisionJson(const router::RouteDecision& decision);

/// A decision that found no eligible worker (answered 503): the decision,
/// each candidate saying why, and {"error": {"code": "unavailable", ...}}.
std::string EncodeUnroutableDecisionJson(const router::RouteDecision& decision);

}  // namespace kvgov
