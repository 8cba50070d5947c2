#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvgov/core/status.h"
#include "kvgov/router/router.h"
#include "kvgov/sim/block_pool.h"
#include "kvgov/sim/event_wire.h"
#include "kvgov/sim/prefill_cost.h"
#include "kvgov/sim/workload.h"

namespace kvgov::sim {

/// One simulated engine in virtual time: its block pool, a FIFO prefill
/// queue and, as the decode engine of a disaggregated fleet, a FIFO queue
/// of KV pulls over its link. Prefills run one at a time (prefill is
/// compute-bound, so batching them does not raise an engine's token
/// throughput), and so do pulls (they share the link's bandwidth, so
/// running them side by side finishes none sooner in total). Decode itself
/// is not modeled, so TTFT is the queueing wait plus the prefill (plus, on
/// a disaggregated fleet, the link wait plus the transfer).
///
/// With decode modeled (DecodeModel, colocated fleets), the engine runs
/// continuous batching instead: Enqueue and AdvanceTo below.
///
/// Not thread-safe: one owner drives it.
struct DecodeModel;

class EngineModel {
 public:
  EngineModel(BlockPoolOptions pool, ModelShape shape);

  struct Served {
    PrefillOutcome prefill;
    double start_s = 0;
    double finish_s = 0;
    double ttft_s = 0;
  };
  /// Serves a request arriving at `arrival_s` (which must not precede an
  /// earlier call's): it waits for the queue, then prefills what the pool
  /// misses. The pool changes at once; FIFO order makes that exact, as a
  /// later request on this engine starts only after this one finished.
  Served Serve(uint64_t request_id, double arrival_s, std::span<const int64_t> tokens,
               std::string_view cache_salt);

  /// Requests finished by `now_s` as (finish_s, id), in finishing order;
  /// they stop counting as outstanding.
  std::vector<std::pair<double, uint64_t>> PopFinished(double now_s);
  /// Requests queued or prefilling (after PopFinished for the same time);
  /// with decode modeled, waiting or running.
  size_t outstanding() const { return queue_.size() + waiting_.size() + running_.size(); }
  /// Requests waiting to start (vLLM's num_requests_waiting).
  size_t waiting() const;
  /// Seconds of prefill work ahead of a request arriving at `now_s`.
  double PrefillBacklogS(double now_s) const;

  // ---- Continuous batching: decode modeled ----
  /// Queues a request arriving at `now_s` (not before an earlier call's).
  /// `request` must outlive the engine's work on it.
  void Enqueue(const SimRequest& request, std::string_view cache_salt, double now_s);
  /// What a run of steps did.
  struct Progress {
    struct Started {  // admitted into the batch: its cache lookup is done
      uint64_t id = 0;
      double at_s = 0;
      PrefillOutcome prefill;  // its events are the engine's to publish at at_s
    };
    struct Token {
      uint64_t id = 0;
      double at_s = 0;
      double prefill_s = 0;  // first tokens: the compute its prefill chunks took
    };
    std::vector<Started> started;
    std::vector<Token> first_tokens;  // in time order
    std::vector<Token> completed;     // answers done, in time order
  };
  /// Runs every step that starts before `until_s` (a step that started
  /// ends after it when it must). Each step: admit waiting requests in
  /// order while the batch has room (max_running, and KV for the prompt's
  /// uncached blocks plus the answer), then one token for every decoding
  /// request and the rest of the token budget to prefill chunks, in
  /// admission order; it takes the chunks' prefill time plus the decode
  /// step's memory time (DecodeModel). Appends to `progress`.
  void AdvanceTo(double until_s, const DecodeModel& model, Progress& progress);
  /// True when nothing waits or runs.
  bool idle() const { return waiting_.empty() && running_.empty(); }
  double now_s() const { return now_s_; }
  double busy_until_s() const { return busy_until_s_; }

  struct Pulled {
    // This engine's own pool, as vLLM's decode worker uses it: hit_blocks
    // are the prompt's leading blocks it already held, computed_tokens the
    // ones it pulled instead (nothing is prefilled here), events what
    // caching the pulled blocks published.
    PrefillOutcome cached;
    int64_t pulled_tokens = 0;  // = cached.computed_tokens, the partial last block included
    double ready_s = 0;         // the prefill finished; the pull may start
    double start_s = 0;         // after the pulls queued on the link before it
    double finish_s = 0;        // the KV is here: the first token can be sampled
  };
  /// The decode step of a disaggregated request whose prefill finished at
  /// `ready_s` (which must not precede an earlier call's): it pulls, over
  /// this engine's link of `link_bytes_per_s`, the prompt's tokens its pool
  /// does not hold, once the pulls before it are done, and caches the
  /// prompt in its pool. The pool changes at once, exact for the same
  /// reason as Serve's: a later pull here starts after this one finished.
  Pulled Pull(uint64_t request_id, double ready_s, std::span<const int64_t> tokens,
              std::string_view cache_salt, double link_bytes_per_s);
  /// Pulls finished by `now_s` as (finish_s, id), in finishing order.
  std::vector<std::pair<double, uint64_t>> PopTransferred(double now_s);
  /// Pulls queued or transferring (after PopTransferred for the same time).
  size_t outstanding_transfers() const { return transfers_.size(); }
  double link_busy_until_s() const { return link_busy_until_s_; }

  const BlockPool& pool() const { return pool_; }
  BlockPool& mutable_pool() { return pool_; }
  const PrefillCostModel& cost() const { return cost_; }

 private:
  BlockPool pool_;
  PrefillCostModel cost_;
  std::deque<std::pair<double, uint64_t>> queue_;  // (finish_s, id), finishing order
  double busy_until_s_ = 0;
  std::deque<std::pair<double, uint64_t>> transfers_;  // (finish_s, id), finishing order
  double link_busy_until_s_ = 0;

  // Continuous batching.
  struct Sequence {
    const SimRequest* request = nullptr;
    std::string cache_salt;
    int64_t prefill_left = 0;  // tokens still to compute
    int64_t context = 0;       // tokens its KV holds
    int64_t output_left = 0;
    double prefill_s = 0;        // compute its prefill chunks took so far
    size_t reserved_blocks = 0;  // for its answer and partial last block
    std::vector<EngineHash> pinned;
  };
  std::deque<Sequence> waiting_;
  std::vector<Sequence> running_;  // in admission order
  size_t reserved_blocks_ = 0;
  double now_s_ = 0;  // the end of the last step
};

/// Decode, modeled (colocated fleets): continuous batching as vLLM's V1
/// scheduler runs it, decode first and chunked prefill in the rest of each
/// step's token budget (docs/formats/simulator.md, "Modeled decode").
struct DecodeModel {
  bool enabled = false;
  // vLLM's defaults for the OpenAI server on a GPU of 70 GiB or more
  // (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults).
  int64_t max_batched_tokens = 8192;  // --max-num-batched-tokens
  int max_running = 1024;             // --max-num-seqs
  // A decode step reads the weights once and every running request's KV:
  // H200 HBM3e 4.8 TB/s, of which 80% is reached.
  double hbm_bytes_per_s = 0.8 * 4.8e12;
};

struct FleetOptions {
  int engines = 4;
  size_t capacity_blocks = 4096;  // per engine
  int64_t block_size = 16;
  ModelShape shape = ModelShape::kLlama3_8B;
  std::string model = "sim-model";
  WireEncoding encoding = WireEncoding::kMap;
  uint64_t seed = 1;  // each engine's hash seed derives from it
  // Tenants' cache salts are router::TenantCacheSalt(secret, tenant), the
  // same salts kvgov hands out, whichever policy routes.
  std::string tenant_secret = "kvgov-simulator";
  // A disaggregated (xPyD) fleet: engines sim-0..sim-(x-1) prefill and the
  // next y, sim-x..sim-(x+y-1), decode; x + y must be `engines`. Both 0: a
  // colocated fleet, where each engine serves its own requests whole.
  int prefill_engines = 0;
  int decode_engines = 0;
  // Each decode engine's link for pulling KV from the prefill engines,
  // bytes/s: 50e9 is 400 Gb/s, one ConnectX-7 port.
  double link_bytes_per_s = 50e9;
  // Decode modeled (colocated fleets only): requests' output_tokens occupy
  // the engines.
  DecodeModel decode;

  bool disaggregated() const { return prefill_engines > 0 || decode_engines > 0; }
};

/// InvalidArgument, naming the field, unless `engines` is at least 1 and a
/// disaggregated split has at least one engine on each side, adds up to
/// `engines`, and has a positive link speed.
Status ValidateFleetOptions(const FleetOptions& options);

/// An xPyD shape: x prefill engines, y decode engines.
struct FleetSplit {
  int prefill_engines = 0;
  int decode_engines = 0;
};
/// Parses "xPyD" as llm-d and Dynamo write it ("2P2D", "4P4D"): decimal
/// counts of at least 1 without leading zeros, capital P and D, nothing
/// else, at most 1024 engines in all. InvalidArgument "want xPyD such as
/// 2P2D, got '...'" otherwise.
Result<FleetSplit> ParseFleetSplit(std::string_view text);

/// The engines of one simulated run. Not thread-safe.
class Fleet {
 public:
  explicit Fleet(const FleetOptions& options);

  const FleetOptions& options() const { return options_; }
  size_t size() const { return engines_.size(); }
  bool disaggregated() const { return options_.disaggregated(); }
  /// Engines that prefill are [0, prefill_count()): all of them colocated.
  size_t prefill_count() const { return size() - decode_count(); }
  /// Decode engines are [prefill_count(), size()): none colocated.
  size_t decode_count() const;
  const EngineModel& engine(size_t i) const { return engines_[i]; }
  EngineModel& mutable_engine(size_t i) { return engines_[i]; }
  /// "sim-0", "sim-1", ...: the worker ids kvgov knows the engines by.
  static std::string WorkerId(size_t engine);
  /// The tenant's cache salt; "" for no tenant.
  std::string CacheSalt(std::string_view tenant) const;

 private:
  FleetOptions options_;
  std::vector<EngineModel> engines_;
};

/// How requests are placed. A policy sees the fleet as it chooses; policies
/// that follow the engines' event streams get every payload published, the
/// decode engines' included. On a disaggregated fleet a request is placed
/// in two steps: Choose picks its prefill engine when it arrives, then
/// ChooseDecode its decode engine when that prefill finishes (as vLLM's
/// proxy sends the decode request once the prefill has answered), so the
/// second choice sees the links as they are then.
///
/// Not thread-safe: RunTrace drives one policy from one thread.
class RoutingPolicy {
 public:
  virtual ~RoutingPolicy() = default;
  virtual std::string_view name() const = 0;
  /// True for a policy that has no decode step (the peers' here): it is
  /// left out of a disaggregated fleet's run.
  virtual bool colocated_only() const { return false; }
  /// The engine that prefills `request`, arriving now (its arrival_s): one
  /// of the fleet's prefill engines, [0, fleet.prefill_count()).
  virtual Result<size_t> Choose(const SimRequest& request, std::string_view cache_salt,
                                const Fleet& fleet) = 0;
  /// The decode engine of a disaggregated request whose prefill on
  /// `prefill_engine` finished at `ready_s`, which is now: a fleet-wide
  /// engine index in [fleet.prefill_count(), fleet.size()), so it names
  /// the engine as Observe and the reports do. The default fails with
  /// FailedPrecondition naming the policy: it places colocated fleets only.
  virtual Result<size_t> ChooseDecode(const SimRequest& request, std::string_view cache_salt,
                                      const Fleet& fleet, size_t prefill_engine, double ready_s);
  /// An engine published this payload (an encoded EventBatch).
  virtual Status Observe(size_t /*engine*/, std::string_view /*payload*/) { return Status::Ok(); }
  /// The request's prefill finished.
  virtual void Finished(uint64_t /*request_id*/) {}
  /// The request's KV reached its decode engine (disaggregated fleets).
  virtual void Transferred(uint64_t /*request_id*/) {}
  /// The request's answer is done (colocated fleets): with decode modeled
  /// when its last token is; otherwise together with Finished.
  virtual void Completed(uint64_t /*request_id*/) {}
};

/// The round-robin, random and least-load policies apply their rule to the
/// prefill engines and, separately, to the decode engines.
std::unique_ptr<RoutingPolicy> MakeRoundRobinPolicy();
std::unique_ptr<RoutingPolicy> MakeRandomPolicy(uint64_t seed);
/// Fewest outstanding requests (queued or prefilling, and on a decode
/// engine queued or transferring); ties rotate.
std::unique_ptr<RoutingPolicy> MakeLeastLoadPolicy();
/// kvgov's cost computed from perfect knowledge: every pool's exact
/// contents and every queue's exact remaining work. It picks the lowest
/// queueing wait + `overlap_weight` x the prefill time of what the engine
/// misses, so kvgov's distance from it is what kvgov loses by seeing the
/// fleet only through event streams and its own decisions. (With weight 1
/// it is the greedy lowest-TTFT choice, which scatters hot prefixes.) A
/// decode step goes to the lowest link wait + transfer time of what the
/// decode engine lacks.
std::unique_ptr<RoutingPolicy> MakeOraclePolicy(double overlap_weight);
/// kvgov's own router in process: a residency index fed only by the
/// engines' encoded event streams (decoded by kvgov's adapter, as the
/// daemon does), routed by router::Router with `weights`; decisions are
/// released when their prefill finishes. On a disaggregated fleet the
/// prefill step routes among the prefill workers only and the decode step
/// among the decode workers only, with the prompt's full blocks pullable
/// (the prefill engine's pin is always live here), and the decode decision
/// is released when its transfer finishes.
std::unique_ptr<RoutingPolicy> MakeKvgovPolicy(const FleetOptions& fleet,
                                               router::RouteWeights weights);

/// Names accepted by MakePolicy: kvgov (routing with `weights`),
/// round-robin, random (seeded with `seed`), least-load, oracle (with the
/// weights' overlap_weight), and the peers' policies with their documented
/// defaults (sim/peer_policies.h): dynamo, llm-d, sglang, prefix-hash.
Result<std::unique_ptr<RoutingPolicy>> MakePolicy(std::string_view name, const FleetOptions& fleet,
                                                  uint64_t seed,
                                                  const router::RouteWeights& weights = {});

/// A wait users notice: what PolicyReport::long_waits counts.
inline constexpr double kLongWaitS = 10.0;

/// Why a policy's prefills computed what they did, in tokens; the four add
/// up to its computed tokens (docs/formats/simulator.md, "Prefill by cause").
struct PrefillCauses {
  // No earlier prompt had them: every policy computes these (the partial
  // last block of a prompt included, which no engine caches).
  int64_t first_seen_tokens = 0;
  // An earlier prompt had them, but no engine held them when the request was
  // routed: evicted everywhere, or still waiting for their first prefill.
  int64_t not_held_tokens = 0;
  // Some engine held more of the prompt than the one it was routed to.
  int64_t routed_away_tokens = 0;
  // What changed on the chosen engine between routing and prefill: blocks
  // evicted while the request queued, less blocks another request
  // prefilled there meanwhile (negative when that saved more).
  int64_t while_queued_tokens = 0;
};

/// What one policy did with one trace.
struct PolicyReport {
  std::string policy;
  uint64_t requests = 0;
  uint64_t prompt_blocks = 0;
  uint64_t hit_blocks = 0;
  int64_t prompt_tokens = 0;
  int64_t computed_tokens = 0;  // prefill tokens computed
  PrefillCauses prefill_causes;
  double ttft_p50_s = 0;
  double ttft_p90_s = 0;
  double ttft_p99_s = 0;
  double ttft_mean_s = 0;
  // With decode modeled: arrival to the last token (0 otherwise).
  bool decode_modeled = false;
  double e2e_p50_s = 0;
  double e2e_p99_s = 0;
  std::vector<double> busy_s_per_engine;      // prefill seconds each engine served
  std::vector<uint64_t> requests_per_engine;  // requests each engine prefilled
  // Busiest engine's prefill time over the mean: 1.0 is perfectly even. On
  // a disaggregated fleet, over the prefill engines.
  double load_spread = 0;
  // Requests that waited more than kLongWaitS in queues (for an engine, and
  // on a disaggregated fleet for a link) before their first token.
  uint64_t long_waits = 0;
  // A disaggregated fleet's decode steps (all zero colocated).
  bool disaggregated = false;
  int64_t pulled_tokens = 0;      // KV pulled from the prefill engines, in tokens
  int64_t pull_saved_tokens = 0;  // prompt tokens a decode engine held already, not pulled
  double transfer_s = 0;          // seconds the links spent pulling
  double link_wait_s = 0;         // seconds pulls waited for a busy link

  double hit_rate() const {
    return prompt_blocks == 0
               ? 0
               : static_cast<double>(hit_blocks) / static_cast<double>(prompt_blocks);
  }
};

/// What happened to one request.
struct RequestOutcome {
  size_t engine = 0;  // the engine that prefilled it
  uint64_t prompt_blocks = 0;
  uint64_t hit_blocks = 0;  // on the prefill engine
  int64_t prompt_tokens = 0;
  int64_t computed_tokens = 0;
  // Set when it is routed (to its prefill engine), but while_queued_tokens:
  // the rest of computed_tokens, set once it is prefilled.
  PrefillCauses prefill_causes;
  double prefill_s = 0;  // modeled
  double ttft_s = 0;     // modeled: queueing wait + prefill (+ link wait + transfer)
  double queue_s = 0;    // waiting for the prefill engine
  double e2e_s = 0;      // with decode modeled: arrival to the answer's last token
  // The decode step, on a disaggregated fleet only.
  std::optional<size_t> decode_engine;
  uint64_t decode_hit_blocks = 0;  // leading prompt blocks the decode engine held
  int64_t pulled_tokens = 0;
  double link_wait_s = 0;  // from the prefill's finish to the pull's start
  double transfer_s = 0;
};

/// Totals, TTFT percentiles (nearest rank) and load spread of outcomes on
/// a fleet of `engines`, the spread taken over engines [0, spread_engines)
/// (0: all of them; a disaggregated fleet passes its prefill engines).
PolicyReport Summarize(std::string policy, std::span<const RequestOutcome> outcomes, size_t engines,
                       size_t spread_engines = 0);

/// Runs the trace through a fresh fleet with the policy choosing, in
/// virtual time: arrivals and (disaggregated) finished prefills in time
/// order, a prefill finishing no later than an arrival handled first. One
/// outcome per request, in trace order. InvalidArgument for options
/// ValidateFleetOptions refuses; fails when the policy fails, and Internal
/// when it names an engine outside the pool it chose for.
Result<std::vector<RequestOutcome>> Replay(std::span<const SimRequest> trace,
                                           const FleetOptions& fleet, RoutingPolicy& policy);

/// Replay, summarized.
Result<PolicyReport> RunTrace(std::span<const SimRequest> trace, const FleetOptions& fleet,
                              RoutingPolicy& policy);

/// A fixed-width table of reports, one row per policy, for people. When a
/// report is disaggregated the table adds pulled tokens, the tokens decode
/// engines held so did not pull, and the links' transfer seconds.
std::string FormatReports(std::span<const PolicyReport> reports);

/// The same reports' prefill tokens split by cause, a row each.
std::string FormatPrefillCauses(std::span<const PolicyReport> reports);

}  // namespace kvgov::sim
