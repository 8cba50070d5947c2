#include "kvgov/governance/governance_gate.h"

#include <algorithm>
#include <mutex>

namespace kvgov::governance {
namespace {

// The typed verdict reason of a lease that is not active.
LookupReason LeaseReason(NIXLLeaseState state) {
  switch (state) {
    case NIXLLeaseState::kCompleted:
      return LookupReason::kLeaseReleased;
    case NIXLLeaseState::kExpired:
      return LookupReason::kExpiredTTL;
    case NIXLLeaseState::kFailed:
      return LookupReason::kResidencyFault;
    case NIXLLeaseState::kUnidentified:
    case NIXLLeaseState::kActive:
      return LookupReason::kAbsent;
  }
  return LookupReason::kAbsent;
}

}  // namespace

router::SpanGate::Limit GovernanceGate::Creditable(std::string_view worker,
                                                   std::span<const index::BlockKey> chain,
                                                   size_t resident, int64_t now_ms) const {
  std::shared_lock lock(mu_);
  if (auto it = pending_workers_.find(worker); it != pending_workers_.end() && it->second > 0) {
    return {0, LookupKind::kMiss, LookupReason::kStale};
  }
  for (size_t i = 0; i < resident && i < chain.size(); ++i) {
    if (quarantined_.contains(chain[i])) {
      return {i, LookupKind::kQuarantine, LookupReason::kTaintDenied};
    }
    if (auto it = pending_.find({std::string(worker), chain[i]});
        it != pending_.end() && it->second > 0) {
      return {i, LookupKind::kMiss, LookupReason::kStale};
    }
    auto covered = covered_.find({std::string(worker), chain[i]});
    if (covered == covered_.end()) continue;
    auto lease = leases_.find(covered->second);
    if (lease == leases_.end()) continue;
    const NIXLLeaseState state = LeaseStateAt(lease->second.record, now_ms);
    if (state != NIXLLeaseState::kActive) return {i, LookupKind::kMiss, LeaseReason(state)};
  }
  return {resident};
}

void GovernanceGate::Quarantine(std::span<const index::BlockKey> keys) {
  std::unique_lock lock(mu_);
  quarantined_.insert(keys.begin(), keys.end());
}

bool GovernanceGate::IsQuarantined(index::BlockKey key) const {
  std::shared_lock lock(mu_);
  return quarantined_.contains(key);
}

size_t GovernanceGate::quarantined_blocks() const {
  std::shared_lock lock(mu_);
  return quarantined_.size();
}

void GovernanceGate::SetPending(std::string_view worker, std::span<const index::BlockKey> keys,
                                bool whole_worker, bool pending) {
  std::unique_lock lock(mu_);
  const int delta = pending ? 1 : -1;
  if (whole_worker) {
    int& count = pending_workers_[std::string(worker)];
    count = std::max(0, count + delta);
  }
  for (index::BlockKey key : keys) {
    int& count = pending_[{std::string(worker), key}];
    count = std::max(0, count + delta);
  }
}

void GovernanceGate::CoverLease(const NIXLLease& record, std::string_view worker,
                                std::span<const index::BlockKey> keys) {
  std::unique_lock lock(mu_);
  Lease& lease = leases_[record.lease_id];
  lease.worker = std::string(worker);
  lease.keys.assign(keys.begin(), keys.end());
  lease.record = record;
  for (index::BlockKey key : keys) covered_[{lease.worker, key}] = record.lease_id;
}

void GovernanceGate::UpdateLease(const NIXLLease& record) {
  std::unique_lock lock(mu_);
  auto it = leases_.find(record.lease_id);
  if (it != leases_.end()) it->second.record = record;
}

}  // namespace kvgov::governance
