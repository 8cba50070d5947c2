#pragma once

// POST /v1/route's answer written straight into a string, without building
// a JSON document first: with 64 candidates the document cost about 300 µs
// a route (docs/benchmarks.md). Internal to kvgov_codec. The text is what
// nlohmann's dump of the same document prints (keys sorted, no spaces,
// doubles in its notation), except that a double is always printed in the
// fewest digits that read back, where nlohmann's Grisu2 now and then prints
// one more: the same values either way. The route codec test holds the two
// to it.

#include <optional>
#include <string>
#include <string_view>

#include "kvgov/router/router.h"

namespace kvgov::codec_internal {

/// The decision's JSON, `error` (code, message) added when given;
/// std::nullopt when a string in it is not plain ASCII, which the caller
/// then prints through nlohmann (its escaping and U+FFFD replacement).
std::optional<std::string> WriteDecisionJson(const router::RouteDecision& decision,
                                             std::string_view error_code = {},
                                             std::string_view error_message = {});

}  // namespace kvgov::codec_internal
