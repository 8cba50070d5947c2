#include "kvgov/sim/fleet.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <queue>
#include <tuple>

#include "kvgov/index/residency_index.h"
#include "kvgov/router/worker_status.h"
#include "kvgov/sim/peer_policies.h"
#include "sim/event_index.h"

namespace kvgov::sim {

EngineModel::EngineModel(BlockPoolOptions pool, ModelShape shape)
    : pool_(std::move(pool)), cost_(shape) {}

EngineModel::Served EngineModel::Serve(uint64_t request_id, double arrival_s,
                                       std::span<const int64_t> tokens,
                                       std::string_view cache_salt) {
  Served served;
  served.prefill = pool_.Prefill(tokens, cache_salt);
  const double prefill_s =
      cost_.PrefillSeconds(static_cast<int64_t>(tokens.size()), served.prefill.computed_tokens);
  served.start_s = std::max(arrival_s, busy_until_s_);
  served.finish_s = served.start_s + prefill_s;
  served.ttft_s = served.finish_s - arrival_s;
  busy_until_s_ = served.finish_s;
  queue_.emplace_back(served.finish_s, request_id);
  return served;
}

size_t EngineModel::waiting() const {
  if (!waiting_.empty() || !running_.empty()) return waiting_.size();
  return queue_.empty() ? 0 : queue_.size() - 1;  // all but the one prefilling
}

double EngineModel::PrefillBacklogS(double now_s) const {
  double backlog = std::max(0.0, busy_until_s_ - now_s);
  for (const Sequence& sequence : running_) {
    backlog += cost_.PrefillSeconds(static_cast<int64_t>(sequence.request->tokens.size()),
                                    sequence.prefill_left);
  }
  for (const Sequence& sequence : waiting_) {
    const int64_t prompt = static_cast<int64_t>(sequence.request->tokens.size());
    backlog += cost_.PrefillSeconds(prompt, prompt);  // its cache hits are not known yet
  }
  return backlog;
}

void EngineModel::Enqueue(const SimRequest& request, std::string_view cache_salt, double now_s) {
  if (idle()) now_s_ = std::max(now_s_, now_s);
  Sequence sequence;
  sequence.request = &request;
  sequence.cache_salt = std::string(cache_salt);
  waiting_.push_back(std::move(sequence));
}

void EngineModel::AdvanceTo(double until_s, const DecodeModel& model, Progress& progress) {
  const size_t block = static_cast<size_t>(pool_.options().block_size);
  const size_t capacity = pool_.options().capacity_blocks;
  while (!idle() && now_s_ < until_s) {
    // Admit in arrival order while the batch and the KV have room; an
    // empty batch takes its head whatever it needs, so nothing starves.
    while (!waiting_.empty() && running_.size() < static_cast<size_t>(model.max_running)) {
      Sequence& next = waiting_.front();
      const std::vector<int64_t>& tokens = next.request->tokens;
      const size_t prompt_blocks = tokens.size() / block;
      const size_t cached = pool_.CachedPrefix(tokens, next.cache_salt);
      const size_t answer_blocks =
          (tokens.size() % block + static_cast<size_t>(next.request->output_tokens) + block - 1) /
          block;
      const size_t need = prompt_blocks - cached + answer_blocks;
      if (!running_.empty() && pool_.pinned_blocks() + reserved_blocks_ + need > capacity) break;
      Progress::Started started{next.request->id, now_s_, pool_.Prefill(tokens, next.cache_salt)};
      next.pinned = pool_.Pin(tokens, next.cache_salt).hashes;
      // A full hit still computes the last token to sample the first.
      next.prefill_left = std::max<int64_t>(started.prefill.computed_tokens, 1);
      next.context = static_cast<int64_t>(tokens.size()) - next.prefill_left;
      next.output_left = next.request->output_tokens;
      next.reserved_blocks = answer_blocks;
      reserved_blocks_ += answer_blocks;
      progress.started.push_back(std::move(started));
      running_.push_back(std::move(next));
      waiting_.pop_front();
    }
    // One step: a token for every decoding request, the rest of the budget
    // to prefill chunks in admission order.
    int64_t budget = model.max_batched_tokens;
    double decode_bytes = 0;
    for (const Sequence& sequence : running_) {
      if (sequence.prefill_left > 0) continue;
      --budget;
      decode_bytes += static_cast<double>(sequence.context) *
                      static_cast<double>(KvBytesPerToken(cost_.shape()));
    }
    double step_s = decode_bytes > 0
                        ? (static_cast<double>(WeightBytes(cost_.shape())) + decode_bytes) /
                              model.hbm_bytes_per_s
                        : 0;
    std::vector<int64_t> chunk(running_.size(), 0);
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
      if (running_[i].prefill_left == 0) continue;
      chunk[i] = std::min(running_[i].prefill_left, budget);
      budget -= chunk[i];
      const double chunk_s =
          cost_.PrefillSeconds(static_cast<int64_t>(running_[i].request->tokens.size()), chunk[i]);
      running_[i].prefill_s += chunk_s;
      step_s += chunk_s;
    }
    now_s_ += step_s;
    std::vector<Sequence> still_running;
    still_running.reserve(running_.size());
    for (size_t i = 0; i < running_.size(); ++i) {
      Sequence& sequence = running_[i];
      const bool decoding = sequence.prefill_left == 0;
      if (!decoding) {
        sequence.prefill_left -= chunk[i];
        sequence.context += chunk[i];
        if (sequence.prefill_left > 0) {
          still_running.push_back(std::move(sequence));
          continue;
        }
        progress.first_tokens.push_back({sequence.request->id, now_s_, sequence.prefill_s});
      } else {
        ++sequence.context;
      }
      // The first token comes with the prefill's last chunk, the rest one
      // a decode step.
      if (--sequence.output_left > 0) {
        still_running.push_back(std::move(sequence));
        continue;
      }
      progress.completed.push_back({sequence.request->id, now_s_, 0});
      pool_.Unpin(sequence.pinned);
      reserved_blocks_ -= sequence.reserved_blocks;
    }
    running_ = std::move(still_running);
  }
  if (idle()) now_s_ = std::max(now_s_, until_s);
}

namespace {

std::vector<std::pair<double, uint64_t>> PopUntil(std::deque<std::pair<double, uint64_t>>& queue,
                                                  double now_s) {
  std::vector<std::pair<double, uint64_t>> finished;
  while (!queue.empty() && queue.front().first <= now_s) {
    finished.push_back(queue.front());
    queue.pop_front();
  }
  return finished;
}

}  // namespace

std::vector<std::pair<double, uint64_t>> EngineModel::PopFinished(double now_s) {
  return PopUntil(queue_, now_s);
}

EngineModel::Pulled EngineModel::Pull(uint64_t request_id, double ready_s,
                                      std::span<const int64_t> tokens, std::string_view cache_salt,
                                      double link_bytes_per_s) {
  Pulled pulled;
  // vLLM's decode worker looks the prompt up in its own cache first and
  // pulls only the rest; once pulled, the blocks are its own cached blocks.
  pulled.cached = pool_.Prefill(tokens, cache_salt);
  pulled.pulled_tokens = pulled.cached.computed_tokens;
  pulled.ready_s = ready_s;
  pulled.start_s = std::max(ready_s, link_busy_until_s_);
  pulled.finish_s =
      pulled.start_s + TransferSeconds(cost_.shape(), pulled.pulled_tokens, link_bytes_per_s);
  link_busy_until_s_ = pulled.finish_s;
  transfers_.emplace_back(pulled.finish_s, request_id);
  return pulled;
}

std::vector<std::pair<double, uint64_t>> EngineModel::PopTransferred(double now_s) {
  return PopUntil(transfers_, now_s);
}

namespace {

uint64_t MixSeed(uint64_t seed, uint64_t engine) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ULL + engine + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// FNV-1a over the prompt's first block of tokens.
uint64_t HeadSignature(std::span<const int64_t> tokens, int64_t block_size) {
  uint64_t h = 0xcbf29ce484222325ULL;
  const size_t head = std::min(tokens.size(), static_cast<size_t>(block_size));
  for (size_t i = 0; i < head; ++i) {
    h = (h ^ static_cast<uint64_t>(tokens[i])) * 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

Fleet::Fleet(const FleetOptions& options) : options_(options) {
  engines_.reserve(static_cast<size_t>(options.engines));
  for (int i = 0; i < options.engines; ++i) {
    BlockPoolOptions pool;
    pool.capacity_blocks = options.capacity_blocks;
    pool.block_size = options.block_size;
    pool.hash_seed = MixSeed(options.seed, static_cast<uint64_t>(i));
    engines_.emplace_back(std::move(pool), options.shape);
  }
}

size_t Fleet::decode_count() const {
  return disaggregated()
             ? std::min(size(), static_cast<size_t>(std::max(options_.decode_engines, 0)))
             : 0;
}

std::string Fleet::WorkerId(size_t engine) { return "sim-" + std::to_string(engine); }

Status ValidateFleetOptions(const FleetOptions& options) {
  if (options.engines < 1) {
    return Status::InvalidArgument("fleet: want at least 1 engine, got " +
                                   std::to_string(options.engines));
  }
  if (options.decode.enabled) {
    if (options.disaggregated()) {
      return Status::InvalidArgument("fleet: decode is modeled on colocated fleets only");
    }
    if (options.decode.max_running < 1 || options.decode.max_batched_tokens < 1 ||
        !(options.decode.hbm_bytes_per_s > 0)) {
      return Status::InvalidArgument(
          "fleet: decode wants max_running, max_batched_tokens and hbm_bytes_per_s positive");
    }
  }
  if (!options.disaggregated()) return Status::Ok();
  if (options.prefill_engines < 1 || options.decode_engines < 1) {
    return Status::InvalidArgument(
        "fleet: a disaggregated fleet wants at least 1 prefill and 1 decode engine, got " +
        std::to_string(options.prefill_engines) + "P" + std::to_string(options.decode_engines) +
        "D");
  }
  if (static_cast<int64_t>(options.prefill_engines) + options.decode_engines != options.engines) {
    return Status::InvalidArgument("fleet: " + std::to_string(options.prefill_engines) + "P" +
                                   std::to_string(options.decode_engines) +
                                   "D does not add up to its " + std::to_string(options.engines) +
                                   " engines");
  }
  // Also false for NaN.
  if (!(options.link_bytes_per_s > 0)) {
    return Status::InvalidArgument("fleet: link_bytes_per_s must be positive");
  }
  return Status::Ok();
}

Result<FleetSplit> ParseFleetSplit(std::string_view text) {
  const std::string quoted = "'" + std::string(text.substr(0, 64)) + "'";
  // A count (digits, the first not 0, so neither a sign nor a padded
  // number passes) ending in `tag`; consumes both.
  std::string_view rest = text;
  const auto count = [&rest](char tag, int& out) {
    if (rest.empty() || rest.front() < '1' || rest.front() > '9') return false;
    const char* const end = rest.data() + rest.size();
    const auto [next, error] = std::from_chars(rest.data(), end, out);
    if (error != std::errc() || next == end || *next != tag) return false;
    rest.remove_prefix(static_cast<size_t>(next - rest.data()) + 1);
    return true;
  };
  FleetSplit split;
  if (!count('P', split.prefill_engines) || !count('D', split.decode_engines) || !rest.empty()) {
    return Status::InvalidArgument("want xPyD such as 2P2D, got " + quoted);
  }
  if (static_cast<int64_t>(split.prefill_engines) + split.decode_engines > 1024) {
    return Status::InvalidArgument("want at most 1024 engines in all, got " + quoted);
  }
  return split;
}

std::string Fleet::CacheSalt(std::string_view tenant) const {
  return tenant.empty() ? std::string() : router::TenantCacheSalt(options_.tenant_secret, tenant);
}

Result<size_t> RoutingPolicy::ChooseDecode(const SimRequest&, std::string_view, const Fleet&,
                                           size_t, double) {
  return Status::FailedPrecondition("policy " + std::string(name()) +
                                    " places colocated fleets only: it has no decode step");
}

namespace {

// The fleet-wide index range a policy chooses in: the prefill engines (all
// of a colocated fleet) or the decode engines.
struct Pool {
  size_t first = 0;
  size_t count = 0;
};
Pool PrefillPool(const Fleet& fleet) { return {0, fleet.prefill_count()}; }
Pool DecodePool(const Fleet& fleet) { return {fleet.prefill_count(), fleet.decode_count()}; }

Status EmptyPool(std::string_view policy, std::string_view step) {
  return Status::FailedPrecondition(std::string(policy) + ": the fleet has no " +
                                    std::string(step) + " engine");
}

class RoundRobinPolicy final : public RoutingPolicy {
 public:
  std::string_view name() const override { return "round-robin"; }
  Result<size_t> Choose(const SimRequest&, std::string_view, const Fleet& fleet) override {
    return Next(PrefillPool(fleet), next_prefill_, "prefill");
  }
  Result<size_t> ChooseDecode(const SimRequest&, std::string_view, const Fleet& fleet, size_t,
                              double) override {
    return Next(DecodePool(fleet), next_decode_, "decode");
  }

 private:
  Result<size_t> Next(Pool pool, size_t& next, std::string_view step) const {
    if (pool.count == 0) return EmptyPool(name(), step);
    return pool.first + next++ % pool.count;
  }

  size_t next_prefill_ = 0;
  size_t next_decode_ = 0;
};

class RandomPolicy final : public RoutingPolicy {
 public:
  explicit RandomPolicy(uint64_t seed) : state_(seed) {}
  std::string_view name() const override { return "random"; }
  Result<size_t> Choose(const SimRequest&, std::string_view, const Fleet& fleet) override {
    const Pool pool = PrefillPool(fleet);
    if (pool.count == 0) return EmptyPool(name(), "prefill");
    return pool.first + MixSeed(state_, counter_++) % pool.count;
  }
  Result<size_t> ChooseDecode(const SimRequest&, std::string_view, const Fleet& fleet, size_t,
                              double) override {
    const Pool pool = DecodePool(fleet);
    if (pool.count == 0) return EmptyPool(name(), "decode");
    // A stream of its own, so the prefill draws are those a colocated run
    // of the same seed makes.
    return pool.first + MixSeed(~state_, decode_counter_++) % pool.count;
  }

 private:
  uint64_t state_;
  uint64_t counter_ = 0;
  uint64_t decode_counter_ = 0;
};

class LeastLoadPolicy final : public RoutingPolicy {
 public:
  std::string_view name() const override { return "least-load"; }
  Result<size_t> Choose(const SimRequest&, std::string_view, const Fleet& fleet) override {
    return Least(fleet, PrefillPool(fleet), prefill_rotation_, "prefill");
  }
  Result<size_t> ChooseDecode(const SimRequest&, std::string_view, const Fleet& fleet, size_t,
                              double) override {
    return Least(fleet, DecodePool(fleet), decode_rotation_, "decode");
  }

 private:
  Result<size_t> Least(const Fleet& fleet, Pool pool, size_t& rotation,
                       std::string_view step) const {
    if (pool.count == 0) return EmptyPool(name(), step);
    // A decode engine's load is its pulls; a prefill engine has none, so
    // one sum serves both pools.
    const auto load = [&fleet](size_t i) {
      return fleet.engine(i).outstanding() + fleet.engine(i).outstanding_transfers();
    };
    // Ties rotate, so an idle fleet is not all sent to engine 0 (which
    // would be prefix-affine by accident).
    size_t best = pool.first + rotation % pool.count;
    for (size_t k = 1; k < pool.count; ++k) {
      const size_t i = pool.first + (rotation + k) % pool.count;
      if (load(i) < load(best)) best = i;
    }
    ++rotation;
    return best;
  }

  size_t prefill_rotation_ = 0;
  size_t decode_rotation_ = 0;
};

class OraclePolicy final : public RoutingPolicy {
 public:
  explicit OraclePolicy(double overlap_weight) : overlap_weight_(overlap_weight) {}
  std::string_view name() const override { return "oracle"; }
  Result<size_t> Choose(const SimRequest& request, std::string_view cache_salt,
                        const Fleet& fleet) override {
    const int64_t prompt = static_cast<int64_t>(request.tokens.size());
    return Cheapest(request, fleet, PrefillPool(fleet), "prefill", [&](const EngineModel& engine) {
      const int64_t hit_tokens =
          static_cast<int64_t>(engine.pool().CachedPrefix(request.tokens, cache_salt)) *
          engine.pool().options().block_size;
      const double wait = engine.PrefillBacklogS(request.arrival_s);
      return wait + overlap_weight_ * engine.cost().PrefillSeconds(prompt, prompt - hit_tokens);
    });
  }

  Result<size_t> ChooseDecode(const SimRequest& request, std::string_view cache_salt,
                              const Fleet& fleet, size_t, double ready_s) override {
    const int64_t prompt = static_cast<int64_t>(request.tokens.size());
    return Cheapest(request, fleet, DecodePool(fleet), "decode", [&](const EngineModel& engine) {
      // What the engine lacks is what it pulls, the partial last block
      // included (it is never cached anywhere).
      const int64_t held_tokens =
          static_cast<int64_t>(engine.pool().CachedPrefix(request.tokens, cache_salt)) *
          engine.pool().options().block_size;
      const double wait = std::max(0.0, engine.link_busy_until_s() - ready_s);
      return wait + TransferSeconds(fleet.options().shape, prompt - held_tokens,
                                    fleet.options().link_bytes_per_s);
    });
  }

 private:
  template <typename Cost>
  Result<size_t> Cheapest(const SimRequest& request, const Fleet& fleet, Pool pool,
                          std::string_view step, const Cost& cost_of) const {
    if (pool.count == 0) return EmptyPool(name(), step);
    size_t best = pool.first;
    double best_cost = std::numeric_limits<double>::infinity();
    uint64_t best_affinity = 0;
    const uint64_t head = HeadSignature(request.tokens, fleet.options().block_size);
    for (size_t i = pool.first; i < pool.first + pool.count; ++i) {
      const double cost = cost_of(fleet.engine(i));
      // Ties go by rendezvous on the prompt's head, as kvgov's do, so the
      // oracle is not handicapped by piling cold prefixes on engine 0.
      const uint64_t affinity = MixSeed(head, i);
      if (cost < best_cost || (cost == best_cost && affinity > best_affinity)) {
        best_cost = cost;
        best_affinity = affinity;
        best = i;
      }
    }
    return best;
  }

  double overlap_weight_;
};

class KvgovPolicy final : public RoutingPolicy {
 public:
  KvgovPolicy(const FleetOptions& fleet, router::RouteWeights weights)
      : model_(fleet.model),
        block_size_(fleet.block_size),
        disaggregated_(fleet.disaggregated()),
        events_(fleet),
        router_(&events_.index(), &status_, weights) {
    for (int i = 0; i < fleet.engines; ++i) {
      const std::string worker = Fleet::WorkerId(static_cast<size_t>(i));
      // Registration of a fresh id in a fresh table cannot fail.
      (void)status_.Add(worker, /*probed=*/false);
      // Colocated, both lists stay empty: the route may use every worker.
      if (fleet.disaggregated()) {
        (i < fleet.prefill_engines ? prefill_workers_ : decode_workers_).push_back(worker);
      }
    }
  }

  std::string_view name() const override { return "kvgov"; }

  Result<size_t> Choose(const SimRequest& request, std::string_view cache_salt,
                        const Fleet&) override {
    router::RouteRequest route = RouteOf(request);
    route.workers = prefill_workers_;
    return RouteTo(route, cache_salt, PrefillDecision(request.id), request.arrival_s,
                   "request " + std::to_string(request.id));
  }

  Result<size_t> ChooseDecode(const SimRequest& request, std::string_view cache_salt,
                              const Fleet& fleet, size_t, double ready_s) override {
    if (fleet.decode_count() == 0) return EmptyPool(name(), "decode");
    router::RouteRequest route = RouteOf(request);
    route.workers = decode_workers_;
    // The prefill engine pins every full block of the prompt, and here the
    // pin never lapses; the partial last block is pulled too, but kvgov's
    // cost counts whole blocks.
    route.pullable_blocks = request.tokens.size() / static_cast<size_t>(block_size_);
    return RouteTo(route, cache_salt, DecodeDecision(request.id), ready_s,
                   "the decode step of request " + std::to_string(request.id));
  }

  Status Observe(size_t engine, std::string_view payload) override {
    return events_.Observe(engine, payload);
  }

  // As the gateway does, a colocated decision turns from prefill load to
  // decode load at its first token and is released when the answer ends; a
  // disaggregated prefill decision is released when the prefill ends (the
  // decode step is a decision of its own).
  void Finished(uint64_t request_id) override {
    if (disaggregated_) {
      (void)router_.Done(PrefillDecision(request_id));
    } else {
      (void)router_.Prefilled(PrefillDecision(request_id));
    }
  }
  void Completed(uint64_t request_id) override {
    if (!disaggregated_) (void)router_.Done(PrefillDecision(request_id));
  }
  void Transferred(uint64_t request_id) override { (void)router_.Done(DecodeDecision(request_id)); }

 private:
  static std::string PrefillDecision(uint64_t request_id) { return std::to_string(request_id); }
  static std::string DecodeDecision(uint64_t request_id) {
    return std::to_string(request_id) + "/decode";
  }

  router::RouteRequest RouteOf(const SimRequest& request) const {
    router::RouteRequest route;
    route.model = model_;
    route.tenant = request.tenant;
    route.token_ids = request.tokens;
    return route;
  }

  // `what` names the step in errors.
  Result<size_t> RouteTo(const router::RouteRequest& route, std::string_view cache_salt,
                         std::string decision_id, double now_s, const std::string& what) {
    const int64_t now_ms = static_cast<int64_t>(std::llround(now_s * 1000));
    KVGOV_ASSIGN_OR_RETURN(router::RouteDecision decision,
                           router_.Route(route, cache_salt, std::move(decision_id), now_ms));
    if (decision.worker.empty()) {
      return Status::FailedPrecondition("kvgov found no eligible worker for " + what);
    }
    size_t engine = 0;
    const std::string_view digits = std::string_view(decision.worker).substr(4);  // "sim-"
    std::from_chars(digits.data(), digits.data() + digits.size(), engine);
    return engine;
  }

  std::string model_;
  int64_t block_size_;
  bool disaggregated_;
  std::vector<std::string> prefill_workers_;
  std::vector<std::string> decode_workers_;
  EventIndex events_;  // the router reads its index
  router::WorkerStatusTable status_;
  router::Router router_;
};

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

}  // namespace

std::unique_ptr<RoutingPolicy> MakeRoundRobinPolicy() {
  return std::make_unique<RoundRobinPolicy>();
}
std::unique_ptr<RoutingPolicy> MakeRandomPolicy(uint64_t seed) {
  return std::make_unique<RandomPolicy>(seed);
}
std::unique_ptr<RoutingPolicy> MakeLeastLoadPolicy() { return std::make_unique<LeastLoadPolicy>(); }
std::unique_ptr<RoutingPolicy> MakeOraclePolicy(double overlap_weight) {
  return std::make_unique<OraclePolicy>(overlap_weight);
}
std::unique_ptr<RoutingPolicy> MakeKvgovPolicy(const FleetOptions& fleet,
                                               router::RouteWeights weights) {
  return std::make_unique<KvgovPolicy>(fleet, weights);
}

Result<std::unique_ptr<RoutingPolicy>> MakePolicy(std::string_view name, const FleetOptions& fleet,
                                                  uint64_t seed,
                                                  const router::RouteWeights& weights) {
  if (name == "kvgov") return MakeKvgovPolicy(fleet, weights);
  if (name == "round-robin") return MakeRoundRobinPolicy();
  if (name == "random") return MakeRandomPolicy(seed);
  if (name == "least-load") return MakeLeastLoadPolicy();
  if (name == "oracle") return MakeOraclePolicy(weights.overlap_weight);
  if (name == "dynamo") return MakeDynamoPolicy(fleet, {.overlap_score_weight = 1.0, .seed = seed});
  if (name == "llm-d") {
    LlmdPolicyOptions options;
    options.seed = seed;
    return MakeLlmdPolicy(fleet, options);
  }
  if (name == "sglang") return MakeSglangPolicy(fleet, {});
  if (name == "prefix-hash") return MakePrefixHashPolicy(fleet, {});
  return Status::InvalidArgument("unknown policy \"" + std::string(name.substr(0, 64)) +
                                 "\": want kvgov, round-robin, random, least-load, oracle, "
                                 "dynamo, llm-d, sglang or prefix-hash");
}

PolicyReport Summarize(std::string policy, std::span<const RequestOutcome> outcomes, size_t engines,
                       size_t spread_engines) {
  PolicyReport report;
  report.policy = std::move(policy);
  report.busy_s_per_engine.assign(engines, 0.0);
  report.requests_per_engine.assign(engines, 0);
  std::vector<double> ttfts;
  ttfts.reserve(outcomes.size());
  std::vector<double> e2es;
  e2es.reserve(outcomes.size());
  double ttft_total = 0;
  for (const RequestOutcome& outcome : outcomes) {
    ++report.requests;
    report.prompt_blocks += outcome.prompt_blocks;
    report.hit_blocks += outcome.hit_blocks;
    report.prompt_tokens += outcome.prompt_tokens;
    report.computed_tokens += outcome.computed_tokens;
    PrefillCauses& causes = report.prefill_causes;
    causes.first_seen_tokens += outcome.prefill_causes.first_seen_tokens;
    causes.not_held_tokens += outcome.prefill_causes.not_held_tokens;
    causes.routed_away_tokens += outcome.prefill_causes.routed_away_tokens;
    causes.while_queued_tokens += outcome.prefill_causes.while_queued_tokens;
    if (outcome.engine < engines) {
      report.busy_s_per_engine[outcome.engine] += outcome.prefill_s;
      ++report.requests_per_engine[outcome.engine];
    }
    ttfts.push_back(outcome.ttft_s);
    ttft_total += outcome.ttft_s;
    e2es.push_back(outcome.e2e_s);
    if (outcome.queue_s + outcome.link_wait_s > kLongWaitS) ++report.long_waits;
    if (outcome.decode_engine.has_value()) {
      report.disaggregated = true;
      report.pulled_tokens += outcome.pulled_tokens;
      report.pull_saved_tokens += outcome.prompt_tokens - outcome.pulled_tokens;
      report.transfer_s += outcome.transfer_s;
      report.link_wait_s += outcome.link_wait_s;
    }
  }
  std::sort(ttfts.begin(), ttfts.end());
  report.ttft_p50_s = Percentile(ttfts, 0.50);
  report.ttft_p90_s = Percentile(ttfts, 0.90);
  report.ttft_p99_s = Percentile(ttfts, 0.99);
  std::sort(e2es.begin(), e2es.end());
  report.decode_modeled = !e2es.empty() && e2es.back() > 0;
  report.e2e_p50_s = Percentile(e2es, 0.50);
  report.e2e_p99_s = Percentile(e2es, 0.99);
  report.ttft_mean_s = ttfts.empty() ? 0 : ttft_total / static_cast<double>(ttfts.size());
  const size_t spread = spread_engines == 0 ? engines : std::min(spread_engines, engines);
  double busiest = 0;
  double busy_total = 0;
  for (size_t i = 0; i < spread; ++i) {
    busiest = std::max(busiest, report.busy_s_per_engine[i]);
    busy_total += report.busy_s_per_engine[i];
  }
  report.load_spread = busy_total > 0 ? busiest / (busy_total / static_cast<double>(spread)) : 0;
  return report;
}

namespace {

// A disaggregated request whose prefill is done or under way, waiting for
// its decode step; the earliest prefill finish first, ties in arrival order.
struct PendingPull {
  double ready_s = 0;
  size_t index = 0;  // in the trace
  size_t prefill_engine = 0;
  std::string cache_salt;
  bool operator>(const PendingPull& other) const {
    return std::tie(ready_s, index) > std::tie(other.ready_s, other.index);
  }
};

Status Publish(RoutingPolicy& policy, size_t engine, double ts, std::vector<EngineEvent> events,
               WireEncoding encoding) {
  if (events.empty()) return Status::Ok();
  EngineEventBatch batch;
  batch.ts = ts;
  batch.dp_rank = 0;
  batch.events = std::move(events);
  KVGOV_ASSIGN_OR_RETURN(const std::string payload, EncodeEventBatch(batch, encoding));
  return policy.Observe(engine, payload);
}

Status OutsidePool(const RoutingPolicy& policy, std::string_view step, size_t engine, size_t first,
                   size_t count) {
  return Status::Internal("policy " + std::string(policy.name()) + " chose engine " +
                          std::to_string(engine) + " for a " + std::string(step) +
                          " step; the fleet's " + std::string(step) + " engines are " +
                          std::to_string(first) + ".." + std::to_string(first + count - 1));
}

}  // namespace

namespace {

// Why the request's prefill will compute what it does, as far as its
// routing decides: what no earlier prompt had, what no engine it could go
// to held, and what one of them held beyond the chosen engine. Records the
// prompt in `history`.
PrefillCauses CausesWhenRouted(const Fleet& fleet, size_t engine, const SimRequest& request,
                               std::string_view cache_salt, PromptHistory& history) {
  const auto tokens = [&](size_t blocks) {
    return static_cast<int64_t>(blocks) * fleet.options().block_size;
  };
  // An engine holds only what an earlier prompt had: seen >= best >= routed.
  const size_t seen = history.Record(request.tokens, cache_salt);
  const Pool pool = PrefillPool(fleet);
  size_t best = 0;
  size_t routed = 0;
  for (size_t i = pool.first; i < pool.first + pool.count; ++i) {
    const size_t held = fleet.engine(i).pool().CachedPrefix(request.tokens, cache_salt);
    best = std::max(best, held);
    if (i == engine) routed = held;
  }
  return {.first_seen_tokens = static_cast<int64_t>(request.tokens.size()) - tokens(seen),
          .not_held_tokens = tokens(seen) - tokens(best),
          .routed_away_tokens = tokens(best) - tokens(routed),
          .while_queued_tokens = 0};
}

// Once the request is prefilled: the rest of what it computed changed on
// its engine after routing.
void SettleWhileQueued(RequestOutcome& outcome) {
  PrefillCauses& causes = outcome.prefill_causes;
  causes.while_queued_tokens = outcome.computed_tokens - causes.first_seen_tokens -
                               causes.not_held_tokens - causes.routed_away_tokens;
}

// Replay with decode modeled: arrivals in order; before each, every engine
// runs its steps up to the arrival, and what they did reaches the policy
// (events, first tokens, finished answers) in time order per engine.
Result<std::vector<RequestOutcome>> ReplayDecoding(std::span<const SimRequest> trace,
                                                   const FleetOptions& options,
                                                   RoutingPolicy& policy) {
  Fleet fleet(options);
  PromptHistory history(options.block_size);
  std::vector<RequestOutcome> outcomes(trace.size());
  const auto advance = [&](double until_s) -> Status {
    for (size_t i = 0; i < fleet.size(); ++i) {
      EngineModel::Progress progress;
      fleet.mutable_engine(i).AdvanceTo(until_s, options.decode, progress);
      for (EngineModel::Progress::Started& started : progress.started) {
        RequestOutcome& outcome = outcomes[started.id];
        outcome.engine = i;
        outcome.prompt_blocks = started.prefill.prompt_blocks;
        outcome.hit_blocks = started.prefill.hit_blocks;
        outcome.computed_tokens = started.prefill.computed_tokens;
        SettleWhileQueued(outcome);
        outcome.queue_s = started.at_s - trace[started.id].arrival_s;
        KVGOV_RETURN_IF_ERROR(
            Publish(policy, i, started.at_s, std::move(started.prefill.events), options.encoding));
      }
      for (const EngineModel::Progress::Token& token : progress.first_tokens) {
        RequestOutcome& outcome = outcomes[token.id];
        outcome.ttft_s = token.at_s - trace[token.id].arrival_s;
        outcome.prefill_s = token.prefill_s;
        policy.Finished(token.id);
      }
      for (const EngineModel::Progress::Token& token : progress.completed) {
        outcomes[token.id].e2e_s = token.at_s - trace[token.id].arrival_s;
        policy.Completed(token.id);
      }
    }
    return Status::Ok();
  };
  for (const SimRequest& request : trace) {
    if (request.id >= trace.size() || &trace[request.id] != &request) {
      return Status::InvalidArgument("trace: request ids must be 0, 1, 2, ... in order");
    }
    KVGOV_RETURN_IF_ERROR(advance(request.arrival_s));
    const std::string salt = fleet.CacheSalt(request.tenant);
    KVGOV_ASSIGN_OR_RETURN(const size_t engine, policy.Choose(request, salt, fleet));
    if (engine >= fleet.size()) {
      return Status::Internal("policy " + std::string(policy.name()) + " chose engine " +
                              std::to_string(engine) + " of " + std::to_string(fleet.size()));
    }
    outcomes[request.id].prompt_tokens = static_cast<int64_t>(request.tokens.size());
    outcomes[request.id].prefill_causes = CausesWhenRouted(fleet, engine, request, salt, history);
    fleet.mutable_engine(engine).Enqueue(request, salt, request.arrival_s);
  }
  KVGOV_RETURN_IF_ERROR(advance(std::numeric_limits<double>::infinity()));
  return outcomes;
}

}  // namespace

Result<std::vector<RequestOutcome>> Replay(std::span<const SimRequest> trace,
                                           const FleetOptions& options, RoutingPolicy& policy) {
  KVGOV_RETURN_IF_ERROR(ValidateFleetOptions(options));
  if (options.decode.enabled) return ReplayDecoding(trace, options, policy);
  Fleet fleet(options);
  PromptHistory history(options.block_size);
  std::vector<RequestOutcome> outcomes(trace.size());
  std::priority_queue<PendingPull, std::vector<PendingPull>, std::greater<>> pending;

  // Release what finished by `now_s`, in finishing order across the fleet
  // (a prefill before a pull finishing at the same moment), so a
  // load-aware policy sees the queues as they are now.
  const auto release = [&](double now_s) {
    std::vector<std::tuple<double, int, uint64_t>> finished;
    for (size_t i = 0; i < fleet.size(); ++i) {
      EngineModel& engine = fleet.mutable_engine(i);
      for (const auto& [at, id] : engine.PopFinished(now_s)) finished.emplace_back(at, 0, id);
      for (const auto& [at, id] : engine.PopTransferred(now_s)) finished.emplace_back(at, 1, id);
    }
    std::sort(finished.begin(), finished.end());
    for (const auto& [at, step, id] : finished) {
      if (step == 0) {
        policy.Finished(id);
        if (!fleet.disaggregated()) policy.Completed(id);  // no decode: done with its prefill
      } else {
        policy.Transferred(id);
      }
    }
  };

  size_t next = 0;
  while (next < trace.size() || !pending.empty()) {
    // A prefill that finished by the next arrival hands over first, so the
    // arrival's choice sees the link it occupies.
    if (!pending.empty() &&
        (next == trace.size() || pending.top().ready_s <= trace[next].arrival_s)) {
      PendingPull pull = pending.top();
      pending.pop();
      release(pull.ready_s);
      const SimRequest& request = trace[pull.index];
      KVGOV_ASSIGN_OR_RETURN(
          const size_t engine,
          policy.ChooseDecode(request, pull.cache_salt, fleet, pull.prefill_engine, pull.ready_s));
      if (engine < fleet.prefill_count() || engine >= fleet.size()) {
        return OutsidePool(policy, "decode", engine, fleet.prefill_count(), fleet.decode_count());
      }
      EngineModel::Pulled pulled = fleet.mutable_engine(engine).Pull(
          request.id, pull.ready_s, request.tokens, pull.cache_salt, options.link_bytes_per_s);
      KVGOV_RETURN_IF_ERROR(
          Publish(policy, engine, pull.ready_s, std::move(pulled.cached.events), options.encoding));
      RequestOutcome& outcome = outcomes[pull.index];
      outcome.decode_engine = engine;
      outcome.decode_hit_blocks = pulled.cached.hit_blocks;
      outcome.pulled_tokens = pulled.pulled_tokens;
      outcome.link_wait_s = pulled.start_s - pulled.ready_s;
      outcome.transfer_s = pulled.finish_s - pulled.start_s;
      outcome.ttft_s = pulled.finish_s - request.arrival_s;
      continue;
    }

    const SimRequest& request = trace[next];
    release(request.arrival_s);
    std::string salt = fleet.CacheSalt(request.tenant);
    KVGOV_ASSIGN_OR_RETURN(const size_t engine, policy.Choose(request, salt, fleet));
    if (engine >= fleet.prefill_count()) {
      if (!fleet.disaggregated()) {
        return Status::Internal("policy " + std::string(policy.name()) + " chose engine " +
                                std::to_string(engine) + " of " + std::to_string(fleet.size()));
      }
      return OutsidePool(policy, "prefill", engine, 0, fleet.prefill_count());
    }
    const PrefillCauses causes = CausesWhenRouted(fleet, engine, request, salt, history);
    EngineModel::Served served =
        fleet.mutable_engine(engine).Serve(request.id, request.arrival_s, request.tokens, salt);
    KVGOV_RETURN_IF_ERROR(Publish(policy, engine, request.arrival_s,
                                  std::move(served.prefill.events), options.encoding));
    RequestOutcome& outcome = outcomes[next];
    outcome.engine = engine;
    outcome.prompt_blocks = served.prefill.prompt_blocks;
    outcome.hit_blocks = served.prefill.hit_blocks;
    outcome.prompt_tokens = static_cast<int64_t>(request.tokens.size());
    outcome.computed_tokens = served.prefill.computed_tokens;
    outcome.prefill_causes = causes;
    SettleWhileQueued(outcome);
    outcome.prefill_s = served.finish_s - served.start_s;
    outcome.ttft_s = served.ttft_s;
    outcome.queue_s = served.start_s - request.arrival_s;
    if (fleet.disaggregated()) {
      pending.push(PendingPull{.ready_s = served.finish_s,
                               .index = next,
                               .prefill_engine = engine,
                               .cache_salt = std::move(salt)});
    }
    ++next;
  }
  return outcomes;
}

Result<PolicyReport> RunTrace(std::span<const SimRequest> trace, const FleetOptions& options,
                              RoutingPolicy& policy) {
  KVGOV_ASSIGN_OR_RETURN(const std::vector<RequestOutcome> outcomes,
                         Replay(trace, options, policy));
  const size_t engines = static_cast<size_t>(options.engines);
  PolicyReport report =
      Summarize(std::string(policy.name()), outcomes, engines,
                options.disaggregated() ? static_cast<size_t>(options.prefill_engines) : 0);
  report.disaggregated = options.disaggregated();
  return report;
}

std::string FormatReports(std::span<const PolicyReport> reports) {
  // The decode-side columns only when a report has decode steps, so a
  // colocated table reads as it always has.
  const bool disaggregated = std::any_of(reports.begin(), reports.end(),
                                         [](const PolicyReport& r) { return r.disaggregated; });
  const bool decode = std::any_of(reports.begin(), reports.end(),
                                  [](const PolicyReport& r) { return r.decode_modeled; });
  std::string out;
  char line[384];
  std::snprintf(line, sizeof(line), "%-18s %9s %9s %14s %10s %10s %10s %7s %9s", "policy",
                "requests", "hit rate", "prefill tokens", "TTFT p50", "TTFT p90", "TTFT p99",
                "spread", "waits>10s");
  out += line;
  if (disaggregated) {
    std::snprintf(line, sizeof(line), " %14s %14s %10s", "pulled tokens", "pull saved", "transfer");
    out += line;
  }
  if (decode) {
    std::snprintf(line, sizeof(line), " %10s %10s", "E2E p50", "E2E p99");
    out += line;
  }
  out += '\n';
  for (const PolicyReport& r : reports) {
    std::snprintf(line, sizeof(line), "%-18s %9llu %8.1f%% %14lld %9.3fs %9.3fs %9.3fs %7.2f %9llu",
                  r.policy.c_str(), static_cast<unsigned long long>(r.requests),
                  100.0 * r.hit_rate(), static_cast<long long>(r.computed_tokens), r.ttft_p50_s,
                  r.ttft_p90_s, r.ttft_p99_s, r.load_spread,
                  static_cast<unsigned long long>(r.long_waits));
    out += line;
    if (disaggregated) {
      std::snprintf(line, sizeof(line), " %14lld %14lld %9.2fs",
                    static_cast<long long>(r.pulled_tokens),
                    static_cast<long long>(r.pull_saved_tokens), r.transfer_s);
      out += line;
    }
    if (decode) {
      std::snprintf(line, sizeof(line), " %9.3fs %9.3fs", r.e2e_p50_s, r.e2e_p99_s);
      out += line;
    }
    out += '\n';
  }
  return out;
}

std::string FormatPrefillCauses(std::span<const PolicyReport> reports) {
  std::string out = "prefill tokens by cause (docs/formats/simulator.md):\n";
  char line[256];
  std::snprintf(line, sizeof(line), "%-18s %14s %14s %12s %12s %13s\n", "policy", "prefill tokens",
                "first seen", "not held", "routed away", "while queued");
  out += line;
  for (const PolicyReport& r : reports) {
    const PrefillCauses& c = r.prefill_causes;
    std::snprintf(
        line, sizeof(line), "%-18s %14lld %14lld %12lld %12lld %13lld\n", r.policy.c_str(),
        static_cast<long long>(r.computed_tokens), static_cast<long long>(c.first_seen_tokens),
        static_cast<long long>(c.not_held_tokens), static_cast<long long>(c.routed_away_tokens),
        static_cast<long long>(c.while_queued_tokens));
    out += line;
  }
  return out;
}

}  // namespace kvgov::sim
