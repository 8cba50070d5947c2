#pragma once

// The body of POST /v1/events: {"events":[{"type": ..., ...}, ...]}.
// Wire form: docs/formats/events-api.md.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvgov/codec/json_codec.h"

namespace kvgov {

/// Where a reported kv_transfer's span lives, for transports that move
/// residency between tiers and workers. The span is named by token ids
/// from the start of the prompt (kvgov computes its own block keys) or by
/// the engine's block hashes as that worker published them.
struct SpanResidency {
  std::string worker;       // where the span is after the transfer
  std::string from_worker;  // migrate: where it came from
  std::vector<int64_t> token_ids;
  std::vector<uint64_t> block_hashes;
  std::string lora_name;
  std::string cache_salt;
  int64_t group_idx = 0;
  friend bool operator==(const SpanResidency&, const SpanResidency&) = default;
};

using IngestRecord = std::variant<KVTransfer, NIXLLease, ProviderCache, ToolResult, Entry>;

/// One element of the batch.
struct IngestEvent {
  IngestRecord record;
  std::optional<SpanResidency> residency;  // kv_transfer and nixl_lease, when they name the span
};

/// Every element decoded or its own error ("$.events[3].direction: ..."):
/// one bad element never rejects its neighbours.
struct IngestBatch {
  std::vector<Result<IngestEvent>> events;
};

/// "kv_transfer", "nixl_lease", "provider_cache", "tool_result", "entry".
std::string_view IngestTypeName(const IngestRecord& record);

/// Decodes a batch. Returns ResourceExhausted over `limits` and
/// InvalidArgument when the body is not a JSON object with an "events"
/// array (and nothing else); element errors are inside the batch.
Result<IngestBatch> DecodeIngestBatchJson(std::string_view text, const JsonLimits& limits);

}  // namespace kvgov
