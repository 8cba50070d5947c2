#include "kvgov/governance/governance_gate.h"

#include <algorithm>
#include <mutex>
#include <unordered_set>

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
  if (!holds_anything_.load(std::memory_order_acquire)) return {resident};
  ReaderLock lock(mu_);
  const auto rules_it = workers_.find(worker);
  const WorkerRules* rules = rules_it == workers_.end() ? nullptr : &rules_it->second;
  if (rules != nullptr && rules->whole_worker_pending > 0) {
    return {0, LookupKind::kMiss, LookupReason::kStale};
  }
  const bool check_quarantine = !quarantined_.empty();
  const bool check_pending = rules != nullptr && !rules->pending.empty();
  const bool check_leases = rules != nullptr && !rules->covered.empty();
  // Called once per worker holding the prompt on every route: with nothing
  // to check, walking the chain would only cost lookups.
  if (!check_quarantine && !check_pending && !check_leases) return {resident};
  for (size_t i = 0; i < resident && i < chain.size(); ++i) {
    if (check_quarantine && quarantined_.contains(chain[i])) {
      return {i, LookupKind::kQuarantine, LookupReason::kTaintDenied};
    }
    if (check_pending && rules->pending.contains(chain[i])) {
      return {i, LookupKind::kMiss, LookupReason::kStale};
    }
    if (!check_leases) continue;
    auto covered = rules->covered.find(chain[i]);
    if (covered == rules->covered.end()) continue;
    auto lease = leases_.find(covered->second);
    if (lease == leases_.end()) continue;
    const NIXLLeaseState state = LeaseStateAt(lease->second.record, now_ms);
    if (state != NIXLLeaseState::kActive) return {i, LookupKind::kMiss, LeaseReason(state)};
  }
  return {resident};
}

void GovernanceGate::Quarantine(std::string_view id, std::span<const index::BlockKey> keys) {
  WriterLock lock(mu_);
  if (quarantines_.contains(id)) return;
  std::vector<index::BlockKey>& named = quarantines_[std::string(id)].keys;
  named.assign(keys.begin(), keys.end());
  // A key named twice by one quarantine is counted once.
  std::sort(named.begin(), named.end());
  named.erase(std::unique(named.begin(), named.end()), named.end());
  for (index::BlockKey key : named) ++quarantined_[key];
  UpdateHoldsAnything();
}

bool GovernanceGate::Lift(std::string_view id) {
  WriterLock lock(mu_);
  auto it = quarantines_.find(id);
  if (it == quarantines_.end()) return false;
  for (index::BlockKey key : it->second.keys) {
    if (auto counted = quarantined_.find(key);
        counted != quarantined_.end() && --counted->second <= 0) {
      quarantined_.erase(counted);
    }
  }
  quarantines_.erase(it);
  UpdateHoldsAnything();
  return true;
}

bool GovernanceGate::IsQuarantined(index::BlockKey key) const {
  ReaderLock lock(mu_);
  return quarantined_.contains(key);
}

std::vector<std::string> GovernanceGate::QuarantinesCrossed(
    std::span<const index::BlockKey> chain) const {
  std::vector<std::string> crossed;
  if (!HoldsQuarantines()) return crossed;
  ReaderLock lock(mu_);
  for (index::BlockKey key : chain) {
    if (!quarantined_.contains(key)) continue;
    // Few quarantines are in force at once; the walk runs only for a
    // prompt that does cross one.
    for (const auto& [id, entry] : quarantines_) {
      if (std::binary_search(entry.keys.begin(), entry.keys.end(), key)) crossed.push_back(id);
    }
  }
  std::sort(crossed.begin(), crossed.end());
  crossed.erase(std::unique(crossed.begin(), crossed.end()), crossed.end());
  return crossed;
}

void GovernanceGate::CountDiverted(std::span<const std::string> ids) const {
  ReaderLock lock(mu_);
  for (const std::string& id : ids) {
    if (auto it = quarantines_.find(id); it != quarantines_.end()) {
      it->second.diverted.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

uint64_t GovernanceGate::Diverted(std::string_view id) const {
  ReaderLock lock(mu_);
  auto it = quarantines_.find(id);
  return it == quarantines_.end() ? 0 : it->second.diverted.load(std::memory_order_relaxed);
}

size_t GovernanceGate::quarantined_blocks() const {
  ReaderLock lock(mu_);
  return quarantined_.size();
}

void GovernanceGate::UpdateHoldsAnything() {
  holds_anything_.store(!quarantined_.empty() || !workers_.empty(), std::memory_order_release);
  holds_quarantines_.store(!quarantined_.empty(), std::memory_order_release);
}

void GovernanceGate::ForgetIfEmpty(std::map<std::string, WorkerRules, std::less<>>::iterator it) {
  const WorkerRules& rules = it->second;
  if (rules.whole_worker_pending == 0 && rules.pending.empty() && rules.covered.empty()) {
    workers_.erase(it);
  }
}

void GovernanceGate::SetPending(std::string_view worker, std::span<const index::BlockKey> keys,
                                bool whole_worker, bool pending) {
  WriterLock lock(mu_);
  auto it = workers_.find(worker);
  if (it == workers_.end()) {
    // Releasing what was never pending changes nothing (counts stop at 0).
    if (!pending) return;
    it = workers_.emplace(std::string(worker), WorkerRules{}).first;
  }
  WorkerRules& rules = it->second;
  if (whole_worker) {
    rules.whole_worker_pending = std::max(0, rules.whole_worker_pending + (pending ? 1 : -1));
  }
  for (index::BlockKey key : keys) {
    if (pending) {
      ++rules.pending[key];
      continue;
    }
    auto count = rules.pending.find(key);
    if (count != rules.pending.end() && --count->second == 0) rules.pending.erase(count);
  }
  ForgetIfEmpty(it);
  UpdateHoldsAnything();
}

void GovernanceGate::CoverLease(const NIXLLease& record, std::string_view worker,
                                std::span<const index::BlockKey> keys) {
  if (record.witness == NIXLLeaseWitness::kHandoff) return;
  WriterLock lock(mu_);
  Lease& lease = leases_[record.lease_id];
  lease.worker = std::string(worker);
  lease.keys.assign(keys.begin(), keys.end());
  lease.record = record;
  auto it = workers_.find(worker);
  if (it == workers_.end()) it = workers_.emplace(lease.worker, WorkerRules{}).first;
  for (index::BlockKey key : keys) it->second.covered[key] = record.lease_id;
  ForgetIfEmpty(it);
  UpdateHoldsAnything();
}

void GovernanceGate::UpdateLease(const NIXLLease& record) {
  WriterLock lock(mu_);
  auto it = leases_.find(record.lease_id);
  if (it != leases_.end()) it->second.record = record;
}

size_t GovernanceGate::ForgetEnded(
    int64_t now_ms, const std::function<bool(std::string_view, index::BlockKey)>& held) {
  // What to ask about, copied under the lock; `held` reads the index, whose
  // locks a route may hold while it waits for this gate's.
  struct Ended {
    std::string id;
    std::string worker;
    std::vector<index::BlockKey> keys;
  };
  std::vector<Ended> ended;
  {
    ReaderLock lock(mu_);
    for (const auto& [id, lease] : leases_) {
      if (lease.next_check_ms <= now_ms &&
          LeaseStateAt(lease.record, now_ms) != NIXLLeaseState::kActive) {
        ended.push_back({id, lease.worker, lease.keys});
      }
    }
  }
  if (ended.empty()) return 0;
  std::vector<std::pair<size_t, std::vector<index::BlockKey>>> gone;  // by ended's index
  for (size_t i = 0; i < ended.size(); ++i) {
    std::vector<index::BlockKey> keys;
    for (index::BlockKey key : ended[i].keys) {
      if (!held(ended[i].worker, key)) keys.push_back(key);
    }
    if (!keys.empty()) gone.emplace_back(i, std::move(keys));
  }
  size_t dropped = 0;
  WriterLock lock(mu_);
  for (const Ended& asked : ended) {
    if (auto lease = leases_.find(asked.id); lease != leases_.end()) {
      lease->second.next_check_ms = now_ms + kEndedRecheckMs;
    }
  }
  for (auto& [i, keys] : gone) {
    auto lease = leases_.find(ended[i].id);
    // Covered anew meanwhile (a create under a reused id): not this lease.
    if (lease == leases_.end() ||
        LeaseStateAt(lease->second.record, now_ms) == NIXLLeaseState::kActive) {
      continue;
    }
    auto rules = workers_.find(lease->second.worker);
    if (rules != workers_.end()) {
      for (index::BlockKey key : keys) {
        auto covered = rules->second.covered.find(key);
        // Only this lease's own entries: a later lease may cover the key.
        if (covered != rules->second.covered.end() && covered->second == ended[i].id) {
          rules->second.covered.erase(covered);
        }
      }
      ForgetIfEmpty(rules);
    }
    const std::unordered_set<index::BlockKey> left(keys.begin(), keys.end());
    std::erase_if(lease->second.keys, [&](index::BlockKey key) { return left.contains(key); });
    if (lease->second.keys.empty()) {
      leases_.erase(lease);
      ++dropped;
    }
  }
  // Ended leases that covered nothing (a span that could not be read).
  std::erase_if(leases_, [&](const auto& entry) {
    const bool empty_and_ended =
        entry.second.keys.empty() &&
        LeaseStateAt(entry.second.record, now_ms) != NIXLLeaseState::kActive;
    dropped += empty_and_ended ? 1 : 0;
    return empty_and_ended;
  });
  UpdateHoldsAnything();
  return dropped;
}

size_t GovernanceGate::lease_count() const {
  ReaderLock lock(mu_);
  return leases_.size();
}

}  // namespace kvgov::governance
