#include "kvgov/codec/governance_api.h"

#include "codec/json_fields.h"
#include "kvgov/core/engine_events.h"

namespace kvgov::codec_internal {

// The fields that name a span, alike in a quarantine and an invalidation.
void SpanFields(auto& v, auto& q) {
  v.Required("model", q.model);
  v.Optional("tenant", q.tenant);
  v.Optional("lora_name", q.lora_name);
  v.Optional("token_ids", q.token_ids);
  v.Validate([&] { return CheckTokenIds(q.token_ids); });
  v.Optional("worker", q.worker);
  v.Optional("block_hash", q.block_hash);
  v.Optional("group_idx", q.group_idx);
}

template <>
struct Schema<QuarantineRequest> {
  static void Fields(auto& v, auto& q) {
    SpanFields(v, q);
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

template <>
struct Schema<QuarantineLiftRequest> {
  static void Fields(auto& v, auto& q) {
    v.Required("reason", q.reason);
    v.Expect("reason", !q.reason.empty(), [] { return std::string("required, got empty"); });
  }
};

template <>
struct Schema<InvalidationRequest> {
  static void Fields(auto& v, auto& q) {
    SpanFields(v, q);
    v.Optional("scope", q.scope);
    v.Required("reason", q.reason);
    v.Expect("reason", !q.reason.empty(), [] { return std::string("required, got empty"); });
    v.Expect("scope", q.scope.empty() || q.scope == "worker" || q.scope == "model", [&] {
      return "want \"worker\" or \"model\" (a tenant's blocks cannot be told apart without "
             "their prompts: name the span), got '" +
             q.scope.substr(0, 32) + "'";
    });
    const int named = (q.token_ids.empty() ? 0 : 1) + (q.block_hash.has_value() ? 1 : 0) +
                      (q.scope.empty() ? 0 : 1);
    v.Expect("token_ids", named == 1, [] {
      return std::string("give exactly one of token_ids, worker + block_hash, or scope");
    });
    v.Expect("worker", (!q.block_hash.has_value() && q.scope != "worker") || !q.worker.empty(),
             [] { return std::string("required with block_hash or scope worker"); });
  }
};

}  // namespace kvgov::codec_internal

namespace kvgov {

Result<QuarantineRequest> DecodeQuarantineRequestJson(std::string_view text,
                                                      const JsonLimits& limits) {
  return codec_internal::DecodeDocument<QuarantineRequest>(text, limits, "governance codec");
}

Result<QuarantineLiftRequest> DecodeQuarantineLiftRequestJson(std::string_view text,
                                                              const JsonLimits& limits) {
  return codec_internal::DecodeDocument<QuarantineLiftRequest>(text, limits, "governance codec");
}

Result<InvalidationRequest> DecodeInvalidationRequestJson(std::string_view text,
                                                          const JsonLimits& limits) {
  return codec_internal::DecodeDocument<InvalidationRequest>(text, limits, "governance codec");
}

}  // namespace kvgov
