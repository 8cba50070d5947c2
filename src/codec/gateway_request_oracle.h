#pragma once

// The gateway's request decoder as it was before simdjson (ADR 0016): the
// bounded nlohmann parser. Kept for the tests and the differential fuzzer
// as the oracle the simdjson decoder must agree with; nothing else links it.

#include <string_view>

#include "kvgov/codec/gateway_api.h"

namespace kvgov::codec_testing {

/// What DecodeGatewayRequestJson decoded before ADR 0016, same contract.
Result<GatewayRequest> DecodeGatewayRequestWithNlohmann(GatewayEndpoint endpoint,
                                                        std::string_view body,
                                                        const JsonLimits& limits);

/// The same request from both decoders: every field equal, the tokenize
/// body compared as JSON (each decoder prints numbers and strings its own
/// way).
bool SameDecodedRequest(const GatewayRequest& a, const GatewayRequest& b);

}  // namespace kvgov::codec_testing
