// The gateway's request-body decoder (simdjson since ADR 0016) against the
// bounded nlohmann decoder it replaced (kept as the tests' oracle), on the
// same bodies in the same run: a token-id completion of 512 and 8,192
// tokens, and a chat of 16 messages. The ratio is the old decoder's time
// over the new one's.
//   cmake --build build-bench --target kvgov_codec_bench
//   build-bench/src/codec/kvgov_codec_bench

#include <benchmark/benchmark.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codec/gateway_request_oracle.h"
#include "codec/decision_writer.h"
#include "codec/json_fields.h"
#include "codec/route_request_fast.h"
#include "codec/router_json.h"
#include "kvgov/codec/gateway_api.h"
#include "kvgov/codec/route_api.h"

namespace kvgov {
namespace {

using Clock = std::chrono::steady_clock;

// A completion of `tokens` token ids among the fields an SDK sends.
std::string CompletionBody(int64_t tokens) {
  std::vector<int64_t> prompt(static_cast<size_t>(tokens));
  for (size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = 1000 + static_cast<int64_t>(i * 7919 % 120000);
  return nlohmann::json{
      {"model", "llama"}, {"prompt", prompt},    {"max_tokens", 64},     {"temperature", 0.7},
      {"stream", true},   {"logprobs", nullptr}, {"user", "bench-user"}, {"n", 1}}
      .dump();
}

// A chat of 16 messages of about 60 words each, with a tool.
std::string ChatBody() {
  nlohmann::json messages = nlohmann::json::array();
  for (int m = 0; m < 16; ++m) {
    std::string content;
    for (int w = 0; w < 60; ++w) content += "word" + std::to_string(m * 60 + w) + " ";
    messages.push_back({{"role", m % 2 == 0 ? "user" : "assistant"}, {"content", content}});
  }
  return nlohmann::json{
      {"model", "llama"},
      {"messages", messages},
      {"tools",
       {{{"type", "function"},
         {"function", {{"name", "lookup"}, {"parameters", {{"type", "object"}}}}}}}},
      {"stream", true}}
      .dump();
}

using Decoder = Result<GatewayRequest> (*)(GatewayEndpoint, std::string_view, const JsonLimits&);

double DecodeMicros(Decoder decode, GatewayEndpoint endpoint, const std::string& body,
                    const JsonLimits& limits, bool* ok) {
  const auto started = Clock::now();
  Result<GatewayRequest> decoded = decode(endpoint, body, limits);
  const double micros = std::chrono::duration<double, std::micro>(Clock::now() - started).count();
  *ok = *ok && decoded.ok();
  benchmark::DoNotOptimize(decoded);
  return micros;
}

// Both decoders on `body`, alternating call by call; the iteration time is
// the new decoder's.
void DecodeSideBySide(benchmark::State& state, GatewayEndpoint endpoint, const std::string& body) {
  JsonLimits limits;
  limits.max_bytes = size_t{8} << 20;
  double simdjson_us = 0, nlohmann_us = 0;
  bool ok = true;
  for (auto _ : state) {
    const double fast = DecodeMicros(&DecodeGatewayRequestJson, endpoint, body, limits, &ok);
    nlohmann_us +=
        DecodeMicros(&codec_testing::DecodeGatewayRequestWithNlohmann, endpoint, body, limits, &ok);
    simdjson_us += fast;
    state.SetIterationTime(fast / 1e6);
  }
  if (!ok) {
    state.SkipWithError("a decoder refused the body");
    return;
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["body_bytes"] = static_cast<double>(body.size());
  state.counters["simdjson_us"] = simdjson_us / n;
  state.counters["nlohmann_us"] = nlohmann_us / n;
  state.counters["ratio_nlohmann_vs_simdjson"] = nlohmann_us / simdjson_us;
}

void BM_DecodeCompletion(benchmark::State& state) {
  DecodeSideBySide(state, GatewayEndpoint::kCompletions, CompletionBody(state.range(0)));
}
BENCHMARK(BM_DecodeCompletion)->Arg(512)->Arg(8192)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_DecodeChat(benchmark::State& state) {
  DecodeSideBySide(state, GatewayEndpoint::kChatCompletions, ChatBody());
}
BENCHMARK(BM_DecodeChat)->UseManualTime()->Unit(benchmark::kMicrosecond);

// POST /v1/route's 8k-token body three ways, call by call: the schema path
// (bounded nlohmann) on JSON numbers, DecodeRouteRequestJson (its one
// simdjson pass) on the same body, and on the compact body (token_ids_b64).
void BM_DecodeRoute8k(benchmark::State& state) {
  std::vector<int64_t> prompt(8192);
  for (size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = 1000 + static_cast<int64_t>(i * 7919 % 120000);
  const std::string numbers = nlohmann::json{{"model", "llama"}, {"token_ids", prompt}}.dump();
  const std::string compact =
      nlohmann::json{{"model", "llama"}, {"token_ids_b64", EncodeTokenIdsBase64(prompt)}}.dump();
  const JsonLimits limits;
  double schema_us = 0, one_pass_us = 0, compact_us = 0;
  bool ok = true;
  const auto time = [&](auto decode, const std::string& body) {
    const auto started = Clock::now();
    Result<router::RouteRequest> decoded = decode(body, limits);
    const double micros = std::chrono::duration<double, std::micro>(Clock::now() - started).count();
    ok = ok && decoded.ok() && decoded->token_ids == prompt;
    benchmark::DoNotOptimize(decoded);
    return micros;
  };
  for (auto _ : state) {
    schema_us += time(&codec_internal::DecodeRouteRequestBySchema, numbers);
    one_pass_us += time(&DecodeRouteRequestJson, numbers);
    const double fast = time(&DecodeRouteRequestJson, compact);
    compact_us += fast;
    state.SetIterationTime(fast / 1e6);
  }
  if (!ok) {
    state.SkipWithError("a decoder refused or misread the body");
    return;
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["numbers_bytes"] = static_cast<double>(numbers.size());
  state.counters["compact_bytes"] = static_cast<double>(compact.size());
  state.counters["schema_us"] = schema_us / n;
  state.counters["one_pass_us"] = one_pass_us / n;
  state.counters["compact_us"] = compact_us / n;
  state.counters["ratio_schema_vs_one_pass"] = schema_us / one_pass_us;
  state.counters["ratio_schema_vs_compact"] = schema_us / compact_us;
}
BENCHMARK(BM_DecodeRoute8k)->UseManualTime()->Unit(benchmark::kMicrosecond);

// POST /v1/route's answer with 64 candidates (the route benchmarks'
// fleet), printed through the nlohmann document and written directly,
// call by call.
void BM_EncodeDecision64(benchmark::State& state) {
  router::RouteDecision decision;
  decision.decision_id = std::string(32, 'a');
  decision.worker = "w07";
  decision.prompt_blocks = 512;
  decision.overlap_blocks = 448;
  for (int i = 0; i < 64; ++i) {
    router::Candidate c;
    c.worker = "w" + std::to_string(i);
    c.resident_blocks = c.overlap_blocks = 64 + static_cast<uint64_t>(i);
    c.tier_overlap[0] = c.resident_blocks;
    c.credited_blocks = static_cast<double>(c.resident_blocks);
    c.cost = 2.0 * (512.0 - c.credited_blocks) + 16.0;
    c.load.scraped = router::ScrapedLoad{1, 0, 0.5, 1790000000000};
    c.eligible = true;
    decision.candidates.push_back(std::move(c));
  }
  double document_us = 0, written_us = 0;
  size_t bytes = 0;
  for (auto _ : state) {
    const auto started = Clock::now();
    const std::string document = codec_internal::Dump(codec_internal::DecisionJson(decision));
    const auto printed = Clock::now();
    const std::optional<std::string> written = codec_internal::WriteDecisionJson(decision);
    const auto done = Clock::now();
    if (!written || *written != document) {
      state.SkipWithError("the writer and the document disagree");
      return;
    }
    bytes = written->size();
    document_us += std::chrono::duration<double, std::micro>(printed - started).count();
    written_us += std::chrono::duration<double, std::micro>(done - printed).count();
    state.SetIterationTime(std::chrono::duration<double>(done - printed).count());
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["document_us"] = document_us / n;
  state.counters["written_us"] = written_us / n;
  state.counters["ratio_document_vs_written"] = document_us / written_us;
}
BENCHMARK(BM_EncodeDecision64)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvgov
