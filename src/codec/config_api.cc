#include "kvgov/codec/config_api.h"

#include <nlohmann/json.hpp>

#include "codec/json_fields.h"
#include "codec/router_json.h"

namespace kvgov {

std::string EncodeConfigJson(const ConfigView& config) {
  using Json = nlohmann::json;
  Json engines = Json::array();
  for (const ingest::EngineSpec& engine : config.engines) {
    engines.push_back({{"id", engine.id},
                       {"kind", ToString(engine.kind)},
                       {"events", engine.events},
                       {"replay", engine.replay},
                       {"model", engine.model},
                       {"block_size", engine.block_size},
                       {"pool_blocks", engine.pool_blocks},
                       {"dp_ranks", engine.dp_ranks},
                       {"control", engine.control}});
  }
  Json replica = nullptr;
  if (config.replica) {
    const ReplicaConfigView& r = *config.replica;
    replica = {{"id", r.id},
               {"redis", r.redis},
               {"prefix", r.prefix},
               {"claim_ttl_ms", r.claim_ttl_ms},
               {"log_retain_ms", r.log_retain_ms},
               {"snapshot_interval_ms", r.snapshot_interval_ms},
               {"log_connected", r.log_connected},
               {"housekeeper", r.housekeeper},
               {"applied_id", r.applied_id}};
  }
  const router::RouteWeights& w = config.weights;
  return codec_internal::Dump({{"route",
                                {{"overlap_weight", w.overlap_weight},
                                 {"tier_credit", codec_internal::TierJson(w.tier_credit)},
                                 {"unrouted_request_blocks", w.unrouted_request_blocks},
                                 {"cache_pressure_weight", w.cache_pressure_weight},
                                 {"pull_weight", w.pull_weight},
                                 {"decode_load_weight", w.decode_load_weight},
                                 {"busy_load_blocks", w.busy_load_blocks},
                                 {"temperature", w.temperature},
                                 {"seed", w.seed},
                                 {"decision_ttl_ms", w.decision_ttl_ms}}},
                               {"probe_interval_ms", config.probe_interval_ms},
                               {"max_body_bytes", config.max_body_bytes},
                               {"spool_dir", config.spool_dir},
                               {"replica", std::move(replica)},
                               {"engines", std::move(engines)}});
}

}  // namespace kvgov
