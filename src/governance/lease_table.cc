#include "kvgov/governance/lease_table.h"

namespace kvgov::governance {
namespace {

// A lease that ends by its clock unless an event ends it first.
bool MayExpire(const NIXLLease& lease) {
  return (lease.event == NIXLLeaseEvent::kCreate || lease.event == NIXLLeaseEvent::kHeartbeat) &&
         lease.expires_at_ms > 0;
}

}  // namespace

void LeaseTable::MarkEndedLocked(const std::string& lease_id, int64_t at_ms,
                                 NIXLLeaseWitness witness) {
  if (!ended_at_ms_.try_emplace(lease_id, at_ms).second) return;
  (witness == NIXLLeaseWitness::kHandoff ? ended_handoff_ : ended_reported_)
      .emplace(at_ms, lease_id);
}

void LeaseTable::PutLocked(const NIXLLease& lease, std::optional<int64_t> ended_at_ms) {
  auto [it, inserted] = leases_.try_emplace(lease.lease_id, lease);
  if (!inserted) {
    expiring_.erase({it->second.expires_at_ms, lease.lease_id});
    it->second = lease;
  }
  if (ended_at_ms.has_value()) MarkEndedLocked(lease.lease_id, *ended_at_ms, lease.witness);
  if (MayExpire(lease) && !ended_at_ms_.contains(lease.lease_id)) {
    expiring_.emplace(lease.expires_at_ms, lease.lease_id);
  }
}

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
  MutexLock lock(mu_);
  return PreviewLocked(report, now_ms);
}

Result<std::optional<LeaseTransition>> LeaseTable::Apply(const NIXLLease& report, int64_t now_ms) {
  MutexLock lock(mu_);
  KVGOV_ASSIGN_OR_RETURN(Change change, PreviewLocked(report, now_ms));
  PutLocked(change.next, IsTerminal(LeaseStateAt(change.next, now_ms))
                             ? std::optional<int64_t>(now_ms)
                             : std::nullopt);
  return change.transition;
}

std::vector<LeaseTransition> LeaseTable::ExpireDue(int64_t now_ms) {
  MutexLock lock(mu_);
  std::vector<LeaseTransition> expired;
  while (!expiring_.empty() && expiring_.begin()->first <= now_ms) {
    const std::string id = expiring_.begin()->second;
    expiring_.erase(expiring_.begin());
    auto lease = leases_.find(id);
    if (lease == leases_.end()) continue;
    // Make the expiry explicit in the record, so it reads the same after a
    // restart whatever the clock then says.
    lease->second.event = NIXLLeaseEvent::kExpiry;
    MarkEndedLocked(id, now_ms, lease->second.witness);
    expired.push_back(
        LeaseTransition{id, NIXLLeaseState::kActive, NIXLLeaseState::kExpired, now_ms});
  }
  return expired;
}

void LeaseTable::Restore(const NIXLLease& lease) {
  MutexLock lock(mu_);
  // An ended lease (by its event: the clock is not read here) is forgotten
  // like one that ended in this process; its end is not recorded, and it
  // ended no earlier than its grant.
  const bool ended = lease.event == NIXLLeaseEvent::kTransferComplete ||
                     lease.event == NIXLLeaseEvent::kAbort ||
                     lease.event == NIXLLeaseEvent::kExpiry;
  PutLocked(lease, ended ? std::optional<int64_t>(lease.granted_at_ms) : std::nullopt);
}

std::optional<NIXLLease> LeaseTable::Get(std::string_view lease_id) const {
  MutexLock lock(mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return std::nullopt;
  return it->second;
}

std::vector<NIXLLease> LeaseTable::All() const {
  MutexLock lock(mu_);
  std::vector<NIXLLease> out;
  for (const auto& [id, lease] : leases_) out.push_back(lease);
  return out;
}

std::map<NIXLLeaseState, uint64_t> LeaseTable::CountByState(int64_t now_ms) const {
  MutexLock lock(mu_);
  std::map<NIXLLeaseState, uint64_t> counts;
  for (const auto& [id, lease] : leases_) ++counts[LeaseStateAt(lease, now_ms)];
  return counts;
}

std::vector<std::string> LeaseTable::ForgetEndedBefore(int64_t cutoff_ms,
                                                       int64_t handoff_cutoff_ms) {
  MutexLock lock(mu_);
  std::vector<std::string> handoffs;
  auto forget = [this](ByTime& ended, int64_t cutoff, std::vector<std::string>* forgotten)
                    KVGOV_REQUIRES(mu_) {
                      while (!ended.empty() && ended.begin()->first < cutoff) {
                        const std::string& id = ended.begin()->second;
                        if (forgotten != nullptr) forgotten->push_back(id);
                        leases_.erase(id);
                        ended_at_ms_.erase(id);
                        ended.erase(ended.begin());
                      }
                    };
  forget(ended_reported_, cutoff_ms, nullptr);
  forget(ended_handoff_, handoff_cutoff_ms, &handoffs);
  return handoffs;
}

}  // namespace kvgov::governance
