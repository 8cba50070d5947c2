#pragma once

// Decoders for the msgpack payloads engines publish about their KV-cache
// block pools: vLLM and SGLang `EventBatch`es and Mooncake store events. They
// take the payload frame only (ZMQ framing, sequence numbers and replay are
// the transport's job) and return plain records from
// kvgov/core/engine_events.h. Wire forms: docs/formats/engine-events.md.
//
// Payloads are untrusted: every decoder bounds what it allocates before it
// allocates it, never throws, and maps each failure to one of three codes
// (see DecodeErrorReason). Decoders are pure functions of their arguments and
// safe to call from any number of threads at once.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvgov/core/engine_events.h"
#include "kvgov/core/status.h"

namespace kvgov::adapters {

/// Bounds on one payload, checked while it is parsed and before anything is
/// allocated for it. A payload that exceeds any of them is refused with
/// kResourceExhausted. The defaults fit the largest batches vLLM publishes
/// (a few thousand blocks) with a wide margin.
struct MsgpackLimits {
  size_t max_payload_bytes = 16 << 20;
  uint32_t max_array = 1 << 20;  // elements in one array
  uint32_t max_map = 1024;       // key/value pairs in one map
  uint32_t max_str = 1 << 20;    // bytes in one str
  uint32_t max_bin = 1 << 20;    // bytes in one bin
  uint32_t max_ext = 0;          // bytes in one ext (0: no ext accepted)
  uint32_t max_depth = 16;       // nested arrays and maps, the top level included
};

/// Decodes one vLLM or SGLang `EventBatch` payload. Accepts both msgpack
/// encodings at both levels: the batch as `[ts, events, dp_rank]` (trailing
/// defaults omitted) or as a map, each event as `[tag, fields...]` or as a
/// map tagged by "type". Unknown fields and unknown event types are skipped
/// and counted in `ignored`; everything else is checked strictly.
///
/// Returns kCorruption when the bytes are not one well-formed msgpack value
/// (garbage, truncated, trailing bytes); kResourceExhausted when a limit is
/// exceeded; kInvalidArgument when the value does not have the schema's
/// shape, with a message naming the field, e.g.
/// "events[2].block_hashes[0]: want int or bin, got str".
Result<EngineEventBatch> DecodeEngineBatch(std::string_view payload,
                                           const MsgpackLimits& limits = {});

/// Decodes one Mooncake store event payload (the RFC #1527 map schema the
/// master publishes): a batch `[timestamp_ms, [event maps], dp_rank]`, a
/// single event map, or an array of event maps. `stored`, `removed` and
/// `cleared` become BlockStored, BlockRemoved and AllBlocksCleared;
/// seq_hashes become block_hashes and parent_hash the parent block hash. The
/// first stored block's extra key is `["mooncake",<tenant_id>,<additional_salt>]`
/// so that two tenants never share a key. `ts` is in seconds, like vLLM's.
/// Same error codes as DecodeEngineBatch.
Result<EngineEventBatch> DecodeMooncakeEvents(std::string_view payload,
                                              const MsgpackLimits& limits = {});

/// A bounded metric label for a decode failure: kResourceExhausted ->
/// "limit_exceeded", kCorruption -> "malformed_msgpack", any other code ->
/// "bad_schema".
std::string_view DecodeErrorReason(const Status& status);

}  // namespace kvgov::adapters
