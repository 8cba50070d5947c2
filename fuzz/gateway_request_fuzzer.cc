// The gateway's untrusted bytes: DecodeGatewayRequestJson (a client's
// OpenAI body, both endpoints), ForwardedBody, DecodeTokenizeAnswerJson,
// DecodeDetokenizeAnswerJson and DecodeEngineUsage (an engine's answers), SseSplitter (an engine's
// stream). Checked, beyond no crash, leak or exception: only the documented
// error codes, each message led by its path; a decoded request has a model,
// token ids in range or a tokenize body that is a JSON object naming the
// same model; the forwarded body is the client's JSON with exactly the
// inserted members added; small limits only ever refuse; the splitter loses
// and invents no byte. And differentially: the simdjson decoder and the
// nlohmann one it replaced (ADR 0016, kept as the oracle) accept the same
// bodies and decode them alike, except that simdjson refuses an integer
// past 64 bits that nlohmann read as a double. (Which error a body with
// two faults gets may differ: nlohmann stops at the first fault while
// parsing, simdjson parses the whole body first.)

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "codec/gateway_request_oracle.h"
#include "json_check.h"
#include "kvgov/codec/gateway_api.h"
#include "kvgov/core/engine_events.h"

namespace kvgov::fuzz {
namespace {

bool SameRequest(const GatewayRequest& a, const GatewayRequest& b) {
  return a.model == b.model && a.stream == b.stream && a.ask_usage == b.ask_usage &&
         a.token_ids == b.token_ids && a.tokenize_body == b.tokenize_body;
}

void CheckAgainstOracle(GatewayEndpoint endpoint, std::string_view text,
                        const Result<GatewayRequest>& decoded, const JsonLimits& limits) {
  const Result<GatewayRequest> oracle =
      codec_testing::DecodeGatewayRequestWithNlohmann(endpoint, text, limits);
  if (decoded.ok() && oracle.ok()) {
    FUZZ_CHECK(codec_testing::SameDecodedRequest(*decoded, *oracle), "decoded unlike the oracle");
    return;
  }
  if (decoded.ok() == oracle.ok()) return;
  const bool wide_integer =
      !decoded.ok() && decoded.status().message().find("64 bits") != std::string::npos;
  FUZZ_CHECK(wide_integer, "simdjson %s, the oracle %s",
             decoded.ok() ? "accepted" : Describe(decoded.status()).c_str(),
             oracle.ok() ? "accepted" : Describe(oracle.status()).c_str());
}

void CheckRequest(const GatewayRequest& request, std::string_view text) {
  FUZZ_CHECK(!request.model.empty(), "decoded a request without a model");
  CheckUtf8(request.model, "model");
  FUZZ_CHECK(request.token_ids.empty() != request.tokenize_body.empty(),
             "want token ids or a tokenize body, exactly one");
  FUZZ_CHECK(CheckTokenIds(request.token_ids).ok(), "a token id out of range");
  FUZZ_CHECK(!request.ask_usage || request.stream, "usage asked for a request that is no stream");
  if (!request.tokenize_body.empty()) {
    const nlohmann::json tokenize =
        nlohmann::json::parse(request.tokenize_body, nullptr, /*allow_exceptions=*/false);
    FUZZ_CHECK(tokenize.is_object() && tokenize.value("model", "") == request.model,
               "the tokenize body does not name the model: %s", request.tokenize_body.c_str());
  }
  // The forwarded body is the client's, plus the inserted members.
  const std::string forwarded = ForwardedBody(text, "0123456789abcdef", request.ask_usage);
  nlohmann::json sent = nlohmann::json::parse(text, nullptr, false);
  nlohmann::json got = nlohmann::json::parse(forwarded, nullptr, false);
  FUZZ_CHECK(got.is_object(), "the forwarded body is not a JSON object");
  FUZZ_CHECK(got.value("cache_salt", "") == "0123456789abcdef", "the salt is missing");
  got.erase("cache_salt");
  if (request.ask_usage) {
    FUZZ_CHECK(got["stream_options"] == nlohmann::json({{"include_usage", true}}),
               "include_usage is missing");
    got.erase("stream_options");
  }
  FUZZ_CHECK(got == sent, "the forwarded body changed more than the inserted members");
}

void CheckSplitter(std::string_view text) {
  SseSplitter splitter;
  std::string joined;
  // Fed in uneven pieces, as reads arrive.
  for (size_t at = 0, piece = 1; at < text.size(); at += piece, piece = piece * 2 % 61 + 1) {
    for (const std::string& event : splitter.Push(text.substr(at, piece))) {
      FUZZ_CHECK(event.ends_with("\n\n"), "an event without its blank line");
      (void)SseSplitter::Data(event);
      joined += event;
    }
  }
  joined += splitter.Rest();
  FUZZ_CHECK(joined == text, "the splitter changed the stream");
}

}  // namespace
}  // namespace kvgov::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgov;
  using namespace kvgov::fuzz;
  const std::string_view text = AsText(data, size);
  const JsonLimits defaults;
  const JsonLimits small = SmallJsonLimits();
  for (GatewayEndpoint endpoint :
       {GatewayEndpoint::kCompletions, GatewayEndpoint::kChatCompletions}) {
    const Result<GatewayRequest> full = DecodeGatewayRequestJson(endpoint, text, defaults);
    const Result<GatewayRequest> bounded = DecodeGatewayRequestJson(endpoint, text, small);
    if (full.ok()) {
      CheckRequest(*full, text);
    } else {
      CheckJsonFailure(full.status(), text, defaults);
    }
    if (!bounded.ok()) CheckJsonFailure(bounded.status(), text, small);
    CheckLimitsAgree(full, bounded, SameRequest);
    CheckAgainstOracle(endpoint, text, full, defaults);
    CheckAgainstOracle(endpoint, text, bounded, small);
  }
  const Result<std::vector<int64_t>> tokens = DecodeTokenizeAnswerJson(text, defaults);
  if (tokens.ok()) FUZZ_CHECK(CheckTokenIds(*tokens).ok(), "a tokenized id out of range");
  (void)DecodeEngineUsage(text, small);
  if (const Result<std::string> detokenized = DecodeDetokenizeAnswerJson(text, defaults);
      !detokenized.ok()) {
    FUZZ_CHECK(CodeIsOneOf(detokenized.status(), StatusCode::kInvalidArgument,
                           StatusCode::kResourceExhausted),
               "detokenize answer: %s", Describe(detokenized.status()).c_str());
  }
  CheckSplitter(text);
  return 0;
}
