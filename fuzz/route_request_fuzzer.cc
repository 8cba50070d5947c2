// DecodeRouteRequestJson: the body of POST /v1/route. Checked, beyond no
// crash, leak or exception: only the documented error codes, each message
// led by its path; a decoded request has a model and only UTF-8 strings;
// decoding is a function of the values alone (the request written back
// out as plain JSON decodes to the same request); small limits only ever
// refuse; and the one-pass decoder (src/codec/route_request_fast.h) never
// accepts what the schema path refuses, or decodes it differently.
// The same bytes also go to DecodeRouteDoneJson (the body of POST
// /v1/route/{id}/done): a decoded usage has counts in range and no more
// cached tokens than prompt tokens.

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
  const std::optional<router::RouteRequest> fast =
      codec_internal::DecodeRouteRequestFast(text, limits);
  if (!fast.has_value()) return;
  const Result<router::RouteRequest> schema =
      codec_internal::DecodeRouteRequestBySchema(text, limits);
  FUZZ_CHECK(schema.ok(), "the one pass took a body the schema path refuses: %s",
             Describe(schema.status()).c_str());
  FUZZ_CHECK(SameRequest(*fast, *schema), "the one pass and the schema path decoded differently");
}

bool SameDone(const RouteDoneReport& a, const RouteDoneReport& b) {
  if (a.usage.has_value() != b.usage.has_value()) return false;
  return !a.usage.has_value() || (a.usage->prompt_tokens == b.usage->prompt_tokens &&
                                  a.usage->cached_tokens == b.usage->cached_tokens);
}

void CheckDone(const RouteDoneReport& report) {
  if (!report.usage.has_value()) return;
  const EngineUsage& usage = *report.usage;
  FUZZ_CHECK(usage.prompt_tokens >= 0 && usage.prompt_tokens <= (int64_t{1} << 31) - 1,
             "prompt_tokens out of range: %lld", static_cast<long long>(usage.prompt_tokens));
  FUZZ_CHECK(usage.cached_tokens >= 0 && usage.cached_tokens <= usage.prompt_tokens,
             "cached_tokens %lld with prompt_tokens %lld",
             static_cast<long long>(usage.cached_tokens),
             static_cast<long long>(usage.prompt_tokens));
}

}  // namespace
}  // namespace kvgov::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgov;
  using namespace kvgov::fuzz;
  const std::string_view text = AsText(data, size);
  const JsonLimits defaults;
  const JsonLimits small = SmallJsonLimits();
  // A decoded value passes `check_ok`; a refusal is one of the documented ones.
  const auto check = [&](const auto& result, const JsonLimits& limits, auto check_ok) {
    if (result.ok()) {
      check_ok(*result);
    } else {
      CheckJsonFailure(result.status(), text, limits);
    }
  };
  const Result<router::RouteRequest> full = DecodeRouteRequestJson(text, defaults);
  const Result<router::RouteRequest> bounded = DecodeRouteRequestJson(text, small);
  check(full, defaults, CheckRequest);
  check(bounded, small, CheckRequest);
  CheckOnePass(text, defaults);
  CheckOnePass(text, small);
  CheckLimitsAgree(full, bounded, SameRequest);

  const Result<RouteDoneReport> done = DecodeRouteDoneJson(text, defaults);
  const Result<RouteDoneReport> done_bounded = DecodeRouteDoneJson(text, small);
  check(done, defaults, CheckDone);
  check(done_bounded, small, CheckDone);
  CheckLimitsAgree(done, done_bounded, SameDone);
  return 0;
}
