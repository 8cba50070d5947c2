#pragma once

// The body of GET /v1/diagnostics/prefix
// (docs/formats/prefix-diagnostics.md §3).

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "kvgov/prompts/cache_breakers.h"

namespace kvgov {

/// What to change about a finding, in words (its `advice` field).
std::string PrefixFindingAdvice(const prompts::Finding& finding);

/// A finding's context tokens as the engine detokenized them, or why it
/// could not.
struct PrefixFindingContext {
  std::string text;
  std::string error;  // "" when `text` is the engine's
};

/// The answer: `findings` in the order given; `contexts`, when not empty,
/// one for each finding (nullopt for one without context tokens).
std::string EncodePrefixDiagnosticsJson(
    std::span<const prompts::Finding> findings, uint32_t granule_tokens, size_t families,
    std::span<const std::optional<PrefixFindingContext>> contexts = {});

}  // namespace kvgov
