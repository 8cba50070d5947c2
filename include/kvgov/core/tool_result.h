#pragma once

#include <cstdint>
#include <string>

#include "kvgov/core/envelope.h"
#include "kvgov/core/lookup_verdict.h"
#include "kvgov/core/status.h"

namespace kvgov {

/// One event of a tool-result value cache, keyed as the vDSO keys it:
/// "tool:args_digest:epoch".
struct ToolResult {
  std::string key;
  ToolResultEvent event = ToolResultEvent::kFill;
  std::string result_digest;  // required except for a miss
  int64_t size_bytes = 0;
  std::string witness;        // e.g. an etag; set -> external refutation
  int64_t saved_tokens = 0;   // prompt tokens a hit avoided
  friend bool operator==(const ToolResult&, const ToolResult&) = default;
};

/// The three parts of a vDSO key.
struct ToolResultKey {
  std::string tool;
  std::string args_digest;
  std::string epoch;
};

/// Splits "tool:args_digest:epoch". Returns InvalidArgument unless there are
/// exactly three non-empty parts.
Result<ToolResultKey> ParseToolResultKey(std::string_view key);

/// Lowers onto the tool_result plane (source tool_result, media bytes, unit
/// bytes, length = size). Derivation tool and args_digest, validity
/// admitted_at_epoch = epoch; residency dram, owner vdso, lease lru;
/// invalidation write_epoch, or external_refutation when witnessed; a miss
/// has no digest and residency recompute. Label tool_result_event.
/// Returns InvalidArgument for a bad key, a missing result_digest on a
/// non-miss event, or a negative size.
Result<Entry> FromToolResult(const ToolResult& result);

/// From the tool_result_event label: hit and fill with a valid handle ->
/// hit; evict -> miss/evicted; revoke -> miss/refuted_witness; miss or an
/// unknown label -> miss/absent.
LookupVerdict ToolResultVerdict(const Entry& entry);

}  // namespace kvgov
