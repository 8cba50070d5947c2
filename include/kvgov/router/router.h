#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvgov/core/lookup_verdict.h"
#include "kvgov/core/mutex.h"
#include "kvgov/core/status.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/router/salts.h"
#include "kvgov/router/worker_status.h"

namespace kvgov::router {

/// The cost model's knobs (docs/formats/route-api.md). All live in the
/// config file and are reported at GET /v1/config.
struct RouteWeights {
  // Cost per prefill block still to compute, against 1 per block of prefill
  // already queued on the worker. Above 1 it values keeping a prefix where
  // it lives over the greedy lowest-TTFT choice (docs/adr/0008).
  double overlap_weight = 2.0;
  // Added to overlap_weight, per block a worker would prefill, in
  // proportion to how full its cache is (its hot blocks over the fullest
  // worker's): what it computes evicts reusable KV from a full cache and
  // nothing from an empty one. Spreads new prefixes to caches with room and
  // keeps a prefix where it lives when every cache is full (docs/adr/0037).
  double cache_pressure_weight = 3.0;
  // Credit a resident block earns by its best tier, by index::kIndexedTiers
  // (hbm, dram, disk, unknown): a colder copy saves less than a hot one.
  std::array<double, index::kIndexedTiers.size()> tier_credit = {1.0, 0.75, 0.5, 0.25, 0.0};
  // Blocks each request an engine reports (running + waiting) beyond the ones
  // kvgov itself has in flight there adds to the worker's load.
  double unrouted_request_blocks = 16.0;
  double busy_load_blocks = 0;  // a worker at or above this load is busy; 0: never
  // Cost of a block a decode worker pulls from a prefill worker's pin
  // (RouteRequest::pullable_blocks) against 1 per block of prefill: the
  // transfer of a block is about a tenth of its prefill (docs/adr/0021).
  double pull_weight = 0.1;
  // Load each prompt block of a decision past its first token adds, against
  // 1 per block of prefill it still had to do: its KV stays resident and is
  // read every decode step, but no later prompt waits behind its prefill
  // (docs/adr/0024). Applies once the caller reports the first token
  // (Router::Prefilled); a decision never reported keeps its prefill load.
  double decode_load_weight = 0.0625;
  double temperature = 0;           // 0: lowest cost wins; > 0: softmax sampling
  uint64_t seed = 0;                // of the sampling generator
  int64_t decision_ttl_ms = 60000;  // an unreleased decision releases itself after this
  // Past this many decisions in flight the oldest is released: callers that
  // never report done cost bounded memory (about 1 KiB each, docs/reliability.md).
  size_t max_decisions_in_flight = size_t{1} << 20;
  // Prompt blocks of decisions still prefilling that the router remembers,
  // so a request sharing them is credited on the worker computing them
  // before that worker's events say so (docs/adr/0037). Past this many,
  // a new decision is not remembered. 8 bytes each.
  size_t max_prefilling_blocks = size_t{1} << 22;
};

/// Where governance says a chain stops earning credit: quarantined or
/// tainted spans, spans whose lease is not active, spans under a pending
/// invalidation. The governance plane implements it; without one every
/// resident block credits.
class SpanGate {
 public:
  virtual ~SpanGate() = default;
  struct Limit {
    size_t creditable;                          // leading blocks of the chain that may be credited
    LookupKind kind = LookupKind::kMiss;        // the verdict a stopped chain gets
    LookupReason reason = LookupReason::kNone;  // why it stops there, if it does
  };
  /// REQUIRES: `resident` blocks of `chain` are on `worker`. `now_ms` is
  /// the route's clock (leases expire by it).
  virtual Limit Creditable(std::string_view worker, std::span<const index::BlockKey> chain,
                           size_t resident, int64_t now_ms) const = 0;
};

struct RouteRequest {
  std::string model;
  std::string tenant;  // empty: no salt, matches only unsalted blocks
  std::vector<int64_t> token_ids;
  std::string lora_name;
  std::vector<std::string> workers;  // allowed ids; empty: every worker
  // The decode step of a disaggregated request: the prompt's leading blocks
  // a decode worker can pull from the prefill worker's live pin instead of
  // computing them, already gated by the caller at the route's clock (0
  // once the lease is not active or the span is withdrawn). A worker pays
  // pull_weight for each of them it does not hold itself.
  uint64_t pullable_blocks = 0;
  // The request crosses a quarantined span and goes out under a diverted
  // salt (docs/adr/0028): only an engine whose events prove it keys by the
  // salt may take it, since one that ignores the salt would reuse the
  // quarantined KV. Workers whose salt reporting is still unknown are then
  // ineligible too (`salt_unverified`).
  bool salt_must_be_honoured = false;
};

/// A worker's load as the cost sees it.
struct WorkerLoad {
  uint64_t in_flight_requests = 0;  // routed by kvgov, not yet released
  uint64_t decoding_requests = 0;   // of those, past their first token
  uint64_t in_flight_blocks = 0;    // their load: prefill left, or decode_load_weight x KV
  uint64_t peer_blocks = 0;         // other replicas' in-flight blocks (SetPeerLoad)
  std::optional<ScrapedLoad> scraped;
  double blocks = 0;  // the load term of the cost
};

struct Candidate {
  std::string worker;
  uint64_t resident_blocks = 0;  // leading blocks the worker holds
  uint64_t overlap_blocks = 0;   // of those, the ones governance lets credit
  // Of overlap_blocks, leading blocks not yet resident that a decision
  // routed here is prefilling now: credited as the hot copy they will be.
  uint64_t prefilling_blocks = 0;
  double cache_fullness = 0;  // its hot blocks over the fullest candidate's, 0..1
  std::array<uint64_t, index::kIndexedTiers.size()> tier_overlap{};  // of overlap_blocks
  double credited_blocks = 0;                                        // tier-weighted
  uint64_t pulled_blocks = 0;  // of the request's pullable blocks, those it lacks
  WorkerLoad load;
  double cost = 0;
  bool eligible = false;
  std::string reason;  // why not eligible: not_allowed, unhealthy, draining, stale, busy,
                       // salt_blind (a salted route; the engine does not report salts),
                       // salt_unverified (a diverted route; no proof yet that it does)
};

struct RouteDecision {
  std::string decision_id;
  std::string worker;  // empty when no worker is eligible
  std::string cache_salt;
  uint64_t prompt_blocks = 0;
  uint64_t overlap_blocks = 0;
  LookupVerdict verdict;
  std::vector<Candidate> candidates;  // best first; ineligible last
};

/// "w1: unhealthy, w2: draining": why each candidate of a decision that
/// chose no worker was not eligible, for a refusal's message.
std::string IneligibleReasons(const RouteDecision& decision);

/// Chooses the worker for a request: the one whose cost — (overlap_weight +
/// cache_pressure_weight x its cache's fullness) x the prefill blocks it
/// would still compute, plus pull_weight x the blocks
/// it would pull from a prefill worker's pin, plus its load — is lowest,
/// among those eligible. Keeps the in-flight load its decisions add until
/// they are released.
///
/// Thread-safe: one mutex guards the in-flight table (with what it is
/// prefilling) and the generator; the
/// index and the status table have their own.
class Router {
 public:
  /// `index` and `status` must outlive the router; `gate` may be null.
  Router(const index::ResidencyIndex* index, const WorkerStatusTable* status, RouteWeights weights,
         const SpanGate* gate = nullptr);

  const RouteWeights& weights() const { return weights_; }

  /// Decides. `cache_salt` is the tenant's (empty without a tenant);
  /// `decision_id` names the decision for Done. A prompt with no full block
  /// is routed on load alone. Returns InvalidArgument for an empty model and
  /// NotFound when no registered worker serves the model. A decision whose
  /// `worker` is empty had no eligible worker; its candidates say why.
  Result<RouteDecision> Route(const RouteRequest& request, std::string_view cache_salt,
                              std::string decision_id, int64_t now_ms);

  /// The decision Route would make now, without keeping its load: a dry run
  /// (the console's route explorer). Its decision_id is empty. With a
  /// temperature, Route samples among the candidates; Explain names the
  /// best-ranked one, the likeliest draw, and draws nothing.
  Result<RouteDecision> Explain(const RouteRequest& request, std::string_view cache_salt,
                                int64_t now_ms);

  /// The decision's first token was seen: its prefill is done, and its load
  /// becomes decode_load_weight x its prompt blocks until Done. NotFound as
  /// for Done; a second call changes nothing.
  Status Prefilled(std::string_view decision_id, std::string_view caller_tenant = "");

  /// Releases the load of a decision. NotFound if unknown or released, and
  /// for a caller bound to a tenant (`caller_tenant` not empty) when the
  /// decision is another tenant's: its existence is not the caller's to
  /// learn.
  Status Done(std::string_view decision_id, std::string_view caller_tenant = "");

  /// Releases decisions older than decision_ttl_ms; returns how many.
  size_t ExpireDecisions(int64_t now_ms);

  /// Decisions released early because max_decisions_in_flight was reached.
  uint64_t decisions_evicted() const;

  WorkerLoad LoadOf(std::string_view worker) const;

  /// This router's in-flight blocks per worker (workers with none left
  /// out), for other replicas to add to their cost.
  std::map<std::string, uint64_t, std::less<>> InFlightBlocks() const;

  /// Other replicas' in-flight blocks per worker; replaces the last set.
  /// Counted in the load term like this router's own.
  void SetPeerLoad(std::map<std::string, uint64_t, std::less<>> blocks_by_worker);

 private:
  struct InFlight {
    std::string worker;
    std::string tenant;
    // The prompt's block keys while it prefills (it is then in
    // prefilling_by_root_), empty after.
    std::vector<index::BlockKey> prefilling;
    uint64_t prompt_blocks = 0;
    uint64_t blocks = 0;  // its load now, in Totals::blocks
    bool decoding = false;
    int64_t created_ms = 0;
  };
  struct Totals {
    uint64_t requests = 0;
    uint64_t decoding = 0;
    uint64_t blocks = 0;
  };

  using Decisions = std::map<std::string, InFlight, std::less<>>;

  // Route, keeping the decision's load only when `keep`.
  Result<RouteDecision> Decide(const RouteRequest& request, std::string_view cache_salt,
                               std::string decision_id, int64_t now_ms, bool keep);
  WorkerLoad LoadLocked(std::string_view worker, const std::optional<ScrapedLoad>& scraped) const
      KVGOV_REQUIRES(mu_);
  void ReleaseLocked(Decisions::iterator it) KVGOV_REQUIRES(mu_);
  // Leading blocks of `chain` that decisions prefilling on each worker will
  // hold, for the workers where that is any.
  std::vector<std::pair<std::string_view, size_t>> PrefillingLocked(
      std::span<const index::BlockKey> chain) const KVGOV_REQUIRES(mu_);
  void RememberPrefillingLocked(InFlight& decision, std::vector<index::BlockKey> chain)
      KVGOV_REQUIRES(mu_);
  void ForgetPrefillingLocked(InFlight& decision) KVGOV_REQUIRES(mu_);
  // The decision, or end() when unknown or, for a tenant-bound caller,
  // another tenant's.
  Decisions::iterator FindLocked(std::string_view decision_id, std::string_view caller_tenant)
      KVGOV_REQUIRES(mu_);
  static Status UnknownDecision(std::string_view decision_id);

  const index::ResidencyIndex* const index_;
  const WorkerStatusTable* const status_;
  const RouteWeights weights_;
  const SpanGate* const gate_;
  // Tier credits whose block-by-block sum a per-tier count reproduces
  // exactly (router.cc), so a route need not walk every credited block.
  const bool exact_credit_sums_;

  mutable Mutex mu_;
  std::mt19937_64 rng_ KVGOV_GUARDED_BY(mu_);
  Decisions decisions_ KVGOV_GUARDED_BY(mu_);
  // decisions_ by (created_ms, id), oldest first: expiry and eviction take
  // from the front instead of walking every decision under the mutex.
  std::set<std::pair<int64_t, std::string>> decisions_by_age_ KVGOV_GUARDED_BY(mu_);
  uint64_t decisions_evicted_ KVGOV_GUARDED_BY(mu_) = 0;
  std::map<std::string, Totals, std::less<>> totals_ KVGOV_GUARDED_BY(mu_);
  std::map<std::string, uint64_t, std::less<>> peer_blocks_ KVGOV_GUARDED_BY(mu_);
  // Decisions still prefilling, by their prompt's first block key, oldest
  // first: a route compares its chain with those sharing its first block.
  // Point into decisions_ (map nodes do not move).
  std::unordered_map<index::BlockKey, std::vector<const InFlight*>> prefilling_by_root_
      KVGOV_GUARDED_BY(mu_);
  size_t prefilling_blocks_ KVGOV_GUARDED_BY(mu_) = 0;
};

}  // namespace kvgov::router
