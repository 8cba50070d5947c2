#pragma once

// Bodies of the governance routes (docs/formats/governance-api.md).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/codec/json_codec.h"

namespace kvgov {

/// POST /v1/quarantine: the span by token ids (under the tenant's salt) or
/// by a worker's engine block hash.
struct QuarantineRequest {
  std::string model;
  std::string tenant;
  std::string lora_name;
  std::vector<int64_t> token_ids;
  std::string worker;
  std::optional<uint64_t> block_hash;
  int64_t group_idx = 0;
  std::string reason;
  bool invalidate = false;
};

/// model and reason are required, and exactly one of token_ids or
/// worker + block_hash. Errors as the other decoders.
Result<QuarantineRequest> DecodeQuarantineRequestJson(std::string_view text,
                                                      const JsonLimits& limits);

/// POST /v1/quarantines/{id}/lift: why (required, not empty).
struct QuarantineLiftRequest {
  std::string reason;
};
Result<QuarantineLiftRequest> DecodeQuarantineLiftRequestJson(std::string_view text,
                                                              const JsonLimits& limits);

/// POST /v1/invalidations: a span (token ids, or a worker's block), or a
/// whole scope ("worker" with `worker`, or "model").
struct InvalidationRequest {
  std::string model;
  std::string tenant;
  std::string lora_name;
  std::vector<int64_t> token_ids;
  std::string worker;
  std::optional<uint64_t> block_hash;
  int64_t group_idx = 0;
  std::string scope;  // "" (a span), "worker" or "model"
  std::string reason;
};

/// model and reason are required; a span by token_ids or worker +
/// block_hash, or a scope. Errors as the other decoders.
Result<InvalidationRequest> DecodeInvalidationRequestJson(std::string_view text,
                                                          const JsonLimits& limits);

}  // namespace kvgov
