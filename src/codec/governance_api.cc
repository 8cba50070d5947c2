#include "kvgov/codec/governance_api.h"

#include "codec/json_fields.h"
#include "kvgov/core/engine_events.h"

namespace kvgov::codec_internal {

// A chat message array, read into the string it is kept as: the minified
// JSON text, "" for an empty array (the default, as `"token_ids": []` is).
// Each message must be an object; its fields are the chat template's
// business, judged by the engine.
struct ChatMessagesText {
  std::string* text;
};

template <>
Status FromJson<ChatMessagesText>(const Json& json, const std::string& path,
                                  ChatMessagesText& out) {
  if (!json.is_array()) {
    return PathError(path, std::string("want an array of chat messages, got ") + json.type_name());
  }
  for (std::size_t i = 0; i < json.size(); ++i) {
    KVGOV_RETURN_IF_ERROR(ExpectObject(json[i], IndexPath(path, i)));
  }
  *out.text = json.empty() ? std::string() : Dump(json);
  return Status::Ok();
}

// The fields that name a span, alike in a quarantine and an invalidation.
// `model_required` is off only for a tenant revocation, which may take
// every model.
void SpanFields(auto& v, auto& q, bool model_required = true) {
  if (model_required) {
    v.Required("model", q.model);
  } else {
    v.Optional("model", q.model);
  }
  v.Optional("tenant", q.tenant);
  v.Optional("lora_name", q.lora_name);
  v.Optional("token_ids", q.token_ids);
  v.Validate([&] { return CheckTokenIds(q.token_ids); });
  v.Optional("prompt", q.prompt);
  ChatMessagesText messages{&q.messages};
  v.Optional("messages", messages);
  v.Optional("worker", q.worker);
  v.Optional("block_hash", q.block_hash);
  v.Optional("group_idx", q.group_idx);
}

// prompt and messages stand in for token_ids: one of the three at most.
void TextSpanRules(auto& v, const auto& q) {
  v.Expect("prompt", q.prompt.empty() || q.token_ids.empty(), [] {
    return std::string("not with token_ids (give one of token_ids, prompt or messages)");
  });
  v.Expect("messages", q.messages.empty() || (q.token_ids.empty() && q.prompt.empty()), [] {
    return std::string("not with token_ids or prompt (give one of token_ids, prompt or messages)");
  });
}

// Whether the span is named by tokens, in any of the three forms.
bool ByTokens(const auto& q) {
  return !q.token_ids.empty() || !q.prompt.empty() || !q.messages.empty();
}

// The field an exactly-one error names: the token form the client gave,
// or token_ids when it gave none.
std::string_view TokenField(const auto& q) {
  if (!q.prompt.empty()) return "prompt";
  if (!q.messages.empty()) return "messages";
  return "token_ids";
}

template <>
struct Schema<QuarantineRequest> {
  static void Fields(auto& v, auto& q) {
    SpanFields(v, q);
    v.Required("reason", q.reason);
    v.Optional("invalidate", q.invalidate);
    v.Expect("reason", !q.reason.empty(), [] { return std::string("required, got empty"); });
    TextSpanRules(v, q);
    const bool by_tokens = ByTokens(q);
    const bool by_hash = q.block_hash.has_value();
    v.Expect(TokenField(q), by_tokens != by_hash, [] {
      return std::string(
          "give token_ids, prompt or messages, or worker and block_hash (exactly one)");
    });
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
    // The scope first: it decides whether model is required.
    v.Optional("scope", q.scope);
    const bool revocation = q.scope == "tenant";
    SpanFields(v, q, /*model_required=*/!revocation);
    v.Required("reason", q.reason);
    v.Optional("flush", q.flush);
    v.Expect("reason", !q.reason.empty(), [] { return std::string("required, got empty"); });
    v.Expect(
        "scope", q.scope.empty() || q.scope == "worker" || q.scope == "model" || revocation, [&] {
          return "want \"worker\", \"model\" or \"tenant\", got '" + q.scope.substr(0, 32) + "'";
        });
    if (revocation) {
      // A revocation takes every block of the tenant's salts so far: a span
      // or a worker narrowing it would be a different directive. Judged by
      // value, so the defaults ("", 0) pass.
      const auto not_with_tenant = [] {
        return std::string("not with scope tenant (a revocation takes every block of the tenant)");
      };
      v.Expect("tenant", !q.tenant.empty(),
               [] { return std::string("required with scope tenant"); });
      v.Expect("token_ids", q.token_ids.empty(), not_with_tenant);
      v.Expect("prompt", q.prompt.empty(), not_with_tenant);
      v.Expect("messages", q.messages.empty(), not_with_tenant);
      v.Expect("worker", q.worker.empty(), not_with_tenant);
      v.Expect("block_hash", !q.block_hash.has_value(), not_with_tenant);
      v.Expect("lora_name", q.lora_name.empty(), not_with_tenant);
      v.Expect("group_idx", q.group_idx == 0, not_with_tenant);
    }
    v.Expect("flush", !q.flush || revocation, [] { return std::string("only with scope tenant"); });
    TextSpanRules(v, q);
    const int named =
        (ByTokens(q) ? 1 : 0) + (q.block_hash.has_value() ? 1 : 0) + (q.scope.empty() ? 0 : 1);
    v.Expect(TokenField(q), named == 1, [] {
      return std::string(
          "give exactly one of token_ids, prompt, messages, worker + block_hash, or scope "
          "(worker, model or tenant)");
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
