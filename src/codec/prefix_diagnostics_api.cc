#include "kvgov/codec/prefix_diagnostics_api.h"

#include <nlohmann/json.hpp>

namespace kvgov {

std::string PrefixFindingAdvice(const prompts::Finding& finding) {
  const std::string from = std::to_string(finding.position_tokens);
  const std::string of = " of a " + std::to_string(finding.prompt_tokens) + "-token prompt";
  switch (finding.kind) {
    case prompts::FindingKind::kBreaker:
      return "tokens " + from + ".." +
             std::to_string(finding.position_tokens + finding.length_tokens) + of +
             " differ between requests while the " + std::to_string(finding.avoidable_tokens) +
             " after them repeat: move what changes there (a timestamp, an id, a name) after "
             "the static content";
    case prompts::FindingKind::kReordering:
      return "from token " + from + of + ", the same " + std::to_string(finding.avoidable_tokens) +
             " tokens recur in another order: serialize tools, schemas and documents in one "
             "fixed order (sorted keys)";
    case prompts::FindingKind::kDivergence:
      return "prompts of this family share only their first " + from +
             " tokens: if more of them is meant to be common, put it first";
  }
  return "";
}

std::string EncodePrefixDiagnosticsJson(
    std::span<const prompts::Finding> findings, uint32_t granule_tokens, size_t families,
    std::span<const std::optional<PrefixFindingContext>> contexts) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < findings.size(); ++i) {
    const prompts::Finding& f = findings[i];
    out.push_back({{"kind", std::string(prompts::ToString(f.kind))},
                   {"model", f.model},
                   {"tenant", f.tenant},
                   {"family", f.family},
                   {"position_tokens", f.position_tokens},
                   {"length_tokens", f.length_tokens},
                   {"avoidable_tokens_per_request", f.avoidable_tokens},
                   {"prompt_tokens", f.prompt_tokens},
                   {"occurrences", f.occurrences},
                   {"avoidable_tokens_total", f.avoidable_tokens_total},
                   {"first_seen_ms", f.first_seen_ms},
                   {"last_seen_ms", f.last_seen_ms},
                   {"advice", PrefixFindingAdvice(f)}});
    if (i < contexts.size() && contexts[i].has_value()) {
      nlohmann::json context = {{"offset_tokens", f.context_offset},
                                {"tokens", f.context_tokens.size()}};
      if (contexts[i]->error.empty()) {
        context["text"] = contexts[i]->text;
      } else {
        context["error"] = contexts[i]->error;
      }
      out.back()["context"] = std::move(context);
    }
  }
  return nlohmann::json{
      {"granule_tokens", granule_tokens}, {"families", families}, {"findings", std::move(out)}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvgov
