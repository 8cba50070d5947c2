// DecodeRouteRequestJson: the body of POST /v1/route. Checked, beyond no
// crash, leak or exception: only the documented error codes, each message
// led by its path; a decoded request has a model and only UTF-8 strings;
// decoding is a function of the values alone (the request written back
// out as plain JSON decodes to the same request); small limits only ever
// refuse; and the one-pass decoder (src/codec/route_request_fast.h) never
// accepts what the schema path refuses, or decodes it differently.

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "json_check.h"
#include "codec/route_request_fast.h"
#include "kvgov/codec/route_api.h"

namespace kvgov::fuzz {
namespace {

bool SameRequest(const router::RouteRequest& a, const router::RouteRequest& b) {
  return a.model == b.model && a.tenant == b.tenant && a.token_ids == b.token_ids &&
         a.lora_name == b.lora_name && a.workers == b.workers;
}

// Every field, written by a JSON library that is not kvgov's codec.
std::string Rewrite(const router::RouteRequest& request) {
  return nlohmann::json{{"model", request.model},
                        {"tenant", request.tenant},
                        {"token_ids", request.token_ids},
                        {"lora_name", request.lora_name},
                        {"workers", request.workers}}
      .dump();
}

void CheckRequest(const router::RouteRequest& request) {
  FUZZ_CHECK(!request.model.empty(), "decoded a request without a model");
  CheckUtf8(request.model, "model");
  CheckUtf8(request.tenant, "tenant");
  CheckUtf8(request.lora_name, "lora_name");
  CheckUtf8(request.workers, "workers");
  const std::string rewritten = Rewrite(request);
  const Result<router::RouteRequest> again = DecodeRouteRequestJson(rewritten, JsonLimits{});
  FUZZ_CHECK(again.ok(), "the rewritten request is refused: %s\n  %s",
             Describe(again.status()).c_str(), rewritten.c_str());
  FUZZ_CHECK(SameRequest(*again, request), "the rewritten request decodes differently\n  %s",
             rewritten.c_str());
}

// Whatever the one pass returns, the schema path returns too.
void CheckOnePass(std::string_view text, const JsonLimits& limits) {
  const std::optional<router::RouteRequest> fast = codec_internal::DecodeRouteRequestFast(text, limits);
  if (!fast.has_value()) return;
  const Result<router::RouteRequest> schema =
      codec_internal::DecodeRouteRequestBySchema(text, limits);
  FUZZ_CHECK(schema.ok(), "the one pass took a body the schema path refuses: %s",
             Describe(schema.status()).c_str());
  FUZZ_CHECK(SameRequest(*fast, *schema), "the one pass and the schema path decoded differently");
}

}  // namespace
}  // namespace kvgov::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgov;
  using namespace kvgov::fuzz;
  const std::string_view text = AsText(data, size);
  const JsonLimits defaults;
  const JsonLimits small = SmallJsonLimits();
  const Result<router::RouteRequest> full = DecodeRouteRequestJson(text, defaults);
  const Result<router::RouteRequest> bounded = DecodeRouteRequestJson(text, small);
  const auto check = [&](const Result<router::RouteRequest>& result, const JsonLimits& limits) {
    if (result.ok()) {
      CheckRequest(*result);
    } else {
      CheckJsonFailure(result.status(), text, limits);
    }
  };
  check(full, defaults);
  check(bounded, small);
  CheckOnePass(text, defaults);
  CheckOnePass(text, small);
  CheckLimitsAgree(full, bounded, SameRequest);
  return 0;
}
