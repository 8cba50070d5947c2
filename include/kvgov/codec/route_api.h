#pragma once

// The body of POST /v1/route (docs/formats/route-api.md).

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

}  // namespace kvgov
