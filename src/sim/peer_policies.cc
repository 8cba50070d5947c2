#include "kvgov/sim/peer_policies.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kvgov/index/block_key.h"
#include "kvgov/index/residency_index.h"
#include "sim/event_index.h"
#include "sim/mix.h"

namespace kvgov::sim {
namespace {

Status ColocatedOnly(std::string_view policy, const Fleet& fleet) {
  if (!fleet.disaggregated()) return Status::Ok();
  return Status::FailedPrecondition("policy " + std::string(policy) +
                                    " places colocated fleets only");
}

// The lowest (or highest) of per-engine values, ties drawn from a seeded
// stream, as the peers' pickers draw among equals.
class TieBreaker {
 public:
  explicit TieBreaker(uint64_t seed) : state_(seed) {}
  template <typename Better>
  size_t Pick(size_t engines, const Better& better, const std::vector<double>& value) {
    std::vector<size_t> best = {0};
    for (size_t i = 1; i < engines; ++i) {
      if (better(value[i], value[best.front()])) {
        best = {i};
      } else if (!better(value[best.front()], value[i])) {
        best.push_back(i);
      }
    }
    return best[SplitMix64(state_ + draws_++) % best.size()];
  }

 private:
  uint64_t state_;
  uint64_t draws_ = 0;
};

class DynamoPolicy final : public RoutingPolicy {
 public:
  DynamoPolicy(const FleetOptions& fleet, DynamoPolicyOptions options)
      : options_(options), index_(fleet), ties_(options.seed) {}
  std::string_view name() const override { return "dynamo"; }
  bool colocated_only() const override { return true; }

  Result<size_t> Choose(const SimRequest& request, std::string_view cache_salt,
                        const Fleet& fleet) override {
    KVGOV_RETURN_IF_ERROR(ColocatedOnly(name(), fleet));
    const size_t engines = fleet.size();
    active_.resize(engines);
    const EventIndex::Match match = index_.Lookup(request, cache_salt, engines);
    std::vector<double> cost(engines);
    for (size_t i = 0; i < engines; ++i) {
      const double prefill_blocks =
          static_cast<double>(match.request_blocks - match.held[i]) + active_[i].prefill_blocks;
      // Active blocks are counted once however many sequences share them,
      // as ActiveSequences keeps unique blocks.
      size_t added = 0;
      for (index::BlockKey key : match.chain) added += active_[i].blocks.contains(key) ? 0 : 1;
      const double decode_blocks = static_cast<double>(active_[i].blocks.size() + added);
      cost[i] = options_.overlap_score_weight * prefill_blocks + decode_blocks;
    }
    const size_t chosen = ties_.Pick(engines, std::less<double>(), cost);
    Routed routed{chosen, static_cast<double>(match.request_blocks - match.held[chosen]),
                  match.chain, false};
    active_[chosen].prefill_blocks += routed.prefill_blocks;
    for (index::BlockKey key : routed.chain) ++active_[chosen].blocks[key];
    routed_[request.id] = std::move(routed);
    return chosen;
  }

  Status Observe(size_t engine, std::string_view payload) override {
    return index_.Observe(engine, payload);
  }

  // The prefill is done: its blocks no longer wait to be computed.
  void Finished(uint64_t request_id) override {
    auto it = routed_.find(request_id);
    if (it == routed_.end() || it->second.prefilled) return;
    active_[it->second.engine].prefill_blocks -= it->second.prefill_blocks;
    it->second.prefilled = true;
  }

  // The answer is done: its blocks are no longer active.
  void Completed(uint64_t request_id) override {
    Finished(request_id);
    auto it = routed_.find(request_id);
    if (it == routed_.end()) return;
    Active& active = active_[it->second.engine];
    for (index::BlockKey key : it->second.chain) {
      auto held = active.blocks.find(key);
      if (held != active.blocks.end() && --held->second == 0) active.blocks.erase(held);
    }
    routed_.erase(it);
  }

 private:
  struct Active {
    double prefill_blocks = 0;
    std::unordered_map<index::BlockKey, int>
        blocks;  // unique active blocks, by sequences holding them
  };
  struct Routed {
    size_t engine = 0;
    double prefill_blocks = 0;
    std::vector<index::BlockKey> chain;
    bool prefilled = false;
  };
  DynamoPolicyOptions options_;
  EventIndex index_;
  TieBreaker ties_;
  std::vector<Active> active_;
  std::map<uint64_t, Routed> routed_;
};

class LlmdPolicy final : public RoutingPolicy {
 public:
  LlmdPolicy(const FleetOptions& fleet, LlmdPolicyOptions options)
      : options_(options), index_(fleet), ties_(options.seed) {}
  std::string_view name() const override { return "llm-d"; }
  bool colocated_only() const override { return true; }

  Result<size_t> Choose(const SimRequest& request, std::string_view cache_salt,
                        const Fleet& fleet) override {
    KVGOV_RETURN_IF_ERROR(ColocatedOnly(name(), fleet));
    const size_t engines = fleet.size();
    const EventIndex::Match match = index_.Lookup(request, cache_salt, engines);
    // The queue scorer normalizes waiting requests over the candidates.
    size_t min_queue = std::numeric_limits<size_t>::max();
    size_t max_queue = 0;
    for (size_t i = 0; i < engines; ++i) {
      min_queue = std::min(min_queue, Waiting(fleet, i));
      max_queue = std::max(max_queue, Waiting(fleet, i));
    }
    std::vector<double> score(engines);
    for (size_t i = 0; i < engines; ++i) {
      const double prefix =
          match.request_blocks == 0
              ? 0
              : static_cast<double>(match.held[i]) / static_cast<double>(match.request_blocks);
      const double queue = max_queue == min_queue
                               ? 1.0
                               : 1.0 - static_cast<double>(Waiting(fleet, i) - min_queue) /
                                           static_cast<double>(max_queue - min_queue);
      const BlockPool& pool = fleet.engine(i).pool();
      const double kv_cache = 1.0 - static_cast<double>(pool.size()) /
                                        static_cast<double>(pool.options().capacity_blocks);
      score[i] = options_.prefix_weight * prefix + options_.queue_weight * queue +
                 options_.kv_cache_weight * kv_cache;
    }
    return ties_.Pick(engines, std::greater<double>(), score);
  }

  Status Observe(size_t engine, std::string_view payload) override {
    return index_.Observe(engine, payload);
  }

 private:
  // vllm:num_requests_waiting.
  static size_t Waiting(const Fleet& fleet, size_t i) { return fleet.engine(i).waiting(); }

  LlmdPolicyOptions options_;
  EventIndex index_;
  TieBreaker ties_;
};

class SglangPolicy final : public RoutingPolicy {
 public:
  SglangPolicy(const FleetOptions& fleet, SglangPolicyOptions options)
      : options_(options), block_size_(fleet.block_size) {}
  std::string_view name() const override { return "sglang"; }
  bool colocated_only() const override { return true; }

  Result<size_t> Choose(const SimRequest& request, std::string_view cache_salt,
                        const Fleet& fleet) override {
    KVGOV_RETURN_IF_ERROR(ColocatedOnly(name(), fleet));
    const size_t engines = fleet.size();
    trees_.resize(engines);
    load_.resize(engines, 0);
    const std::vector<uint64_t> path = Path(request.tokens, cache_salt);
    size_t chosen = 0;
    const auto [min_load, max_load] = std::minmax_element(load_.begin(), load_.end());
    const bool imbalanced = *max_load - *min_load > options_.balance_abs_threshold &&
                            static_cast<double>(*max_load) >
                                options_.balance_rel_threshold * static_cast<double>(*min_load);
    if (imbalanced) {
      chosen = static_cast<size_t>(min_load - load_.begin());
    } else {
      size_t best_match = 0;
      for (size_t i = 0; i < engines; ++i) {
        const size_t matched = Matched(trees_[i], path);
        if (matched > best_match) {
          best_match = matched;
          chosen = i;
        }
      }
      const double match_rate =
          request.tokens.empty()
              ? 0
              : static_cast<double>(best_match * static_cast<size_t>(block_size_)) /
                    static_cast<double>(request.tokens.size());
      if (match_rate <= options_.cache_threshold) {
        // The smallest tree; the first of equals, as the router's min_by.
        chosen = 0;
        for (size_t i = 1; i < engines; ++i) {
          if (trees_[i].size() < trees_[chosen].size()) chosen = i;
        }
      }
    }
    trees_[chosen].insert(path.begin(), path.end());
    ++load_[chosen];
    routed_[request.id] = chosen;
    return chosen;
  }

  void Completed(uint64_t request_id) override {
    auto it = routed_.find(request_id);
    if (it == routed_.end()) return;
    --load_[it->second];
    routed_.erase(it);
  }

 private:
  // One node a block: each full block's position in the prompt's chain.
  std::vector<uint64_t> Path(const std::vector<int64_t>& tokens, std::string_view salt) const {
    std::vector<uint64_t> path;
    uint64_t h = SplitMix64(std::hash<std::string_view>{}(salt));
    for (size_t end = static_cast<size_t>(block_size_); end <= tokens.size();
         end += static_cast<size_t>(block_size_)) {
      for (size_t i = end - static_cast<size_t>(block_size_); i < end; ++i) {
        h = SplitMix64(h ^ static_cast<uint64_t>(tokens[i]));
      }
      path.push_back(h);
    }
    return path;
  }
  static size_t Matched(const std::unordered_set<uint64_t>& tree,
                        const std::vector<uint64_t>& path) {
    size_t matched = 0;
    while (matched < path.size() && tree.contains(path[matched])) ++matched;
    return matched;
  }

  SglangPolicyOptions options_;
  int64_t block_size_;
  std::vector<std::unordered_set<uint64_t>> trees_;  // by engine
  std::vector<uint64_t> load_;                       // requests routed and not done
  std::map<uint64_t, size_t> routed_;
};

class PrefixHashPolicy final : public RoutingPolicy {
 public:
  PrefixHashPolicy(const FleetOptions& fleet, PrefixHashPolicyOptions options)
      : options_(options), block_size_(fleet.block_size) {
    for (int i = 0; i < fleet.engines; ++i) {
      for (int v = 0; v < options.virtual_nodes; ++v) {
        ring_.emplace(SplitMix64(SplitMix64(static_cast<uint64_t>(i)) + static_cast<uint64_t>(v)),
                      static_cast<size_t>(i));
      }
    }
  }
  std::string_view name() const override { return "prefix-hash"; }
  bool colocated_only() const override { return true; }

  Result<size_t> Choose(const SimRequest& request, std::string_view cache_salt,
                        const Fleet& fleet) override {
    KVGOV_RETURN_IF_ERROR(ColocatedOnly(name(), fleet));
    if (ring_.empty()) return Status::FailedPrecondition("prefix-hash: the ring is empty");
    const size_t head =
        std::min(request.tokens.size(), static_cast<size_t>(options_.prefix_blocks * block_size_));
    uint64_t h = SplitMix64(std::hash<std::string_view>{}(cache_salt));
    for (size_t i = 0; i < head; ++i) h = SplitMix64(h ^ static_cast<uint64_t>(request.tokens[i]));
    auto it = ring_.lower_bound(h);
    if (it == ring_.end()) it = ring_.begin();
    return it->second;
  }

 private:
  PrefixHashPolicyOptions options_;
  int64_t block_size_;
  std::map<uint64_t, size_t> ring_;  // point -> engine
};

}  // namespace

std::unique_ptr<RoutingPolicy> MakeDynamoPolicy(const FleetOptions& fleet,
                                                DynamoPolicyOptions options) {
  return std::make_unique<DynamoPolicy>(fleet, options);
}
std::unique_ptr<RoutingPolicy> MakeLlmdPolicy(const FleetOptions& fleet,
                                              LlmdPolicyOptions options) {
  return std::make_unique<LlmdPolicy>(fleet, options);
}
std::unique_ptr<RoutingPolicy> MakeSglangPolicy(const FleetOptions& fleet,
                                                SglangPolicyOptions options) {
  return std::make_unique<SglangPolicy>(fleet, options);
}
std::unique_ptr<RoutingPolicy> MakePrefixHashPolicy(const FleetOptions& fleet,
                                                    PrefixHashPolicyOptions options) {
  return std::make_unique<PrefixHashPolicy>(fleet, options);
}

}  // namespace kvgov::sim
