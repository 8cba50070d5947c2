#pragma once

// The body of GET /v1/diagnostics/prefix
// (docs/formats/prefix-diagnostics.md §3).

#include <cstdint>
#include <span>
#include <string>

#include "kvgov/prompts/cache_breakers.h"

namespace kvgov {

/// What to change about a finding, in words (its `advice` field).
std::string PrefixFindingAdvice(const prompts::Finding& finding);

/// The answer: `findings` in the order given.
std::string EncodePrefixDiagnosticsJson(std::span<const prompts::Finding> findings,
                                        uint32_t granule_tokens, size_t families);

}  // namespace kvgov
