// DecodeQuarantineRequestJson and DecodeInvalidationRequestJson: the bodies
// of POST /v1/quarantine and POST /v1/invalidations, both run on every
// input (their schemas overlap, so one corpus serves both). Checked, beyond
// no crash, leak or exception: only the documented error codes, each
// message led by its path; every decoded request keeps the rules of
// docs/formats/governance-api.md (a reason; exactly one way of naming the
// span, prompt and messages standing in for token_ids, messages kept as
// the minified text of a non-empty array of objects; a worker wherever a
// block hash or a worker scope needs one; a tenant revocation, scope
// "tenant", names its tenant and nothing narrower, and only it may flush
// or leave out the model); decoding is a function of the values alone (the
// request written back out as plain JSON decodes to the same request);
// small limits only ever refuse.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "json_check.h"
#include "kvgov/codec/governance_api.h"

namespace kvgov::fuzz {
namespace {

// The messages as kept: "" (none, the default) or the minified text of a
// non-empty array of objects. Their JSON (an empty array for "").
template <typename Request>
nlohmann::json CheckedMessages(const Request& request) {
  if (request.messages.empty()) return nlohmann::json::array();
  const nlohmann::json messages = nlohmann::json::parse(request.messages, nullptr, false);
  FUZZ_CHECK(!messages.is_discarded(), "messages kept as text that is not JSON: %s",
             request.messages.c_str());
  FUZZ_CHECK(messages.is_array() && !messages.empty(),
             "messages kept as something other than a non-empty array: %s",
             request.messages.c_str());
  for (const nlohmann::json& message : messages) {
    FUZZ_CHECK(message.is_object(), "a message that is not an object: %s",
               request.messages.c_str());
  }
  return messages;
}

// Every field, written by a JSON library that is not kvgov's codec; an
// absent block hash stays absent, and absent messages are written as the
// default, [].
template <typename Request>
nlohmann::json CommonFields(const Request& request) {
  nlohmann::json json{{"model", request.model},         {"tenant", request.tenant},
                      {"lora_name", request.lora_name}, {"token_ids", request.token_ids},
                      {"prompt", request.prompt},       {"messages", CheckedMessages(request)},
                      {"worker", request.worker},       {"group_idx", request.group_idx},
                      {"reason", request.reason}};
  if (request.block_hash.has_value()) json["block_hash"] = *request.block_hash;
  return json;
}

// How many of token_ids, prompt and messages are given: at most one may be.
template <typename Request>
int TokenForms(const Request& request) {
  return (request.token_ids.empty() ? 0 : 1) + (request.prompt.empty() ? 0 : 1) +
         (request.messages.empty() ? 0 : 1);
}

template <typename Request>
bool SameCommon(const Request& a, const Request& b) {
  return a.model == b.model && a.tenant == b.tenant && a.lora_name == b.lora_name &&
         a.token_ids == b.token_ids && a.prompt == b.prompt && a.messages == b.messages &&
         a.worker == b.worker && a.block_hash == b.block_hash && a.group_idx == b.group_idx &&
         a.reason == b.reason;
}

template <typename Request>
void CheckCommonStrings(const Request& request) {
  CheckUtf8(request.model, "model");
  CheckUtf8(request.tenant, "tenant");
  CheckUtf8(request.lora_name, "lora_name");
  CheckUtf8(request.prompt, "prompt");
  CheckUtf8(request.messages, "messages");
  CheckUtf8(request.worker, "worker");
  CheckUtf8(request.reason, "reason");
}

bool SameQuarantine(const QuarantineRequest& a, const QuarantineRequest& b) {
  return SameCommon(a, b) && a.invalidate == b.invalidate;
}

bool SameInvalidation(const InvalidationRequest& a, const InvalidationRequest& b) {
  return SameCommon(a, b) && a.scope == b.scope && a.flush == b.flush;
}

template <typename Request, typename Decode, typename Same>
void CheckRewrite(const Request& request, const nlohmann::json& json, Decode decode, Same same) {
  const std::string rewritten = json.dump();
  const Result<Request> again = decode(rewritten, JsonLimits{});
  FUZZ_CHECK(again.ok(), "the rewritten request is refused: %s\n  %s",
             Describe(again.status()).c_str(), rewritten.c_str());
  FUZZ_CHECK(same(*again, request), "the rewritten request decodes differently\n  %s",
             rewritten.c_str());
}

void CheckQuarantine(const QuarantineRequest& request) {
  CheckCommonStrings(request);
  FUZZ_CHECK(!request.reason.empty(), "quarantine without a reason");
  FUZZ_CHECK(TokenForms(request) <= 1, "quarantine names its tokens %d ways", TokenForms(request));
  FUZZ_CHECK((TokenForms(request) == 1) != request.block_hash.has_value(),
             "quarantine must name its span exactly one way");
  FUZZ_CHECK(!request.block_hash.has_value() || !request.worker.empty(),
             "quarantine of a block hash without its worker");
  nlohmann::json json = CommonFields(request);
  json["invalidate"] = request.invalidate;
  CheckRewrite(request, json, DecodeQuarantineRequestJson, SameQuarantine);
}

// model is required everywhere but in a tenant revocation, where leaving
// it out means every model, as "" does. So the rewrite without its model is
// refused by name, or, for a revocation, decodes to the same request with
// model "". A revocation written with only the fields it needs (flush and
// model only when set) decodes to itself too: the rest are defaults.
void CheckModelOptionalOnlyForARevocation(const InvalidationRequest& request, nlohmann::json json) {
  json.erase("model");
  const std::string without_model = json.dump();
  const Result<InvalidationRequest> again =
      DecodeInvalidationRequestJson(without_model, JsonLimits{});
  if (request.scope != "tenant") {
    FUZZ_CHECK(!again.ok() && again.status().code() == StatusCode::kInvalidArgument &&
                   again.status().message().starts_with("$.model:"),
               "an invalidation of scope '%s' without a model: %s\n  %s", request.scope.c_str(),
               again.ok() ? "accepted" : Describe(again.status()).c_str(), without_model.c_str());
    return;
  }
  InvalidationRequest every_model = request;
  every_model.model.clear();
  FUZZ_CHECK(again.ok(), "a tenant revocation without a model is refused: %s\n  %s",
             Describe(again.status()).c_str(), without_model.c_str());
  FUZZ_CHECK(SameInvalidation(*again, every_model),
             "a tenant revocation without a model is not one of every model\n  %s",
             without_model.c_str());

  nlohmann::json minimal{
      {"scope", request.scope}, {"tenant", request.tenant}, {"reason", request.reason}};
  if (!request.model.empty()) minimal["model"] = request.model;
  if (request.flush) minimal["flush"] = true;
  CheckRewrite(request, minimal, DecodeInvalidationRequestJson, SameInvalidation);
}

void CheckInvalidation(const InvalidationRequest& request) {
  CheckCommonStrings(request);
  CheckUtf8(request.scope, "scope");
  FUZZ_CHECK(!request.reason.empty(), "invalidation without a reason");
  const bool revocation = request.scope == "tenant";
  FUZZ_CHECK(
      request.scope.empty() || request.scope == "worker" || request.scope == "model" || revocation,
      "invalidation scope '%s'", request.scope.c_str());
  FUZZ_CHECK(TokenForms(request) <= 1, "invalidation names its tokens %d ways",
             TokenForms(request));
  const int named = TokenForms(request) + (request.block_hash.has_value() ? 1 : 0) +
                    (request.scope.empty() ? 0 : 1);
  FUZZ_CHECK(named == 1, "invalidation names its span %d ways", named);
  FUZZ_CHECK(
      (!request.block_hash.has_value() && request.scope != "worker") || !request.worker.empty(),
      "invalidation of a worker's block or scope without the worker");
  FUZZ_CHECK(!request.flush || revocation, "flush with scope '%s'", request.scope.c_str());
  if (revocation) {
    // Every block of the tenant: nothing may narrow it. The rules judge
    // values, so these fields may be present, at their defaults.
    FUZZ_CHECK(!request.tenant.empty(), "a tenant revocation without a tenant");
    FUZZ_CHECK(request.token_ids.empty(), "a tenant revocation with token_ids");
    FUZZ_CHECK(request.prompt.empty(), "a tenant revocation with a prompt");
    FUZZ_CHECK(request.messages.empty(), "a tenant revocation with messages");
    FUZZ_CHECK(request.worker.empty(), "a tenant revocation of worker '%s'",
               request.worker.c_str());
    FUZZ_CHECK(!request.block_hash.has_value(), "a tenant revocation with a block_hash");
    FUZZ_CHECK(request.lora_name.empty(), "a tenant revocation of LoRA '%s'",
               request.lora_name.c_str());
    FUZZ_CHECK(request.group_idx == 0, "a tenant revocation of group %lld",
               static_cast<long long>(request.group_idx));
  }
  nlohmann::json json = CommonFields(request);
  json["scope"] = request.scope;
  json["flush"] = request.flush;
  CheckRewrite(request, json, DecodeInvalidationRequestJson, SameInvalidation);
  CheckModelOptionalOnlyForARevocation(request, std::move(json));
}

}  // namespace
}  // namespace kvgov::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgov;
  using namespace kvgov::fuzz;
  const std::string_view text = AsText(data, size);
  RunJsonDecoder<QuarantineRequest>(text, DecodeQuarantineRequestJson, CheckQuarantine,
                                    SameQuarantine);
  RunJsonDecoder<InvalidationRequest>(text, DecodeInvalidationRequestJson, CheckInvalidation,
                                      SameInvalidation);
  return 0;
}
