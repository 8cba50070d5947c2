#pragma once

#include <cstdint>
#include <string>

#include "kvgov/core/envelope.h"
#include "kvgov/core/lookup_verdict.h"
#include "kvgov/core/status.h"

namespace kvgov {

/// What a KV transport or engine reports about one span movement, whatever
/// the direction. Shared by KVTransfer and the Mooncake and LMCache records.
/// Carries no trust fields on purpose: a reporter cannot admit its own span.
struct KVSpanReport {
  std::string span_digest;  // required: the reporter's stable span identity
  int64_t tokens = 0;       // positions covered
  std::string model_id;
  std::string tokenizer_id;
  std::string serializer_id;
  PositionMode position_mode = PositionMode::kUnknown;  // unknown -> prefix_aligned
  ResidencyTier from_tier = ResidencyTier::kUnknown;
  ResidencyTier to_tier = ResidencyTier::kUnknown;
  std::string owner;  // empty -> the lowering's default owner
  std::string lease;
  KVTransferOutcome outcome = KVTransferOutcome::kOk;
  std::string fault_reason;
  int64_t bytes_moved = 0;
  DeletionCertificateRef deletion_certificate;
  friend bool operator==(const KVSpanReport&, const KVSpanReport&) = default;
};

/// One KV transfer, or an engine's own store or eviction of a span.
struct KVTransfer {
  KVTransferDirection direction = KVTransferDirection::kOffload;
  KVSpanReport span;
  friend bool operator==(const KVTransfer&, const KVTransfer&) = default;
};

/// Lowers a transfer onto the kv_transfer plane (source ride_engine, media
/// kv_span, unit positions, length = tokens). Residency is where the span
/// lives now: to_tier, owner (default "engine"), lease. Labels `direction`
/// and `outcome` always; `from_tier`, `to_tier`, `fault_reason` when set.
/// The entry is untrusted (tainted, agent scope, no admission verdict) until
/// an AdmissionPolicy admits it.
/// Returns InvalidArgument when span_digest is empty or a count is negative.
Result<Entry> FromKVTransfer(const KVTransfer& transfer);

/// Folds a kv_transfer entry into a verdict from its `direction` and
/// `outcome` labels: fault -> fault/residency_fault; missed ->
/// miss/restore_miss; ok -> hit, except direction evict -> miss/evicted (an
/// eviction is never a hit); a missing or unknown label -> miss/absent.
LookupVerdict KVTransferVerdict(const Entry& entry);

}  // namespace kvgov
