#include "server/route_state.h"

#include <utility>

#include "kvgov/clock/clock.h"

namespace kvgov::server {

Result<journal::VerifyReport> ChainCheck::Verify(const store::Store& store, uint64_t head_seq) {
  MutexLock lock(mu_);
  const int64_t now_ms = clock::NowMillis();
  const bool whole = !cursor_.has_value() || cursor_->report.first_broken_seq.has_value() ||
                     now_ms - whole_walk_at_ms_ >= kWholeWalkEvery;
  if (!whole && cursor_->next_seq > head_seq) return cursor_->report;  // nothing new
  KVGOV_ASSIGN_OR_RETURN(journal::VerifyCursor cursor,
                         journal::VerifyFrom(store, whole ? journal::VerifyCursor{} : *cursor_));
  if (whole) whole_walk_at_ms_ = now_ms;
  cursor_ = std::move(cursor);
  return cursor_->report;
}

void RouteTotals::Count(const router::RouteDecision& decision) {
  routes_.fetch_add(1, std::memory_order_relaxed);
  prompt_blocks_.fetch_add(decision.prompt_blocks, std::memory_order_relaxed);
  credited_blocks_.fetch_add(decision.overlap_blocks, std::memory_order_relaxed);
}

metrics::TrafficTotals RouteTotals::Read(const metrics::CacheAccounting& accounting) const {
  metrics::TrafficTotals totals;
  totals.routes = routes_.load(std::memory_order_relaxed);
  totals.prompt_blocks = prompt_blocks_.load(std::memory_order_relaxed);
  totals.credited_blocks = credited_blocks_.load(std::memory_order_relaxed);
  for (const auto& [source, spelling] : EnumSpelling<Source>::kValues) {
    totals.saved_tokens[static_cast<size_t>(source)] = accounting.SavedTokens(source);
  }
  return totals;
}

void OpenPredictions::Add(std::string decision_id, Open open) {
  MutexLock lock(mu_);
  if (!open_.emplace(decision_id, std::move(open)).second) return;
  order_.push_back(std::move(decision_id));
  // Ids taken or forgotten leave stale entries in order_; they are skipped.
  while (open_.size() > kMaxOpen && !order_.empty()) {
    open_.erase(order_.front());
    order_.pop_front();
  }
  if (order_.size() > 2 * kMaxOpen) {
    std::deque<std::string> kept;
    for (std::string& id : order_) {
      if (open_.contains(id)) kept.push_back(std::move(id));
    }
    order_ = std::move(kept);
  }
}

std::optional<OpenPredictions::Open> OpenPredictions::Take(std::string_view decision_id) {
  MutexLock lock(mu_);
  auto it = open_.find(decision_id);
  if (it == open_.end()) return std::nullopt;
  Open open = std::move(it->second);
  open_.erase(it);
  return open;
}

void TenantsSeen::Note(const std::string& tenant) {
  if (tenant.empty()) return;
  MutexLock lock(mu_);
  if (tenants_.size() < kMaxTenants) tenants_.insert(tenant);
}

bool TenantsSeen::Contains(std::string_view tenant) const {
  MutexLock lock(mu_);
  return tenants_.size() >= kMaxTenants || tenants_.contains(tenant);
}

}  // namespace kvgov::server
