#include "kvgov/router/router.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "kvgov/core/digest.h"
#include "kvgov/index/block_key.h"

namespace kvgov::router {
namespace {

// The rendezvous score of a prompt's first block on a worker. Among equally
// good workers each prefix has its own first choice: cold prefixes spread
// over the fleet instead of all landing on the smallest id, and repeats of
// one prefix agree on a worker even before its engine's events arrive.
uint64_t Affinity(index::BlockKey first_block, std::string_view worker) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over the id, then a SplitMix finish
  for (char c : worker) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  h ^= first_block + 0x9e3779b97f4a7c15ULL;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

struct Ranked {
  Candidate candidate;
  uint64_t affinity;
};

// Eligible before ineligible; then lowest cost; ties go to more credited
// overlap, then lower load, then the higher affinity, then the smaller id,
// so equal inputs always give the same answer.
bool BetterThan(const Ranked& x, const Ranked& y) {
  const Candidate& a = x.candidate;
  const Candidate& b = y.candidate;
  if (a.eligible != b.eligible) return a.eligible;
  if (!a.eligible) return a.worker < b.worker;
  if (a.cost != b.cost) return a.cost < b.cost;
  if (a.credited_blocks != b.credited_blocks) return a.credited_blocks > b.credited_blocks;
  if (a.load.blocks != b.load.blocks) return a.load.blocks < b.load.blocks;
  if (x.affinity != y.affinity) return x.affinity > y.affinity;
  return a.worker < b.worker;
}

const char* IneligibleReason(const WorkerStatus* status, index::WorkerState state) {
  if (status != nullptr && !status->healthy) return "unhealthy";
  if (status != nullptr && status->draining) return "draining";
  if (state == index::WorkerState::kStale) return "stale";
  return nullptr;
}

}  // namespace

Router::Router(const index::ResidencyIndex* index, const WorkerStatusTable* status,
               RouteWeights weights, const SpanGate* gate)
    : index_(index), status_(status), weights_(weights), gate_(gate), rng_(weights.seed) {}

WorkerLoad Router::LoadLocked(const std::string& worker, const WorkerStatus* status) const {
  WorkerLoad load;
  if (auto it = totals_.find(worker); it != totals_.end()) {
    load.in_flight_requests = it->second.requests;
    load.in_flight_blocks = it->second.blocks;
  }
  load.blocks = static_cast<double>(load.in_flight_blocks);
  if (status != nullptr && status->scraped.has_value()) {
    load.scraped = status->scraped;
    // The engine's own count includes what kvgov routed there; only the
    // rest is load kvgov does not already know by its blocks.
    const double reported = status->scraped->running + status->scraped->waiting;
    const double unrouted = std::max(0.0, reported - static_cast<double>(load.in_flight_requests));
    load.blocks += weights_.unrouted_request_blocks * unrouted;
  }
  return load;
}

Result<RouteDecision> Router::Route(const RouteRequest& request, std::string_view cache_salt,
                                    std::string decision_id, int64_t now_ms) {
  if (request.model.empty()) return Status::InvalidArgument("model: required, got empty");
  std::vector<index::WorkerResidency> workers;
  for (index::WorkerResidency& worker : index_->Workers()) {
    if (worker.model == request.model) workers.push_back(std::move(worker));
  }
  if (workers.empty()) {
    return Status::NotFound("model: no registered worker serves '" + request.model + "'");
  }
  const std::set<std::string, std::less<>> allowed(request.workers.begin(),
                                                   request.workers.end());

  // Keys per block size: workers of one model normally share one.
  std::map<int64_t, std::vector<index::BlockKey>> chains;
  std::map<int64_t, std::map<std::string, index::WorkerOverlap, std::less<>>> overlaps;
  for (const index::WorkerResidency& worker : workers) {
    if (chains.contains(worker.block_size)) continue;
    std::vector<index::BlockKey> chain = index::RequestChain(
        index_->hasher(), {request.model, request.lora_name, 0}, cache_salt, request.token_ids,
        worker.block_size);
    for (index::WorkerOverlap& overlap : index_->Overlap(chain)) {
      std::string id = overlap.worker;
      overlaps[worker.block_size].emplace(std::move(id), std::move(overlap));
    }
    chains.emplace(worker.block_size, std::move(chain));
  }

  RouteDecision decision;
  decision.decision_id = std::move(decision_id);
  decision.cache_salt = std::string(cache_salt);
  decision.prompt_blocks = chains.at(workers.front().block_size).size();
  std::optional<SpanGate::Limit> gated;  // the last refusal governance gave

  std::vector<Ranked> ranked;
  ranked.reserve(workers.size());
  std::lock_guard lock(mu_);
  for (const index::WorkerResidency& worker : workers) {
    std::optional<WorkerStatus> status = status_->Get(worker.id);
    Candidate candidate;
    candidate.worker = worker.id;
    const std::vector<index::BlockKey>& chain = chains.at(worker.block_size);
    const auto& by_worker = overlaps[worker.block_size];
    if (auto it = by_worker.find(worker.id); it != by_worker.end()) {
      const index::WorkerOverlap& overlap = it->second;
      candidate.resident_blocks = overlap.blocks;
      size_t creditable = overlap.blocks;
      if (gate_ != nullptr) {
        SpanGate::Limit limit = gate_->Creditable(worker.id, chain, overlap.blocks, now_ms);
        if (limit.creditable < creditable) {
          creditable = limit.creditable;
          gated = limit;
        }
      }
      candidate.overlap_blocks = creditable;
      for (size_t i = 0; i < creditable; ++i) {
        const uint8_t tier = overlap.best_tier[i];
        ++candidate.tier_overlap[tier];
        candidate.credited_blocks += weights_.tier_credit[tier];
      }
    }
    candidate.load = LoadLocked(worker.id, status ? &*status : nullptr);
    const double prompt_blocks = static_cast<double>(chain.size());
    candidate.cost = weights_.overlap_weight * (prompt_blocks - candidate.credited_blocks) +
                     candidate.load.blocks;
    const char* reason = nullptr;
    if (!allowed.empty() && !allowed.contains(worker.id)) {
      reason = "not_allowed";
    } else {
      reason = IneligibleReason(status ? &*status : nullptr, worker.state);
    }
    if (reason == nullptr && weights_.busy_load_blocks > 0 &&
        candidate.load.blocks >= weights_.busy_load_blocks) {
      reason = "busy";
    }
    candidate.eligible = reason == nullptr;
    if (reason != nullptr) candidate.reason = reason;
    const uint64_t affinity = Affinity(chain.empty() ? 0 : chain.front(), worker.id);
    ranked.push_back(Ranked{std::move(candidate), affinity});
  }
  std::sort(ranked.begin(), ranked.end(), BetterThan);
  decision.candidates.reserve(ranked.size());
  for (Ranked& entry : ranked) decision.candidates.push_back(std::move(entry.candidate));

  const Candidate* chosen = nullptr;
  if (!decision.candidates.empty() && decision.candidates.front().eligible) {
    chosen = &decision.candidates.front();
    if (weights_.temperature > 0) {
      // Softmax over costs relative to the best, scaled by the prompt so a
      // temperature means the same for short and long prompts.
      const double scale =
          weights_.temperature * std::max(1.0, static_cast<double>(decision.prompt_blocks));
      std::vector<double> odds;
      for (const Candidate& c : decision.candidates) {
        odds.push_back(c.eligible ? std::exp(-(c.cost - chosen->cost) / scale) : 0.0);
      }
      std::discrete_distribution<size_t> pick(odds.begin(), odds.end());
      chosen = &decision.candidates[pick(rng_)];
    }
  }
  if (chosen == nullptr) {
    decision.verdict = LookupVerdict::Miss(LookupReason::kAbsent);
    return decision;
  }

  decision.worker = chosen->worker;
  decision.overlap_blocks = chosen->overlap_blocks;
  if (chosen->overlap_blocks > 0) {
    decision.verdict.kind = LookupKind::kHit;
    decision.verdict.reason = LookupReason::kNone;
  } else if (chosen->resident_blocks > 0 && gated.has_value()) {
    decision.verdict.kind = gated->kind;
    decision.verdict.reason = gated->reason;
  } else {
    decision.verdict = LookupVerdict::Miss(LookupReason::kCold);
  }
  // The load a decision adds is the prefill it leaves the worker to do, in
  // the cost's own unit: a queue of mostly-cached requests costs the next
  // one little, a queue of cold prompts a lot (docs/adr/0008).
  const double to_prefill = static_cast<double>(decision.prompt_blocks) - chosen->credited_blocks;
  const uint64_t blocks = std::max<uint64_t>(static_cast<uint64_t>(std::ceil(to_prefill)), 1);
  decisions_[decision.decision_id] = InFlight{decision.worker, blocks, now_ms};
  Totals& totals = totals_[decision.worker];
  ++totals.requests;
  totals.blocks += blocks;
  return decision;
}

void Router::ReleaseLocked(std::map<std::string, InFlight, std::less<>>::iterator it) {
  auto totals = totals_.find(it->second.worker);
  if (totals != totals_.end()) {
    totals->second.requests -= std::min<uint64_t>(totals->second.requests, 1);
    totals->second.blocks -= std::min(totals->second.blocks, it->second.blocks);
  }
  decisions_.erase(it);
}

Status Router::Done(std::string_view decision_id) {
  std::lock_guard lock(mu_);
  auto it = decisions_.find(decision_id);
  if (it == decisions_.end()) {
    return Status::NotFound("decision '" + std::string(decision_id) +
                            "' is unknown or already released");
  }
  ReleaseLocked(it);
  return Status::Ok();
}

size_t Router::ExpireDecisions(int64_t now_ms) {
  std::lock_guard lock(mu_);
  size_t released = 0;
  for (auto it = decisions_.begin(); it != decisions_.end();) {
    auto next = std::next(it);
    if (now_ms - it->second.created_ms >= weights_.decision_ttl_ms) {
      ReleaseLocked(it);
      ++released;
    }
    it = next;
  }
  return released;
}

WorkerLoad Router::LoadOf(std::string_view worker) const {
  std::optional<WorkerStatus> status = status_->Get(worker);
  std::lock_guard lock(mu_);
  return LoadLocked(std::string(worker), status ? &*status : nullptr);
}

std::string TenantCacheSalt(std::string_view secret, std::string_view tenant) {
  return HmacSha256Hex(secret, "kvgov.cache_salt.v1:" + std::string(tenant)).substr(0, 32);
}

}  // namespace kvgov::router
