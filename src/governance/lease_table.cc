#include "kvgov/governance/lease_table.h"

namespace kvgov::governance {

Result<LeaseTable::Change> LeaseTable::PreviewLocked(const NIXLLease& report,
                                                     int64_t now_ms) const {
  auto it = leases_.find(report.lease_id);
  if (report.event == NIXLLeaseEvent::kCreate) {
    if (it != leases_.end()) {
      return Status::AlreadyExists("lease '" + report.lease_id + "' was already created");
    }
    KVGOV_ASSIGN_OR_RETURN(NIXLLease granted, GrantNIXLLease(report, now_ms));
    const NIXLLeaseState state = LeaseStateAt(granted, now_ms);
    return Change{granted, LeaseTransition{granted.lease_id, std::nullopt, state, now_ms}};
  }
  if (it == leases_.end()) {
    return Status::NotFound("lease '" + report.lease_id + "' is unknown (no create seen)");
  }
  const NIXLLeaseState before = LeaseStateAt(it->second, now_ms);
  KVGOV_ASSIGN_OR_RETURN(NIXLLease next, ApplyNIXLLeaseEvent(it->second, report.event, now_ms));
  if (report.bytes_moved > 0) next.bytes_moved = report.bytes_moved;
  const NIXLLeaseState after = LeaseStateAt(next, now_ms);
  if (after == before) return Change{next, std::nullopt};
  return Change{next, LeaseTransition{next.lease_id, before, after, now_ms}};
}

Result<LeaseTable::Change> LeaseTable::Preview(const NIXLLease& report, int64_t now_ms) const {
  std::lock_guard lock(mu_);
  return PreviewLocked(report, now_ms);
}

Result<std::optional<LeaseTransition>> LeaseTable::Apply(const NIXLLease& report,
                                                         int64_t now_ms) {
  std::lock_guard lock(mu_);
  KVGOV_ASSIGN_OR_RETURN(Change change, PreviewLocked(report, now_ms));
  leases_[change.next.lease_id] = change.next;
  if (IsTerminal(LeaseStateAt(change.next, now_ms))) {
    ended_at_ms_.try_emplace(change.next.lease_id, now_ms);
  }
  return change.transition;
}

std::vector<LeaseTransition> LeaseTable::ExpireDue(int64_t now_ms) {
  std::lock_guard lock(mu_);
  std::vector<LeaseTransition> expired;
  for (auto& [id, lease] : leases_) {
    if (lease.event != NIXLLeaseEvent::kCreate && lease.event != NIXLLeaseEvent::kHeartbeat) {
      continue;  // already ended by an event
    }
    if (lease.expires_at_ms <= 0 || now_ms < lease.expires_at_ms) continue;
    if (ended_at_ms_.contains(id)) continue;  // expiry already recorded
    // Make the expiry explicit in the record, so it reads the same after a
    // restart whatever the clock then says.
    lease.event = NIXLLeaseEvent::kExpiry;
    ended_at_ms_.emplace(id, now_ms);
    expired.push_back(LeaseTransition{id, NIXLLeaseState::kActive, NIXLLeaseState::kExpired,
                                      now_ms});
  }
  return expired;
}

void LeaseTable::Restore(const NIXLLease& lease) {
  std::lock_guard lock(mu_);
  leases_[lease.lease_id] = lease;
  // An ended lease (by its event: the clock is not read here) is forgotten
  // like one that ended in this process; its end is not recorded, and it
  // ended no earlier than its grant.
  if (lease.event == NIXLLeaseEvent::kTransferComplete || lease.event == NIXLLeaseEvent::kAbort ||
      lease.event == NIXLLeaseEvent::kExpiry) {
    ended_at_ms_.emplace(lease.lease_id, lease.granted_at_ms);
  }
}

std::optional<NIXLLease> LeaseTable::Get(std::string_view lease_id) const {
  std::lock_guard lock(mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return std::nullopt;
  return it->second;
}

std::vector<NIXLLease> LeaseTable::All() const {
  std::lock_guard lock(mu_);
  std::vector<NIXLLease> out;
  for (const auto& [id, lease] : leases_) out.push_back(lease);
  return out;
}

std::map<NIXLLeaseState, uint64_t> LeaseTable::CountByState(int64_t now_ms) const {
  std::lock_guard lock(mu_);
  std::map<NIXLLeaseState, uint64_t> counts;
  for (const auto& [id, lease] : leases_) ++counts[LeaseStateAt(lease, now_ms)];
  return counts;
}

std::vector<std::string> LeaseTable::ForgetEndedBefore(int64_t cutoff_ms,
                                                       int64_t handoff_cutoff_ms) {
  std::lock_guard lock(mu_);
  std::vector<std::string> handoffs;
  for (auto it = ended_at_ms_.begin(); it != ended_at_ms_.end();) {
    auto lease = leases_.find(it->first);
    const bool handoff =
        lease != leases_.end() && lease->second.witness == NIXLLeaseWitness::kHandoff;
    if (it->second < (handoff ? handoff_cutoff_ms : cutoff_ms)) {
      if (handoff) handoffs.push_back(it->first);
      leases_.erase(it->first);
      it = ended_at_ms_.erase(it);
    } else {
      ++it;
    }
  }
  return handoffs;
}

}  // namespace kvgov::governance
