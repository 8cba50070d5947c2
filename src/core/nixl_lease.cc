#include "kvgov/core/nixl_lease.h"

#include <string>

#include "core/field_checks.h"
#include "core/transfer_entry.h"

namespace kvgov {

using core_internal::RequireNonEmpty;
using core_internal::RequireNonNegative;

NIXLLeaseState LeaseStateAt(const NIXLLease& lease, int64_t now_ms) {
  if (lease.span_digest.empty()) return NIXLLeaseState::kUnidentified;
  switch (lease.event) {
    case NIXLLeaseEvent::kTransferComplete:
      return NIXLLeaseState::kCompleted;
    case NIXLLeaseEvent::kAbort:
      return NIXLLeaseState::kFailed;
    case NIXLLeaseEvent::kExpiry:
      return NIXLLeaseState::kExpired;
    case NIXLLeaseEvent::kCreate:
    case NIXLLeaseEvent::kHeartbeat:
      if (lease.expires_at_ms > 0 && now_ms >= lease.expires_at_ms) {
        return NIXLLeaseState::kExpired;
      }
      if (now_ms < lease.granted_at_ms) return NIXLLeaseState::kExpired;
      return NIXLLeaseState::kActive;
  }
  return NIXLLeaseState::kExpired;
}

bool LeaseWarm(const NIXLLease& lease, int64_t now_ms) {
  return LeaseStateAt(lease, now_ms) == NIXLLeaseState::kActive;
}

bool IsTerminal(NIXLLeaseState state) {
  return state == NIXLLeaseState::kCompleted || state == NIXLLeaseState::kExpired ||
         state == NIXLLeaseState::kFailed;
}

LookupVerdict NIXLLeaseVerdict(const NIXLLease& lease, int64_t now_ms) {
  switch (LeaseStateAt(lease, now_ms)) {
    case NIXLLeaseState::kActive:
      return LookupVerdict::Hit(FromNIXLLease(lease, now_ms));
    case NIXLLeaseState::kCompleted:
      return LookupVerdict::Miss(LookupReason::kLeaseReleased);
    case NIXLLeaseState::kExpired:
      return LookupVerdict::Miss(LookupReason::kExpiredTTL);
    case NIXLLeaseState::kFailed:
      return LookupVerdict::Fault(FromNIXLLease(lease, now_ms), LookupReason::kResidencyFault);
    case NIXLLeaseState::kUnidentified:
      return LookupVerdict::Miss(LookupReason::kAbsent);
  }
  return LookupVerdict::Miss(LookupReason::kAbsent);
}

Status CheckNIXLLeaseReport(const NIXLLease& report) {
  KVGOV_RETURN_IF_ERROR(RequireNonEmpty("lease_id", report.lease_id));
  KVGOV_RETURN_IF_ERROR(RequireNonNegative("ttl_ms", report.ttl_ms));
  KVGOV_RETURN_IF_ERROR(RequireNonNegative("tokens", report.tokens));
  return RequireNonNegative("bytes_moved", report.bytes_moved);
}

Result<NIXLLease> GrantNIXLLease(NIXLLease report, int64_t now_ms) {
  KVGOV_RETURN_IF_ERROR(CheckNIXLLeaseReport(report));
  report.event = NIXLLeaseEvent::kCreate;
  report.granted_at_ms = now_ms;
  report.expires_at_ms = report.ttl_ms > 0 ? now_ms + report.ttl_ms : 0;
  return report;
}

Result<NIXLLease> ApplyNIXLLeaseEvent(const NIXLLease& lease, NIXLLeaseEvent event,
                                      int64_t now_ms) {
  const std::string who = "lease '" + lease.lease_id + "'";
  if (event == NIXLLeaseEvent::kCreate) {
    return Status::AlreadyExists(who + " was already created");
  }
  if (now_ms < lease.granted_at_ms) {
    return Status::InvalidArgument(who + ": event at " + std::to_string(now_ms) +
                                   " ms precedes its grant at " +
                                   std::to_string(lease.granted_at_ms) + " ms");
  }
  const NIXLLeaseState state = LeaseStateAt(lease, now_ms);
  if (IsTerminal(state)) {
    // A late expiry report for a lease our clock already expired is the
    // same fact told twice, not a revival.
    if (state == NIXLLeaseState::kExpired && event == NIXLLeaseEvent::kExpiry) return lease;
    return Status::FailedPrecondition(who + " is " + std::string(ToString(state)) + "; event '" +
                                      std::string(ToString(event)) + "' cannot revive it");
  }
  NIXLLease next = lease;
  next.event = event;
  if (event == NIXLLeaseEvent::kHeartbeat && lease.ttl_ms > 0) {
    next.expires_at_ms = now_ms + lease.ttl_ms;
  }
  return next;
}

Entry FromNIXLLease(const NIXLLease& lease, int64_t now_ms) {
  const NIXLLeaseState state = LeaseStateAt(lease, now_ms);
  KVTransferDirection direction = KVTransferDirection::kOffload;
  if (lease.role == NIXLTransferRole::kDecodePull) direction = KVTransferDirection::kRestore;
  if (lease.role == NIXLTransferRole::kPushWrite) direction = KVTransferDirection::kMigrate;

  KVSpanReport span;
  span.span_digest = lease.span_digest;
  span.tokens = lease.tokens;
  span.model_id = lease.model_id;
  span.tokenizer_id = lease.tokenizer_id;
  span.to_tier = ResidencyTier::kRemote;
  span.owner = lease.remote_engine;
  span.lease = lease.lease_id;
  span.bytes_moved = lease.bytes_moved;
  if (state == NIXLLeaseState::kFailed) {
    span.outcome = KVTransferOutcome::kFault;
    span.fault_reason = "nixl_lease_abort";
  }

  Entry entry = core_internal::BuildTransferEntry(KVTransfer{direction, span});
  entry.coherence.invalidation_mode = InvalidationMode::kExternalRefutation;
  entry.labels["nixl_lease"] = lease.lease_id;
  entry.labels["nixl_role"] = ToString(lease.role);
  entry.labels["nixl_event"] = ToString(lease.event);
  entry.labels["nixl_state"] = ToString(state);
  if (!lease.remote_engine.empty()) entry.labels["remote_engine"] = lease.remote_engine;
  if (!lease.trace_id.empty()) entry.labels["trace_id"] = lease.trace_id;
  if (!lease.request_id.empty()) entry.labels["request_id"] = lease.request_id;
  if (lease.expires_at_ms > 0) {
    entry.labels["lease_expires_at"] = std::to_string(lease.expires_at_ms);
  }
  return entry;
}

NIXLClearKind ClassifyNIXLClear(const NIXLClear& clear) {
  if (clear.exact_span_confirmed && !clear.span_digest.empty()) return NIXLClearKind::kExactSpan;
  if (clear.whole_prefix_reset) return NIXLClearKind::kWholePrefix;
  return NIXLClearKind::kNone;
}

std::optional<KVEvictionScope> EvictionScopeOf(NIXLClearKind kind) {
  switch (kind) {
    case NIXLClearKind::kExactSpan:
      return KVEvictionScope::kExactSpan;
    case NIXLClearKind::kWholePrefix:
      return KVEvictionScope::kWholePrefixCache;
    case NIXLClearKind::kNone:
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace kvgov
