#include "kvgov/codec/route_api.h"

#include "codec/json_fields.h"
#include "codec/router_json.h"
#include "kvgov/core/engine_events.h"

namespace kvgov::codec_internal {

template <>
struct Schema<router::RouteRequest> {
  static void Fields(auto& v, auto& r) {
    v.Required("model", r.model);
    v.Expect("model", !r.model.empty(), [] { return std::string("required, got empty"); });
    v.Optional("tenant", r.tenant);
    v.Required("token_ids", r.token_ids);
    v.Validate([&] { return CheckTokenIds(r.token_ids); });
    v.Optional("lora_name", r.lora_name);
    v.Optional("workers", r.workers);
  }
};

template <>
struct Schema<ExplainRequest> {
  static void Fields(auto& v, auto& r) {
    v.Required("model", r.route.model);
    v.Expect("model", !r.route.model.empty(), [] { return std::string("required, got empty"); });
    v.Optional("tenant", r.route.tenant);
    v.Optional("token_ids", r.route.token_ids);
    v.Optional("prompt", r.prompt);
    v.Validate([&] {
      if (r.route.token_ids.empty() == r.prompt.empty()) {
        return Status::InvalidArgument("token_ids: give exactly one of token_ids and prompt");
      }
      return CheckTokenIds(r.route.token_ids);
    });
    v.Optional("lora_name", r.route.lora_name);
    v.Optional("workers", r.route.workers);
  }
};

nlohmann::json LoadJson(const router::WorkerLoad& load) {
  nlohmann::json json = {{"in_flight_requests", load.in_flight_requests},
                         {"decoding_requests", load.decoding_requests},
                         {"in_flight_blocks", load.in_flight_blocks},
                         {"peer_in_flight_blocks", load.peer_blocks},
                         {"blocks", load.blocks}};
  if (load.scraped) {
    json["scraped"] = {{"running", load.scraped->running},
                       {"waiting", load.scraped->waiting},
                       {"kv_usage", load.scraped->kv_usage},
                       {"scraped_at_ms", load.scraped->scraped_at_ms}};
  }
  return json;
}

namespace {

nlohmann::json DecisionJson(const router::RouteDecision& decision) {
  nlohmann::json candidates = nlohmann::json::array();
  for (const router::Candidate& c : decision.candidates) {
    nlohmann::json row = {{"worker", c.worker},
                          {"resident_blocks", c.resident_blocks},
                          {"overlap_blocks", c.overlap_blocks},
                          {"tier_overlap", TierJson(c.tier_overlap)},
                          {"credited_blocks", c.credited_blocks},
                          {"load", LoadJson(c.load)},
                          {"cost", c.cost},
                          {"eligible", c.eligible}};
    if (!c.reason.empty()) row["reason"] = c.reason;
    candidates.push_back(std::move(row));
  }
  return {{"decision_id", decision.decision_id},
          {"worker", decision.worker},
          {"cache_salt", decision.cache_salt},
          {"prompt_blocks", decision.prompt_blocks},
          {"overlap_blocks", decision.overlap_blocks},
          {"verdict",
           {{"kind", ToString(decision.verdict.kind)},
            {"reason", ToString(decision.verdict.reason)}}},
          {"candidates", std::move(candidates)}};
}

}  // namespace
}  // namespace kvgov::codec_internal

namespace kvgov {

std::string EncodeRouteDecisionJson(const router::RouteDecision& decision) {
  return codec_internal::Dump(codec_internal::DecisionJson(decision));
}

std::string EncodeUnroutableDecisionJson(const router::RouteDecision& decision) {
  nlohmann::json body = codec_internal::DecisionJson(decision);
  body["error"] = {{"code", "unavailable"},
                   {"message", "no eligible worker; each candidate says why"}};
  return codec_internal::Dump(body);
}

Result<router::RouteRequest> DecodeRouteRequestJson(std::string_view text,
                                                    const JsonLimits& limits) {
  return codec_internal::DecodeDocument<router::RouteRequest>(text, limits, "route codec");
}

Result<ExplainRequest> DecodeExplainRequestJson(std::string_view text, const JsonLimits& limits) {
  return codec_internal::DecodeDocument<ExplainRequest>(text, limits, "route codec");
}

}  // namespace kvgov
