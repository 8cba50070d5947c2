#include "kvgov/codec/governance_api.h"

#include "codec/json_fields.h"

namespace kvgov::codec_internal {

template <>
struct Schema<QuarantineRequest> {
  static void Fields(auto& v, auto& q) {
    v.Required("model", q.model);
    v.Optional("tenant", q.tenant);
    v.Optional("lora_name", q.lora_name);
    v.Optional("token_ids", q.token_ids);
    v.Optional("worker", q.worker);
    v.Optional("block_hash", q.block_hash);
    v.Optional("group_idx", q.group_idx);
    v.Required("reason", q.reason);
    v.Optional("invalidate", q.invalidate);
    v.Expect("reason", !q.reason.empty(), [] { return std::string("required, got empty"); });
    const bool by_tokens = !q.token_ids.empty();
    const bool by_hash = q.block_hash.has_value();
    v.Expect("token_ids", by_tokens != by_hash,
             [] { return std::string("give token_ids, or worker and block_hash (exactly one)"); });
    v.Expect("worker", !by_hash || !q.worker.empty(),
             [] { return std::string("required with block_hash"); });
  }
};

}  // namespace kvgov::codec_internal

namespace kvgov {

Result<QuarantineRequest> DecodeQuarantineRequestJson(std::string_view text,
                                                      const JsonLimits& limits) {
  using namespace codec_internal;
  try {
    KVGOV_ASSIGN_OR_RETURN(const Json doc, ParseJson(text, limits));
    QuarantineRequest request;
    KVGOV_RETURN_IF_ERROR(FromJson(doc, "$", request));
    return request;
  } catch (const Json::exception& e) {
    return Status::Internal(std::string("governance codec: ") + e.what());
  }
}

}  // namespace kvgov
