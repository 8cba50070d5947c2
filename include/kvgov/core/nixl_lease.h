#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kvgov/core/envelope.h"
#include "kvgov/core/lookup_verdict.h"
#include "kvgov/core/status.h"

namespace kvgov {

/// A witness of one NIXL KV lease in disaggregated prefill: the prefill node
/// pins blocks under the lease, the decode node heartbeats it, and the blocks
/// free on transfer completion, abort, or expiry. Times are caller-supplied
/// milliseconds on one clock; this header reads no clock.
struct NIXLLease {
  std::string lease_id;
  std::string trace_id;
  std::string request_id;
  std::string remote_engine;
  std::string span_digest;  // empty -> the lease is unidentified, never warm
  int64_t tokens = 0;
  std::string model_id;
  std::string tokenizer_id;
  NIXLTransferRole role = NIXLTransferRole::kPrefillPin;
  NIXLLeaseEvent event = NIXLLeaseEvent::kCreate;  // the last observed event
  int64_t granted_at_ms = 0;
  int64_t expires_at_ms = 0;  // <= 0: no expiry clock
  int64_t ttl_ms = 0;         // how far a heartbeat pushes expires_at_ms
  int64_t bytes_moved = 0;
  // A handoff's lease governs the pull only: the prefill worker's own
  // prefix cache is what its event stream says (docs/adr/0021).
  NIXLLeaseWitness witness = NIXLLeaseWitness::kReported;
  friend bool operator==(const NIXLLease&, const NIXLLease&) = default;
};

/// The lease's state at `now_ms`, a pure function of the record and the
/// clock: empty span -> unidentified; transfer_complete -> completed; abort
/// -> failed; expiry -> expired; create or heartbeat -> expired once
/// now >= expires_at (when set) or when now precedes the grant (a clock
/// that runs backwards fails closed), else active.
NIXLLeaseState LeaseStateAt(const NIXLLease& lease, int64_t now_ms);

/// True exactly when the lease is active: a warm set must drop the span the
/// moment this turns false.
bool LeaseWarm(const NIXLLease& lease, int64_t now_ms);

/// active -> hit; completed -> miss/lease_released; expired ->
/// miss/expired_ttl; failed -> fault/residency_fault; unidentified ->
/// miss/absent.
LookupVerdict NIXLLeaseVerdict(const NIXLLease& lease, int64_t now_ms);

/// True for completed, expired and failed: states no event can leave.
bool IsTerminal(NIXLLeaseState state);

/// The checks every lease report must pass, whatever its event: a
/// lease_id, and no negative ttl_ms, tokens or bytes_moved. InvalidArgument
/// naming the field.
Status CheckNIXLLeaseReport(const NIXLLease& report);

/// Starts a lease from a create report: granted now, expiring after ttl_ms
/// when ttl_ms > 0. Returns CheckNIXLLeaseReport's error for a bad report.
Result<NIXLLease> GrantNIXLLease(NIXLLease report, int64_t now_ms);

/// The monotonic lease state machine. Applies `event` observed at `now_ms`:
/// heartbeat extends expires_at to now + ttl_ms; transfer_complete, abort and
/// expiry end the lease. A terminal lease never revives: any event but a
/// repeated expiry on an expired lease returns FailedPrecondition naming the
/// lease, its state and the event. `create` on an existing lease returns
/// AlreadyExists; an event timed before the grant returns InvalidArgument.
Result<NIXLLease> ApplyNIXLLeaseEvent(const NIXLLease& lease, NIXLLeaseEvent event,
                                      int64_t now_ms);

/// Lowers the lease onto the kv_transfer plane at tier remote: direction
/// restore for decode_pull, migrate for push_write, offload for prefill_pin;
/// owner = remote_engine; lease = lease_id; outcome fault (fault_reason
/// nixl_lease_abort) when failed, else ok. Labels nixl_lease, nixl_role,
/// nixl_event, nixl_state always; remote_engine, trace_id, request_id,
/// lease_expires_at when set. Invalidation mode external_refutation. An
/// unidentified lease lowers to an entry with no digest, which never serves.
/// REQUIRES: CheckNIXLLeaseReport(lease) is OK (else the entry carries a
/// negative length and fails ValidateEntry).
Entry FromNIXLLease(const NIXLLease& lease, int64_t now_ms);

/// What a clear of a NIXL span proved.
struct NIXLClear {
  std::string span_digest;
  bool exact_span_confirmed = false;
  bool whole_prefix_reset = false;
};

/// exact_span only when confirmed and a span is named; else whole_prefix when
/// a whole-prefix reset was attested; else none.
NIXLClearKind ClassifyNIXLClear(const NIXLClear& clear);

/// The eviction scope a clear proves; nullopt for none (fail closed).
std::optional<KVEvictionScope> EvictionScopeOf(NIXLClearKind kind);

}  // namespace kvgov
