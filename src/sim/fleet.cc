#include "kvgov/sim/fleet.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "kvgov/adapters/engine_wire.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/router/worker_status.h"

namespace kvgov::sim {

EngineModel::EngineModel(BlockPoolOptions pool, ModelShape shape)
    : pool_(std::move(pool)), cost_(shape) {}

EngineModel::Served EngineModel::Serve(uint64_t request_id, double arrival_s,
                                       std::span<const int64_t> tokens,
                                       std::string_view cache_salt) {
  Served served;
  served.prefill = pool_.Prefill(tokens, cache_salt);
  const double prefill_s = cost_.PrefillSeconds(static_cast<int64_t>(tokens.size()),
                                                served.prefill.computed_tokens);
  served.start_s = std::max(arrival_s, busy_until_s_);
  served.finish_s = served.start_s + prefill_s;
  served.ttft_s = served.finish_s - arrival_s;
  busy_until_s_ = served.finish_s;
  queue_.emplace_back(served.finish_s, request_id);
  return served;
}

std::vector<std::pair<double, uint64_t>> EngineModel::PopFinished(double now_s) {
  std::vector<std::pair<double, uint64_t>> finished;
  while (!queue_.empty() && queue_.front().first <= now_s) {
    finished.push_back(queue_.front());
    queue_.pop_front();
  }
  return finished;
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

std::string Fleet::WorkerId(size_t engine) { return "sim-" + std::to_string(engine); }

std::string Fleet::CacheSalt(std::string_view tenant) const {
  return tenant.empty() ? std::string() : router::TenantCacheSalt(options_.tenant_secret, tenant);
}

namespace {

class RoundRobinPolicy final : public RoutingPolicy {
 public:
  std::string_view name() const override { return "round-robin"; }
  Result<size_t> Choose(const SimRequest&, std::string_view, const Fleet& fleet) override {
    return next_++ % fleet.size();
  }

 private:
  size_t next_ = 0;
};

class RandomPolicy final : public RoutingPolicy {
 public:
  explicit RandomPolicy(uint64_t seed) : state_(seed) {}
  std::string_view name() const override { return "random"; }
  Result<size_t> Choose(const SimRequest&, std::string_view, const Fleet& fleet) override {
    return MixSeed(state_, counter_++) % fleet.size();
  }

 private:
  uint64_t state_;
  uint64_t counter_ = 0;
};

class LeastLoadPolicy final : public RoutingPolicy {
 public:
  std::string_view name() const override { return "least-load"; }
  Result<size_t> Choose(const SimRequest&, std::string_view, const Fleet& fleet) override {
    // Ties rotate, so an idle fleet is not all sent to engine 0 (which
    // would be prefix-affine by accident).
    size_t best = rotation_ % fleet.size();
    for (size_t k = 1; k < fleet.size(); ++k) {
      const size_t i = (rotation_ + k) % fleet.size();
      if (fleet.engine(i).outstanding() < fleet.engine(best).outstanding()) best = i;
    }
    ++rotation_;
    return best;
  }

 private:
  size_t rotation_ = 0;
};

class OraclePolicy final : public RoutingPolicy {
 public:
  explicit OraclePolicy(double overlap_weight) : overlap_weight_(overlap_weight) {}
  std::string_view name() const override { return "oracle"; }
  Result<size_t> Choose(const SimRequest& request, std::string_view cache_salt,
                        const Fleet& fleet) override {
    size_t best = 0;
    double best_cost = std::numeric_limits<double>::infinity();
    uint64_t best_affinity = 0;
    const uint64_t head = HeadSignature(request.tokens, fleet.options().block_size);
    const int64_t prompt = static_cast<int64_t>(request.tokens.size());
    for (size_t i = 0; i < fleet.size(); ++i) {
      const EngineModel& engine = fleet.engine(i);
      const int64_t hit_tokens =
          static_cast<int64_t>(engine.pool().CachedPrefix(request.tokens, cache_salt)) *
          engine.pool().options().block_size;
      const double wait = std::max(0.0, engine.busy_until_s() - request.arrival_s);
      const double cost =
          wait + overlap_weight_ * engine.cost().PrefillSeconds(prompt, prompt - hit_tokens);
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

 private:
  double overlap_weight_;
};

class KvgovPolicy final : public RoutingPolicy {
 public:
  KvgovPolicy(const FleetOptions& fleet, router::RouteWeights weights)
      : model_(fleet.model), router_(&index_, &status_, weights) {
    for (int i = 0; i < fleet.engines; ++i) {
      const std::string worker = Fleet::WorkerId(static_cast<size_t>(i));
      // Registration of fresh ids in fresh tables cannot fail.
      (void)index_.AddWorker(worker, fleet.model, fleet.block_size);
      (void)status_.Add(worker, /*probed=*/false);
    }
  }

  std::string_view name() const override { return "kvgov"; }

  Result<size_t> Choose(const SimRequest& request, std::string_view cache_salt,
                        const Fleet&) override {
    router::RouteRequest route;
    route.model = model_;
    route.tenant = request.tenant;
    route.token_ids = request.tokens;
    const int64_t now_ms = static_cast<int64_t>(std::llround(request.arrival_s * 1000));
    KVGOV_ASSIGN_OR_RETURN(
        router::RouteDecision decision,
        router_.Route(route, cache_salt, std::to_string(request.id), now_ms));
    if (decision.worker.empty()) {
      return Status::FailedPrecondition("kvgov found no eligible worker for request " +
                                        std::to_string(request.id));
    }
    size_t engine = 0;
    const std::string_view digits = std::string_view(decision.worker).substr(4);  // "sim-"
    std::from_chars(digits.data(), digits.data() + digits.size(), engine);
    return engine;
  }

  Status Observe(size_t engine, std::string_view payload) override {
    KVGOV_ASSIGN_OR_RETURN(EngineEventBatch batch, adapters::DecodeEngineBatch(payload));
    const std::string worker = Fleet::WorkerId(engine);
    for (const EngineEvent& event : batch.events) {
      KVGOV_RETURN_IF_ERROR(index_.Apply(worker, event).status());
    }
    return Status::Ok();
  }

  void Finished(uint64_t request_id) override { (void)router_.Done(std::to_string(request_id)); }

 private:
  std::string model_;
  index::ResidencyIndex index_;
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
std::unique_ptr<RoutingPolicy> MakeLeastLoadPolicy() {
  return std::make_unique<LeastLoadPolicy>();
}
std::unique_ptr<RoutingPolicy> MakeOraclePolicy(double overlap_weight) {
  return std::make_unique<OraclePolicy>(overlap_weight);
}
std::unique_ptr<RoutingPolicy> MakeKvgovPolicy(const FleetOptions& fleet,
                                               router::RouteWeights weights) {
  return std::make_unique<KvgovPolicy>(fleet, weights);
}

Result<std::unique_ptr<RoutingPolicy>> MakePolicy(std::string_view name,
                                                  const FleetOptions& fleet, uint64_t seed,
                                                  const router::RouteWeights& weights) {
  if (name == "kvgov") return MakeKvgovPolicy(fleet, weights);
  if (name == "round-robin") return MakeRoundRobinPolicy();
  if (name == "random") return MakeRandomPolicy(seed);
  if (name == "least-load") return MakeLeastLoadPolicy();
  if (name == "oracle") return MakeOraclePolicy(weights.overlap_weight);
  return Status::InvalidArgument("unknown policy \"" + std::string(name.substr(0, 64)) +
                                 "\": want kvgov, round-robin, random, least-load or oracle");
}

PolicyReport Summarize(std::string policy, std::span<const RequestOutcome> outcomes,
                       size_t engines) {
  PolicyReport report;
  report.policy = std::move(policy);
  report.busy_s_per_engine.assign(engines, 0.0);
  std::vector<double> ttfts;
  ttfts.reserve(outcomes.size());
  double ttft_total = 0;
  for (const RequestOutcome& outcome : outcomes) {
    ++report.requests;
    report.prompt_blocks += outcome.prompt_blocks;
    report.hit_blocks += outcome.hit_blocks;
    report.prompt_tokens += outcome.prompt_tokens;
    report.computed_tokens += outcome.computed_tokens;
    if (outcome.engine < engines) report.busy_s_per_engine[outcome.engine] += outcome.prefill_s;
    ttfts.push_back(outcome.ttft_s);
    ttft_total += outcome.ttft_s;
  }
  std::sort(ttfts.begin(), ttfts.end());
  report.ttft_p50_s = Percentile(ttfts, 0.50);
  report.ttft_p90_s = Percentile(ttfts, 0.90);
  report.ttft_p99_s = Percentile(ttfts, 0.99);
  report.ttft_mean_s = ttfts.empty() ? 0 : ttft_total / static_cast<double>(ttfts.size());
  double busiest = 0;
  double busy_total = 0;
  for (double busy : report.busy_s_per_engine) {
    busiest = std::max(busiest, busy);
    busy_total += busy;
  }
  report.load_spread =
      busy_total > 0 ? busiest / (busy_total / static_cast<double>(engines)) : 0;
  return report;
}

Result<PolicyReport> RunTrace(std::span<const SimRequest> trace, const FleetOptions& options,
                              RoutingPolicy& policy) {
  Fleet fleet(options);
  std::vector<RequestOutcome> outcomes;
  outcomes.reserve(trace.size());
  for (const SimRequest& request : trace) {
    // Release what finished before this arrival, in finishing order across
    // the fleet, so a load-aware policy sees the queues as they are now.
    std::vector<std::pair<double, uint64_t>> finished;
    for (size_t i = 0; i < fleet.size(); ++i) {
      for (const auto& entry : fleet.mutable_engine(i).PopFinished(request.arrival_s)) {
        finished.push_back(entry);
      }
    }
    std::sort(finished.begin(), finished.end());
    for (const auto& entry : finished) policy.Finished(entry.second);

    const std::string salt = fleet.CacheSalt(request.tenant);
    KVGOV_ASSIGN_OR_RETURN(const size_t engine, policy.Choose(request, salt, fleet));
    if (engine >= fleet.size()) {
      return Status::Internal("policy " + std::string(policy.name()) + " chose engine " +
                              std::to_string(engine) + " of " + std::to_string(fleet.size()));
    }
    EngineModel::Served served =
        fleet.mutable_engine(engine).Serve(request.id, request.arrival_s, request.tokens, salt);
    if (!served.prefill.events.empty()) {
      EngineEventBatch batch;
      batch.ts = request.arrival_s;
      batch.dp_rank = 0;
      batch.events = std::move(served.prefill.events);
      KVGOV_ASSIGN_OR_RETURN(const std::string payload,
                             EncodeEventBatch(batch, options.encoding));
      KVGOV_RETURN_IF_ERROR(policy.Observe(engine, payload));
    }
    outcomes.push_back(RequestOutcome{
        .engine = engine,
        .prompt_blocks = served.prefill.prompt_blocks,
        .hit_blocks = served.prefill.hit_blocks,
        .prompt_tokens = static_cast<int64_t>(request.tokens.size()),
        .computed_tokens = served.prefill.computed_tokens,
        .prefill_s = served.finish_s - served.start_s,
        .ttft_s = served.ttft_s,
    });
  }
  return Summarize(std::string(policy.name()), outcomes, fleet.size());
}

std::string FormatReports(std::span<const PolicyReport> reports) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-18s %9s %9s %14s %10s %10s %10s %7s\n", "policy",
                "requests", "hit rate", "prefill tokens", "TTFT p50", "TTFT p90", "TTFT p99",
                "spread");
  out += line;
  for (const PolicyReport& r : reports) {
    std::snprintf(line, sizeof(line), "%-18s %9llu %8.1f%% %14lld %9.3fs %9.3fs %9.3fs %7.2f\n",
                  r.policy.c_str(), static_cast<unsigned long long>(r.requests),
                  100.0 * r.hit_rate(), static_cast<long long>(r.computed_tokens), r.ttft_p50_s,
                  r.ttft_p90_s, r.ttft_p99_s, r.load_spread);
    out += line;
  }
  return out;
}

}  // namespace kvgov::sim
