#include "kvgov/codec/route_api.h"

#include "codec/json_fields.h"
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

}  // namespace kvgov::codec_internal

namespace kvgov {

Result<router::RouteRequest> DecodeRouteRequestJson(std::string_view text,
                                                    const JsonLimits& limits) {
  return codec_internal::DecodeDocument<router::RouteRequest>(text, limits, "route codec");
}

}  // namespace kvgov
