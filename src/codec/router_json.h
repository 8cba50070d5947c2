#pragma once

// Internal to kvgov_codec: the JSON of the router's values that more than
// one API shape carries (a worker's load, counts by tier).

#include <array>
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "kvgov/index/residency_index.h"
#include "kvgov/router/router.h"

namespace kvgov::codec_internal {

nlohmann::json LoadJson(const router::WorkerLoad& load);

// POST /v1/route's answer as a document: what decision_writer.h writes
// directly, and its fallback.
nlohmann::json DecisionJson(const router::RouteDecision& decision);

// {"hbm": x, "dram": x, "disk": x, "remote": x, "unknown": x} from an array
// in kIndexedTiers order (block counts or credits).
template <typename T>
nlohmann::json TierJson(const std::array<T, index::kIndexedTiers.size()>& counts) {
  nlohmann::json json = nlohmann::json::object();
  for (size_t i = 0; i < index::kIndexedTiers.size(); ++i) {
    const ResidencyTier tier = index::kIndexedTiers[i];
    json[tier == ResidencyTier::kUnknown ? "unknown" : std::string(ToString(tier))] = counts[i];
  }
  return json;
}

}  // namespace kvgov::codec_internal
