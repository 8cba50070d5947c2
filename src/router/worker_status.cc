#include "kvgov/router/worker_status.h"

namespace kvgov::router {
namespace {

Status UnknownWorker(std::string_view worker) {
  return Status::NotFound("worker '" + std::string(worker) + "' is not registered");
}

}  // namespace

Status WorkerStatusTable::Add(std::string_view worker, bool probed) {
  MutexLock lock(mu_);
  WorkerStatus status;
  status.id = std::string(worker);
  status.probed = probed;
  status.healthy = !probed;
  if (!workers_.emplace(status.id, std::move(status)).second) {
    return Status::AlreadyExists("worker '" + std::string(worker) + "' is already registered");
  }
  return Status::Ok();
}

Status WorkerStatusTable::Remove(std::string_view worker) {
  MutexLock lock(mu_);
  auto it = workers_.find(worker);
  if (it == workers_.end()) return UnknownWorker(worker);
  workers_.erase(it);
  return Status::Ok();
}

Status WorkerStatusTable::RecordProbe(std::string_view worker, bool ok, int64_t now_ms,
                                      std::string error) {
  MutexLock lock(mu_);
  auto it = workers_.find(worker);
  if (it == workers_.end()) return UnknownWorker(worker);
  WorkerStatus& status = it->second;
  status.last_probe_ms = now_ms;
  if (ok) {
    status.consecutive_failures = 0;
    status.healthy = true;
    status.last_probe_error.clear();
  } else {
    ++status.consecutive_failures;
    status.last_probe_error = std::move(error);
    if (status.consecutive_failures >= kFailuresToUnhealthy) status.healthy = false;
  }
  return Status::Ok();
}

Status WorkerStatusTable::RecordScrape(std::string_view worker, const ScrapedLoad& load) {
  MutexLock lock(mu_);
  auto it = workers_.find(worker);
  if (it == workers_.end()) return UnknownWorker(worker);
  it->second.scraped = load;
  return Status::Ok();
}

Status WorkerStatusTable::SetDraining(std::string_view worker, bool draining) {
  MutexLock lock(mu_);
  auto it = workers_.find(worker);
  if (it == workers_.end()) return UnknownWorker(worker);
  it->second.draining = draining;
  return Status::Ok();
}

std::optional<WorkerStatus> WorkerStatusTable::Get(std::string_view worker) const {
  MutexLock lock(mu_);
  auto it = workers_.find(worker);
  if (it == workers_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::optional<RouteStatus>> WorkerStatusTable::RouteStatuses(
    std::span<const std::string_view> workers) const {
  std::vector<std::optional<RouteStatus>> out(workers.size());
  MutexLock lock(mu_);
  // Sorted ids are met in map order: each is then the successor of the one
  // before, found without a search.
  auto next = workers_.begin();
  for (size_t i = 0; i < workers.size(); ++i) {
    auto it =
        next != workers_.end() && next->first == workers[i] ? next : workers_.find(workers[i]);
    if (it == workers_.end()) continue;
    out[i] = RouteStatus{it->second.healthy, it->second.draining, it->second.scraped};
    next = std::next(it);
  }
  return out;
}

std::vector<WorkerStatus> WorkerStatusTable::All() const {
  MutexLock lock(mu_);
  std::vector<WorkerStatus> out;
  out.reserve(workers_.size());
  for (const auto& [id, status] : workers_) out.push_back(status);
  return out;
}

}  // namespace kvgov::router
