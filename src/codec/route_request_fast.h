#pragma once

// The two decoders behind DecodeRouteRequestJson. Internal to kvgov_codec;
// the route request fuzzer and the tests hold them to each other.

#include <optional>
#include <string_view>

#include "kvgov/codec/json_codec.h"
#include "kvgov/router/router.h"

namespace kvgov::codec_internal {

/// POST /v1/route's body in one simdjson pass, for the body clients send:
/// an object of model, tenant, token_ids or token_ids_b64, lora_name and
/// workers, each once, every value well typed and in range, within the
/// limits. std::nullopt for anything else, errors included, which the
/// schema path then decodes and names. Whatever it returns, the schema
/// path returns too. Never throws.
std::optional<router::RouteRequest> DecodeRouteRequestFast(std::string_view text,
                                                           const JsonLimits& limits);

/// The schema path alone (nlohmann, bounded).
Result<router::RouteRequest> DecodeRouteRequestBySchema(std::string_view text,
                                                        const JsonLimits& limits);

}  // namespace kvgov::codec_internal
