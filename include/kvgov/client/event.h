#pragma once

// The reports a KV transport sends kvgov, and their wire form: one element
// of POST /v1/events' `events[]` (docs/formats/events-api.md), which is also
// one line of a spool file (docs/formats/spool.md).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "kvgov/core/kv_transfer.h"
#include "kvgov/core/nixl_lease.h"
#include "kvgov/core/utf8.h"
#include "kvgov/core/status.h"

namespace kvgov::client {

/// Where a reported span lives: the residency fields of a kv_transfer or
/// nixl_lease element. With them a transport moves residency in kvgov's
/// index (only on registered workers, and only when kvgov admits the
/// report's owner); without them the report is counted and moves nothing.
/// The span is named by token ids from the start of the prompt (kvgov
/// computes its own block keys) or by the engine's block hashes as that
/// worker published them, never both.
struct SpanLocation {
  std::string worker;  // where the span is after the event; a lease's defaults to remote_engine
  std::string from_worker;  // migrate: where it came from (block_hashes are looked up there)
  std::vector<int64_t> token_ids;
  std::vector<uint64_t> block_hashes;
  std::string lora_name;
  std::string cache_salt;  // the tenant salt kvgov handed out with the route
  int64_t group_idx = 0;   // KV-cache group
  friend bool operator==(const SpanLocation&, const SpanLocation&) = default;
};

/// One report: a transfer or a lease event, and where its span lives.
/// A plain value; build it with designated initializers or the helpers.
struct Event {
  std::variant<KVTransfer, NIXLLease> record;
  std::optional<SpanLocation> location;
  friend bool operator==(const Event&, const Event&) = default;
};

/// A transfer report, optionally naming where its span lives.
inline Event TransferEvent(KVTransfer transfer, std::optional<SpanLocation> location = {}) {
  return Event{std::move(transfer), std::move(location)};
}

/// A lease report, optionally naming the span the lease pins.
inline Event LeaseEvent(NIXLLease lease, std::optional<SpanLocation> location = {}) {
  return Event{std::move(lease), std::move(location)};
}

/// kvgov's per-array limit on a request body (JsonLimits::max_array_items).
/// A longer token_ids or block_hashes would fail the whole batch it rides
/// in, so the encoder refuses it.
inline constexpr size_t kMaxSpanItems = size_t{1} << 20;

/// Encodes `event` as one compact JSON object: `"type"` first, then the
/// record's required fields, every optional field that differs from its
/// default, and the location's fields beside them (flat, as the decoder
/// reads them). The output has no newline, so it is also a spool line.
///
/// Refuses only what it cannot encode faithfully or what would fail a whole
/// batch rather than this one element; kvgov judges everything else (an
/// empty span_digest, a negative count, an unknown worker) and rejects that
/// element alone. Returns InvalidArgument, naming the field, for:
///  - a string that is not valid UTF-8 (kvgov refuses such a body whole);
///  - an enum holding a value outside its vocabulary;
///  - token_ids or block_hashes longer than kMaxSpanItems.
/// Thread-safe (a pure function).
Result<std::string> EncodeEvent(const Event& event);

/// True when `text` is well-formed UTF-8, the check kvgov's JSON parser
/// makes.
using kvgov::IsValidUtf8;

}  // namespace kvgov::client
