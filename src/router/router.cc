#include "kvgov/router/router.h"

#include <algorithm>
#include <cmath>
#include <set>

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

// What ranks a candidate, packed apart from it so a sort compares these
// few bytes rather than reaching into each Candidate.
struct RankKey {
  bool eligible;
  double cost;
  double credited_blocks;
  double load_blocks;
  uint64_t affinity;
  uint32_t index;  // into the workers, which are sorted by id
};

// Eligible before ineligible; then lowest cost; ties go to more credited
// overlap, then lower load, then the higher affinity, then the smaller id,
// so equal inputs always give the same answer. Workers are listed by id,
// so comparing their indexes compares their ids.
bool BetterThan(const RankKey& a, const RankKey& b) {
  if (a.eligible != b.eligible) return a.eligible;
  if (!a.eligible) return a.index < b.index;
  if (a.cost != b.cost) return a.cost < b.cost;
  if (a.credited_blocks != b.credited_blocks) return a.credited_blocks > b.credited_blocks;
  if (a.load_blocks != b.load_blocks) return a.load_blocks < b.load_blocks;
  if (a.affinity != b.affinity) return a.affinity > b.affinity;
  return a.index < b.index;
}

const char* IneligibleReason(const RouteStatus* status, index::WorkerState state) {
  if (status != nullptr && !status->healthy) return "unhealthy";
  if (status != nullptr && status->draining) return "draining";
  if (state == index::WorkerState::kStale) return "stale";
  return nullptr;
}

// Whether adding these credits block by block gives exactly what a count of
// blocks per tier times each credit gives. It does when every credit is a
// multiple of 2^-8 no larger than 2^8 in magnitude: every partial sum is
// then a multiple of 2^-8 below 2^53 of them (for any prompt under 2^37
// blocks), so no addition rounds. The defaults (1, 0.75, 0.5, 0) are.
bool CreditSumsAreExact(const std::array<double, index::kIndexedTiers.size()>& credits) {
  for (double credit : credits) {
    if (!std::isfinite(credit) || std::abs(credit) > 256.0) return false;
    const double scaled = credit * 256.0;  // exact: a power of two
    if (scaled != std::trunc(scaled)) return false;
  }
  return true;
}

// `tier`'s place in index::kIndexedTiers, the order of every per-tier array.
constexpr size_t TierSlot(ResidencyTier tier) {
  size_t slot = 0;
  while (slot + 1 < index::kIndexedTiers.size() && index::kIndexedTiers[slot] != tier) ++slot;
  return slot;
}
constexpr size_t kHbmSlot = TierSlot(ResidencyTier::kHBM);
static_assert(index::kIndexedTiers[kHbmSlot] == ResidencyTier::kHBM);
static_assert(index::kIndexedTiers[TierSlot(ResidencyTier::kUnknown)] == ResidencyTier::kUnknown);

// Blocks in the engine's own device memory, where a prefill stores what it
// computes: its HBM, or where it does not say (an engine reporting no medium
// reports its GPU).
uint64_t HotBlocks(const index::WorkerResidency& worker) {
  return worker.blocks[kHbmSlot] + worker.blocks[TierSlot(ResidencyTier::kUnknown)];
}

// How many leading keys two chains share. A key stands for its whole prefix,
// so equal keys form a leading run: bisect for its end.
size_t CommonPrefix(std::span<const index::BlockKey> a, std::span<const index::BlockKey> b) {
  size_t lo = 0;  // keys [0, lo) are equal
  size_t hi = std::min(a.size(), b.size());
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (a[mid] == b[mid]) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The newest decisions sharing a first block that a route compares its
// chain with: a system prompt shared by thousands of requests in flight
// would otherwise cost a route thousands of comparisons.
constexpr size_t kMaxPrefillingCompared = 128;

// One block size's prompt keys and who holds how much of them.
struct ChainOverlap {
  int64_t block_size = 0;
  std::vector<index::BlockKey> keys;
  std::vector<index::WorkerOverlap> overlaps;  // sorted by worker id
  size_t next = 0;                             // merge cursor: workers are visited in id order too
};

}  // namespace

Router::Router(const index::ResidencyIndex* index, const WorkerStatusTable* status,
               RouteWeights weights, const SpanGate* gate)
    : index_(index),
      status_(status),
      weights_(weights),
      gate_(gate),
      exact_credit_sums_(CreditSumsAreExact(weights.tier_credit)),
      rng_(weights.seed) {}

WorkerLoad Router::LoadLocked(std::string_view worker,
                              const std::optional<ScrapedLoad>& scraped) const {
  WorkerLoad load;
  if (auto it = totals_.find(worker); it != totals_.end()) {
    load.in_flight_requests = it->second.requests;
    load.decoding_requests = it->second.decoding;
    load.in_flight_blocks = it->second.blocks;
  }
  if (auto it = peer_blocks_.find(worker); it != peer_blocks_.end()) {
    load.peer_blocks = it->second;
  }
  load.blocks = static_cast<double>(load.in_flight_blocks + load.peer_blocks);
  if (scraped.has_value()) {
    load.scraped = scraped;
    // The engine's own count includes what kvgov routed there; only the
    // rest is load kvgov does not already know by its blocks. With peer
    // replicas, their routed requests are in the engine's count and in
    // peer_blocks both: counted twice, bounded by the peers' in-flight
    // requests (peers publish blocks, not request counts).
    const double reported = scraped->running + scraped->waiting;
    const double unrouted = std::max(0.0, reported - static_cast<double>(load.in_flight_requests));
    load.blocks += weights_.unrouted_request_blocks * unrouted;
  }
  return load;
}

Result<RouteDecision> Router::Route(const RouteRequest& request, std::string_view cache_salt,
                                    std::string decision_id, int64_t now_ms) {
  return Decide(request, cache_salt, std::move(decision_id), now_ms, /*keep=*/true);
}

Result<RouteDecision> Router::Explain(const RouteRequest& request, std::string_view cache_salt,
                                      int64_t now_ms) {
  return Decide(request, cache_salt, "", now_ms, /*keep=*/false);
}

Result<RouteDecision> Router::Decide(const RouteRequest& request, std::string_view cache_salt,
                                     std::string decision_id, int64_t now_ms, bool keep) {
  if (request.model.empty()) return Status::InvalidArgument("model: required, got empty");
  std::vector<index::WorkerResidency> workers = index_->Workers();  // sorted by id
  std::erase_if(
      workers, [&](const index::WorkerResidency& worker) { return worker.model != request.model; });
  if (workers.empty()) {
    return Status::NotFound("model: no registered worker serves '" + request.model + "'");
  }
  const std::set<std::string, std::less<>> allowed(request.workers.begin(), request.workers.end());

  // Keys per block size: workers of one model normally share one.
  std::vector<ChainOverlap> chains;
  auto chain_for = [&chains](int64_t block_size) -> ChainOverlap* {
    for (ChainOverlap& chain : chains) {
      if (chain.block_size == block_size) return &chain;
    }
    return nullptr;
  };
  for (const index::WorkerResidency& worker : workers) {
    if (chain_for(worker.block_size) != nullptr) continue;
    ChainOverlap& chain = chains.emplace_back();
    chain.block_size = worker.block_size;
    chain.keys = index::RequestChain(index_->hasher(), {request.model, request.lora_name, 0},
                                     cache_salt, request.token_ids, worker.block_size);
    chain.overlaps = index_->Overlap(chain.keys);
  }

  RouteDecision decision;
  decision.decision_id = std::move(decision_id);
  decision.cache_salt = std::string(cache_salt);
  decision.prompt_blocks = chain_for(workers.front().block_size)->keys.size();
  std::optional<SpanGate::Limit> gated;  // the last refusal governance gave

  std::vector<std::string_view> ids;
  ids.reserve(workers.size());
  for (const index::WorkerResidency& worker : workers) ids.push_back(worker.id);
  const std::vector<std::optional<RouteStatus>> statuses = status_->RouteStatuses(ids);

  // What residency and governance give each worker needs no router state:
  // it is worked out before the lock.
  struct Credit {
    uint64_t resident_blocks = 0;
    uint64_t overlap_blocks = 0;
    uint64_t prefilling_blocks = 0;
    std::array<uint64_t, index::kIndexedTiers.size()> tier_overlap{};
    double credited_blocks = 0;
    uint64_t pulled_blocks = 0;
    uint64_t affinity = 0;
  };
  // Blocks that decisions routed to each worker are prefilling now. Read
  // apart from the loads below, so governance is not asked under mu_.
  std::vector<size_t> prefilling(workers.size(), 0);
  {
    MutexLock lock(mu_);
    for (const ChainOverlap& chain : chains) {
      if (prefilling_by_root_.empty()) break;
      for (const auto& [worker, blocks] : PrefillingLocked(chain.keys)) {
        for (size_t w = 0; w < workers.size(); ++w) {
          if (workers[w].id == worker && workers[w].block_size == chain.block_size) {
            prefilling[w] = blocks;
          }
        }
      }
    }
  }
  std::vector<Credit> credits(workers.size());
  for (size_t w = 0; w < workers.size(); ++w) {
    const index::WorkerResidency& worker = workers[w];
    Credit& credit = credits[w];
    ChainOverlap& chain = *chain_for(worker.block_size);
    while (chain.next < chain.overlaps.size() && chain.overlaps[chain.next].worker < worker.id) {
      ++chain.next;
    }
    credit.affinity = Affinity(chain.keys.empty() ? 0 : chain.keys.front(), worker.id);
    const index::WorkerOverlap* overlap =
        chain.next < chain.overlaps.size() && chain.overlaps[chain.next].worker == worker.id
            ? &chain.overlaps[chain.next]
            : nullptr;
    credit.resident_blocks = overlap != nullptr ? overlap->blocks : 0;
    // Governance bounds what will be resident as it bounds what is.
    size_t creditable = std::max<size_t>(credit.resident_blocks, prefilling[w]);
    if (creditable == 0) continue;
    if (gate_ != nullptr) {
      SpanGate::Limit limit = gate_->Creditable(worker.id, chain.keys, creditable, now_ms);
      if (limit.creditable < creditable) {
        creditable = limit.creditable;
        gated = limit;
      }
    }
    credit.overlap_blocks = creditable;
    const size_t resident = std::min<size_t>(creditable, credit.resident_blocks);
    if (resident > 0 && exact_credit_sums_) {
      if (resident == overlap->blocks) {
        credit.tier_overlap = overlap->by_tier;
      } else {
        for (size_t i = 0; i < resident; ++i) ++credit.tier_overlap[overlap->best_tier[i]];
      }
      for (size_t t = 0; t < credit.tier_overlap.size(); ++t) {
        credit.credited_blocks +=
            static_cast<double>(credit.tier_overlap[t]) * weights_.tier_credit[t];
      }
    } else {
      for (size_t i = 0; i < resident; ++i) {
        const uint8_t tier = overlap->best_tier[i];
        ++credit.tier_overlap[tier];
        credit.credited_blocks += weights_.tier_credit[tier];
      }
    }
    // What is being prefilled lands in the engine's hottest tier.
    credit.prefilling_blocks = creditable - resident;
    credit.tier_overlap[kHbmSlot] += credit.prefilling_blocks;
    credit.credited_blocks +=
        static_cast<double>(credit.prefilling_blocks) * weights_.tier_credit[kHbmSlot];
  }

  // Each worker's hot blocks over the fullest worker's: caches of one model
  // are alike in size, so this ranks how little room each has left.
  std::vector<double> fullness(workers.size(), 0.0);
  uint64_t fullest = 0;
  for (const index::WorkerResidency& worker : workers)
    fullest = std::max(fullest, HotBlocks(worker));
  for (size_t w = 0; fullest > 0 && w < workers.size(); ++w) {
    fullness[w] = static_cast<double>(HotBlocks(workers[w])) / static_cast<double>(fullest);
  }

  std::vector<WorkerLoad> loads(workers.size());
  std::vector<const char*> reasons(workers.size());
  std::vector<RankKey> ranking(workers.size());
  MutexLock lock(mu_);
  for (size_t w = 0; w < workers.size(); ++w) {
    const index::WorkerResidency& worker = workers[w];
    const RouteStatus* status = statuses[w] ? &*statuses[w] : nullptr;
    loads[w] = LoadLocked(worker.id, status ? status->scraped : std::nullopt);
    const WorkerLoad& load = loads[w];
    const double prompt_blocks = static_cast<double>(chain_for(worker.block_size)->keys.size());
    // A pinned block a worker lacks is pulled, not computed (decode step).
    const uint64_t pullable =
        std::min<uint64_t>(request.pullable_blocks, chain_for(worker.block_size)->keys.size());
    credits[w].pulled_blocks =
        pullable > credits[w].overlap_blocks ? pullable - credits[w].overlap_blocks : 0;
    const double computed =
        prompt_blocks - std::max(credits[w].credited_blocks, static_cast<double>(pullable));
    // Blocks it computes are stored in its cache; the fuller that cache,
    // the more reusable KV they displace (docs/adr/0037).
    const double cost =
        (weights_.overlap_weight + weights_.cache_pressure_weight * fullness[w]) * computed +
        weights_.pull_weight * static_cast<double>(credits[w].pulled_blocks) + load.blocks;
    const char* reason = nullptr;
    if (!allowed.empty() && !allowed.contains(worker.id)) {
      reason = "not_allowed";
    } else {
      reason = IneligibleReason(status, worker.state);
    }
    // A salted request there would key as unsalted (ADR 0019).
    if (reason == nullptr && !cache_salt.empty() &&
        worker.salts == index::SaltReporting::kNotReported) {
      reason = "salt_blind";
    }
    if (reason == nullptr && request.salt_must_be_honoured &&
        worker.salts != index::SaltReporting::kReported) {
      reason = "salt_unverified";
    }
    if (reason == nullptr && weights_.busy_load_blocks > 0 &&
        load.blocks >= weights_.busy_load_blocks) {
      reason = "busy";
    }
    reasons[w] = reason;
    ranking[w] = {.eligible = reason == nullptr,
                  .cost = cost,
                  .credited_blocks = credits[w].credited_blocks,
                  .load_blocks = load.blocks,
                  .affinity = credits[w].affinity,
                  .index = static_cast<uint32_t>(w)};
  }
  std::sort(ranking.begin(), ranking.end(), BetterThan);
  // Built once, in their final order.
  decision.candidates.resize(ranking.size());
  for (size_t rank = 0; rank < ranking.size(); ++rank) {
    const RankKey& key = ranking[rank];
    const Credit& credit = credits[key.index];
    Candidate& candidate = decision.candidates[rank];
    candidate.worker = workers[key.index].id;
    candidate.resident_blocks = credit.resident_blocks;
    candidate.overlap_blocks = credit.overlap_blocks;
    candidate.prefilling_blocks = credit.prefilling_blocks;
    candidate.cache_fullness = fullness[key.index];
    candidate.tier_overlap = credit.tier_overlap;
    candidate.credited_blocks = credit.credited_blocks;
    candidate.pulled_blocks = credit.pulled_blocks;
    candidate.load = loads[key.index];
    candidate.cost = key.cost;
    candidate.eligible = key.eligible;
    if (reasons[key.index] != nullptr) candidate.reason = reasons[key.index];
  }

  const Candidate* chosen = nullptr;
  if (!decision.candidates.empty() && decision.candidates.front().eligible) {
    chosen = &decision.candidates.front();
    // A dry run shows the best-ranked choice, the one a draw favours most,
    // and leaves the generator where Route's next draw expects it.
    if (weights_.temperature > 0 && keep) {
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
  if (!keep) return decision;
  const double to_prefill =
      static_cast<double>(decision.prompt_blocks) -
      std::max(chosen->credited_blocks,
               static_cast<double>(std::min(request.pullable_blocks, decision.prompt_blocks)));
  const uint64_t blocks = std::max<uint64_t>(static_cast<uint64_t>(std::ceil(to_prefill)), 1);
  if (auto known = decisions_.find(decision.decision_id); known != decisions_.end()) {
    ReleaseLocked(known);  // an id given twice: the later decision stands
  }
  InFlight& kept = decisions_[decision.decision_id];
  kept = InFlight{.worker = decision.worker,
                  .tenant = request.tenant,
                  .prefilling = {},
                  .prompt_blocks = decision.prompt_blocks,
                  .blocks = blocks,
                  .decoding = false,
                  .created_ms = now_ms};
  // Workers are sorted by id.
  const auto chosen_worker = std::lower_bound(
      workers.begin(), workers.end(), decision.worker,
      [](const index::WorkerResidency& worker, const std::string& id) { return worker.id < id; });
  RememberPrefillingLocked(kept, chain_for(chosen_worker->block_size)->keys);
  decisions_by_age_.emplace(now_ms, decision.decision_id);
  Totals& totals = totals_[decision.worker];
  ++totals.requests;
  totals.blocks += blocks;
  while (decisions_.size() > weights_.max_decisions_in_flight) {
    ReleaseLocked(decisions_.find(decisions_by_age_.begin()->second));
    ++decisions_evicted_;
  }
  return decision;
}

void Router::ReleaseLocked(Decisions::iterator it) {
  auto totals = totals_.find(it->second.worker);
  if (totals != totals_.end()) {
    totals->second.requests -= std::min<uint64_t>(totals->second.requests, 1);
    if (it->second.decoding) {
      totals->second.decoding -= std::min<uint64_t>(totals->second.decoding, 1);
    }
    totals->second.blocks -= std::min(totals->second.blocks, it->second.blocks);
  }
  ForgetPrefillingLocked(it->second);
  decisions_by_age_.erase({it->second.created_ms, it->first});
  decisions_.erase(it);
}

Status Router::Prefilled(std::string_view decision_id, std::string_view caller_tenant) {
  MutexLock lock(mu_);
  auto it = FindLocked(decision_id, caller_tenant);
  if (it == decisions_.end()) return UnknownDecision(decision_id);
  InFlight& decision = it->second;
  if (decision.decoding) return Status::Ok();
  // Rounded up, as the prefill load is.
  const double kv_load = weights_.decode_load_weight * static_cast<double>(decision.prompt_blocks);
  const uint64_t blocks = static_cast<uint64_t>(std::ceil(std::max(0.0, kv_load)));
  Totals& totals = totals_[decision.worker];
  totals.blocks -= std::min(totals.blocks, decision.blocks);
  totals.blocks += blocks;
  ++totals.decoding;
  decision.blocks = blocks;
  decision.decoding = true;
  // Its blocks are computed: from here the engine's events speak for them.
  ForgetPrefillingLocked(decision);
  return Status::Ok();
}

std::vector<std::pair<std::string_view, size_t>> Router::PrefillingLocked(
    std::span<const index::BlockKey> chain) const {
  std::vector<std::pair<std::string_view, size_t>> deepest;
  if (chain.empty()) return deepest;
  auto bucket = prefilling_by_root_.find(chain.front());
  if (bucket == prefilling_by_root_.end()) return deepest;
  const std::vector<const InFlight*>& sharing = bucket->second;
  const size_t first = sharing.size() - std::min(sharing.size(), kMaxPrefillingCompared);
  for (size_t i = first; i < sharing.size(); ++i) {
    const InFlight& decision = *sharing[i];
    const size_t blocks = CommonPrefix(decision.prefilling, chain);
    auto known = std::find_if(deepest.begin(), deepest.end(),
                              [&](const auto& entry) { return entry.first == decision.worker; });
    if (known == deepest.end()) {
      deepest.emplace_back(decision.worker, blocks);
    } else {
      known->second = std::max(known->second, blocks);
    }
  }
  return deepest;
}

void Router::RememberPrefillingLocked(InFlight& decision, std::vector<index::BlockKey> chain) {
  if (chain.empty() || prefilling_blocks_ + chain.size() > weights_.max_prefilling_blocks) return;
  prefilling_blocks_ += chain.size();
  prefilling_by_root_[chain.front()].push_back(&decision);
  decision.prefilling = std::move(chain);
}

void Router::ForgetPrefillingLocked(InFlight& decision) {
  if (decision.prefilling.empty()) return;
  auto bucket = prefilling_by_root_.find(decision.prefilling.front());
  if (bucket != prefilling_by_root_.end()) {
    std::erase(bucket->second, &decision);
    if (bucket->second.empty()) prefilling_by_root_.erase(bucket);
  }
  prefilling_blocks_ -= std::min(prefilling_blocks_, decision.prefilling.size());
  decision.prefilling = {};
}

Router::Decisions::iterator Router::FindLocked(std::string_view decision_id,
                                               std::string_view caller_tenant) {
  auto it = decisions_.find(decision_id);
  // Another tenant's decision is not the caller's to learn of.
  if (it != decisions_.end() && !caller_tenant.empty() && it->second.tenant != caller_tenant) {
    return decisions_.end();
  }
  return it;
}

Status Router::UnknownDecision(std::string_view decision_id) {
  return Status::NotFound("decision '" + std::string(decision_id) +
                          "' is unknown or already released");
}

Status Router::Done(std::string_view decision_id, std::string_view caller_tenant) {
  MutexLock lock(mu_);
  auto it = FindLocked(decision_id, caller_tenant);
  if (it == decisions_.end()) return UnknownDecision(decision_id);
  ReleaseLocked(it);
  return Status::Ok();
}

size_t Router::ExpireDecisions(int64_t now_ms) {
  MutexLock lock(mu_);
  size_t released = 0;
  while (!decisions_by_age_.empty() &&
         now_ms - decisions_by_age_.begin()->first >= weights_.decision_ttl_ms) {
    ReleaseLocked(decisions_.find(decisions_by_age_.begin()->second));
    ++released;
  }
  return released;
}

uint64_t Router::decisions_evicted() const {
  MutexLock lock(mu_);
  return decisions_evicted_;
}

WorkerLoad Router::LoadOf(std::string_view worker) const {
  std::optional<WorkerStatus> status = status_->Get(worker);
  MutexLock lock(mu_);
  return LoadLocked(worker, status ? status->scraped : std::nullopt);
}

std::map<std::string, uint64_t, std::less<>> Router::InFlightBlocks() const {
  std::map<std::string, uint64_t, std::less<>> blocks;
  MutexLock lock(mu_);
  for (const auto& [worker, totals] : totals_) {
    if (totals.blocks > 0) blocks.emplace(worker, totals.blocks);
  }
  return blocks;
}

void Router::SetPeerLoad(std::map<std::string, uint64_t, std::less<>> blocks_by_worker) {
  MutexLock lock(mu_);
  peer_blocks_ = std::move(blocks_by_worker);
}

std::string IneligibleReasons(const RouteDecision& decision) {
  std::string reasons;
  for (const Candidate& c : decision.candidates) {
    reasons += (reasons.empty() ? "" : ", ") + c.worker + ": " + c.reason;
  }
  return reasons;
}

}  // namespace kvgov::router
