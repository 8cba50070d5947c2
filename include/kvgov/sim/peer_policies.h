#pragma once

// The peers' routing policies, reimplemented from their documentation so
// that kvgov is compared with them on the same trace and the same engines.
// Each cites its source in docs/formats/simulator.md, "The peers' policies";
// none is the peer's code. All place colocated fleets only.

#include <cstdint>
#include <memory>

#include "kvgov/sim/fleet.h"

namespace kvgov::sim {

/// NVIDIA Dynamo's KV router (docs/components/router/router-guide.md, the
/// cost function): cost = overlap_score_weight x prefill_blocks +
/// decode_blocks, the lowest wins, ties drawn at random (temperature 0).
/// prefill_blocks is the request's blocks the worker does not hold (from
/// the engines' KV events) plus the uncached blocks of the requests still
/// prefilling there; decode_blocks the distinct blocks of the requests
/// routed there and not yet done, this one included (a block several share
/// counts once). Both are the router's own bookkeeping of what it routed,
/// as Dynamo's ActiveSequences are.
struct DynamoPolicyOptions {
  double overlap_score_weight = 1.0;  // --router-kv-overlap-score-weight
  uint64_t seed = 1;                  // the tie draws
};
std::unique_ptr<RoutingPolicy> MakeDynamoPolicy(const FleetOptions& fleet,
                                                DynamoPolicyOptions options);

/// llm-d's scheduler with its precise prefix-cache scorer
/// (llm-d-kv-cache: kvblock_scorer.go LongestPrefix) beside the queue and
/// KV-cache-utilization scorers, weighted 3 / 2 / 2 as llm-d's precise
/// configuration (benchmarking/73-capacity), the highest total wins (the
/// max-score picker; ties drawn at random). Prefix: the leading blocks the
/// worker holds over the request's blocks (GPU weight 1.0); queue: 1 for
/// the shortest waiting queue, 0 for the longest, linear between; KV: 1 -
/// the pool's used fraction.
struct LlmdPolicyOptions {
  double prefix_weight = 3;
  double queue_weight = 2;
  double kv_cache_weight = 2;
  uint64_t seed = 1;
};
std::unique_ptr<RoutingPolicy> MakeLlmdPolicy(const FleetOptions& fleet, LlmdPolicyOptions options);

/// The SGLang router's cache-aware policy (sgl-router
/// src/policies/cache_aware.rs, with the Python launcher's defaults): an
/// approximate tree of what it routed, no engine events. When the load
/// (requests routed and not done) is imbalanced, max - min >
/// balance_abs_threshold and max > balance_rel_threshold x min, the
/// request goes to the least loaded worker; otherwise to the worker whose
/// tree matches the most of the prompt when that match exceeds
/// cache_threshold of it, else to the worker with the smallest tree. The
/// tree is updated either way. It is kept at the fleet's block size here,
/// not per character.
struct SglangPolicyOptions {
  double cache_threshold = 0.3;
  uint64_t balance_abs_threshold = 64;
  double balance_rel_threshold = 1.5;
};
std::unique_ptr<RoutingPolicy> MakeSglangPolicy(const FleetOptions& fleet,
                                                SglangPolicyOptions options);

/// Consistent hashing of the prompt's first blocks onto a ring of virtual
/// nodes (production-stack's prefix-aware and session routing): one prefix
/// always lands on one worker, whatever the load.
struct PrefixHashPolicyOptions {
  int prefix_blocks = 4;    // hashed: the first 4 blocks (64 tokens at 16)
  int virtual_nodes = 160;  // per worker on the ring
};
std::unique_ptr<RoutingPolicy> MakePrefixHashPolicy(const FleetOptions& fleet,
                                                    PrefixHashPolicyOptions options);

}  // namespace kvgov::sim
