#include "kvgov/codec/route_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <random>

#include "codec/decision_writer.h"
#include "codec/json_fields.h"
#include "codec/route_request_fast.h"
#include "codec/router_json.h"

namespace kvgov {
namespace {

TEST(RouteApiTest, DecodesAFullRequest) {
  Result<router::RouteRequest> request = DecodeRouteRequestJson(
      R"({"model":"llama","tenant":"acme","token_ids":[1,2,3],"lora_name":"ad",
          "workers":["w1","w2"]})",
      JsonLimits{});
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  EXPECT_EQ(request->model, "llama");
  EXPECT_EQ(request->tenant, "acme");
  EXPECT_EQ(request->token_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(request->lora_name, "ad");
  EXPECT_EQ(request->workers, (std::vector<std::string>{"w1", "w2"}));
}

TEST(RouteApiTest, ErrorsNameTheField) {
  auto message = [](std::string_view body) {
    return DecodeRouteRequestJson(body, JsonLimits{}).status().message();
  };
  EXPECT_EQ(message(R"({"token_ids":[1]})"), "$.model: missing required field");
  EXPECT_EQ(message(R"({"model":"","token_ids":[1]})"), "$.model: required, got empty");
  EXPECT_EQ(message(R"({"model":"m"})"), "$.token_ids: missing required field");
  EXPECT_EQ(message(R"({"model":"m","token_ids":[1],"cache_salt":"x"})"),
            "$.cache_salt: unknown field");
  EXPECT_EQ(message(R"({"model":"m","token_ids":["a"]})").rfind("$.token_ids[0]: ", 0), 0u);
  // nlohmann would stop at a NUL and ignore the rest; the body is refused.
  using namespace std::string_literals;
  EXPECT_EQ(message(R"({"model":"m","token_ids":[1]})"s + '\0' + "}}garbage"),
            "$: malformed JSON: a NUL byte at offset 29");
}

TEST(RouteApiTest, ADoneReportCarriesTheEnginesUsageOrNothing) {
  Result<RouteDoneReport> empty = DecodeRouteDoneJson("", JsonLimits{});
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_FALSE(empty->usage.has_value());
  Result<RouteDoneReport> none = DecodeRouteDoneJson("{}", JsonLimits{});
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->usage.has_value());
  Result<RouteDoneReport> full = DecodeRouteDoneJson(
      R"({"usage":{"prompt_tokens":96,"completion_tokens":8,"total_tokens":104,
                   "prompt_tokens_details":{"cached_tokens":64}}})",
      JsonLimits{});
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  ASSERT_TRUE(full->usage.has_value());
  EXPECT_EQ(full->usage->prompt_tokens, 96);
  EXPECT_EQ(full->usage->cached_tokens, 64);
  Result<RouteDoneReport> uncached =
      DecodeRouteDoneJson(R"({"usage":{"prompt_tokens":5}})", JsonLimits{});
  ASSERT_TRUE(uncached.ok());
  EXPECT_EQ(uncached->usage->cached_tokens, 0);

  auto message = [](std::string_view body) {
    return DecodeRouteDoneJson(body, JsonLimits{}).status().message();
  };
  EXPECT_EQ(message(R"({"usage":{}})"), "$.usage.prompt_tokens: missing required field");
  EXPECT_EQ(message(R"({"usage":{"prompt_tokens":-1}})"),
            "$.usage.prompt_tokens: want an integer in 0-2147483647");
  EXPECT_EQ(message(R"({"usage":{"prompt_tokens":4,"prompt_tokens_details":{"cached_tokens":8}}})"),
            "$.usage.prompt_tokens_details.cached_tokens: 8 is more than prompt_tokens (4)");
  EXPECT_EQ(message(R"({"usage":{"prompt_tokens":4},"saved":9})"), "$.saved: unknown field");
  EXPECT_EQ(message(R"({"usage":{"prompt_tokens":"4"}})").rfind("$.usage.prompt_tokens: ", 0), 0u);
}

// route-api.md's compact token ids: padded base64 of little-endian uint32.
TEST(RouteApiTest, TokenIdsMayComeAsBase64OfLittleEndianUint32) {
  // 1, 256, 2^31 - 1: bytes 01 00 00 00, 00 01 00 00, ff ff ff 7f.
  const std::vector<int64_t> ids = {1, 256, 2147483647};
  EXPECT_EQ(EncodeTokenIdsBase64(ids), "AQAAAAABAAD///9/");
  EXPECT_EQ(EncodeTokenIdsBase64(std::vector<int64_t>{7}), "BwAAAA==");
  Result<router::RouteRequest> request = DecodeRouteRequestJson(
      R"({"model":"llama","token_ids_b64":"AQAAAAABAAD///9/"})", JsonLimits{});
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  EXPECT_EQ(request->token_ids, ids);
  // Every length, round trip.
  for (size_t n = 0; n < 9; ++n) {
    std::vector<int64_t> tokens(n);
    for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<int64_t>(i * 7919 + 3);
    const Result<std::vector<int64_t>> back =
        DecodeTokenIdsBase64(EncodeTokenIdsBase64(tokens), "f");
    ASSERT_TRUE(back.ok()) << n << ": " << back.status().ToString();
    EXPECT_EQ(*back, tokens);
  }

  auto message = [](std::string_view body) {
    return DecodeRouteRequestJson(body, JsonLimits{}).status().message();
  };
  EXPECT_EQ(message(R"({"model":"m","token_ids":[1],"token_ids_b64":"AQAAAA=="})"),
            "$.token_ids: give exactly one of token_ids and token_ids_b64");
  EXPECT_EQ(message(R"({"model":"m","token_ids_b64":"AQAAAA="})"),
            "$.token_ids_b64: want padded base64 (a multiple of 4 characters), got 7");
  EXPECT_EQ(message(R"({"model":"m","token_ids_b64":"AQAA"})"),
            "$.token_ids_b64: 3 bytes, not a whole number of 4-byte token ids");
  EXPECT_EQ(message(R"({"model":"m","token_ids_b64":"AQ*AAA=="})"),
            "$.token_ids_b64: not base64 at character 2");
  EXPECT_EQ(message(R"({"model":"m","token_ids_b64":"/////w=="})"),
            "$.token_ids_b64[0]: want a token id in 0..2147483647, got 4294967295");
}

// The one pass takes the bodies clients send and leaves the rest to the
// schema path; whatever it takes, the schema path decodes the same.
TEST(RouteApiTest, TheOnePassAgreesWithTheSchemaPath) {
  const JsonLimits limits;
  for (
      const char* body :
      {R"({"model":"llama","tenant":"acme","token_ids":[1,2,3],"lora_name":"ad","workers":["w1"]})",
       R"( {"token_ids_b64":"AQAAAAABAAD///9/", "model":"m\u0065"} )",
       R"({"model":"m","token_ids":[]})"}) {
    const std::optional<router::RouteRequest> fast =
        codec_internal::DecodeRouteRequestFast(body, limits);
    ASSERT_TRUE(fast.has_value()) << body;
    const Result<router::RouteRequest> schema =
        codec_internal::DecodeRouteRequestBySchema(body, limits);
    ASSERT_TRUE(schema.ok()) << body << ": " << schema.status().ToString();
    EXPECT_EQ(fast->model, schema->model);
    EXPECT_EQ(fast->tenant, schema->tenant);
    EXPECT_EQ(fast->token_ids, schema->token_ids);
    EXPECT_EQ(fast->lora_name, schema->lora_name);
    EXPECT_EQ(fast->workers, schema->workers);
  }
  for (const char* body :
       {R"({"model":"m","token_ids":[1],"model":"n"})", R"({"model":"m","token_ids":[1.0]})",
        R"({"model":"m","token_ids":[-1]})", R"({"model":"m","token_ids":[2147483648]})",
        R"({"model":"m","tenant":null,"token_ids":[1]})", R"({"model":"m"})",
        R"({"model":"m","token_ids":[1],"cache_salt":"x"})", R"([1])"}) {
    EXPECT_FALSE(codec_internal::DecodeRouteRequestFast(body, limits).has_value()) << body;
  }
  JsonLimits small;
  small.max_array_items = 2;
  EXPECT_FALSE(
      codec_internal::DecodeRouteRequestFast(R"({"model":"m","token_ids":[1,2,3]})", small));
  EXPECT_EQ(DecodeRouteRequestJson(R"({"model":"m","token_ids":[1,2,3]})", small).status().code(),
            StatusCode::kResourceExhausted);
}

router::RouteDecision TwoCandidates();

// The direct writer prints what the document path prints, byte for byte,
// on random decisions: doubles of every magnitude and sign, integral ones,
// uint64 extremes, reasons, scraped loads present and absent.
TEST(RouteApiTest, TheDecisionWriterPrintsWhatTheDocumentPrints) {
  std::mt19937_64 random(64);
  const auto any_double = [&random]() -> double {
    switch (random() % 6) {
      case 0:
        return static_cast<double>(random() % 1000);
      case 1:
        return static_cast<double>(random() % 100000) / 8.0;
      case 2:
        return (static_cast<double>(random() % 2000) - 1000) * 0.1;
      case 3:
        return std::ldexp(static_cast<double>(random() % 1000000 + 1),
                          static_cast<int>(random() % 120) - 60);
      case 4:
        return random() % 2 == 0 ? 0.0 : -0.0;
      default:
        return static_cast<double>(random()) * 1e-3;
    }
  };
  int same_bytes = 0;
  for (int round = 0; round < 500; ++round) {
    router::RouteDecision d;
    d.decision_id = std::to_string(random());
    d.worker = "w" + std::to_string(random() % 64);
    d.cache_salt = random() % 2 == 0 ? "" : "9b1e\"quote\\ and \x01 control";
    d.prompt_blocks = random() % 2 == 0 ? random() : ~uint64_t{0};
    d.overlap_blocks = random() % 600;
    d.verdict = random() % 2 == 0 ? LookupVerdict::Miss(LookupReason::kCold) : LookupVerdict{};
    for (int c = 0; c < static_cast<int>(random() % 5); ++c) {
      router::Candidate candidate;
      candidate.worker = "w" + std::to_string(c);
      candidate.resident_blocks = random() % 512;
      candidate.overlap_blocks = random() % 512;
      for (uint64_t& tier : candidate.tier_overlap) tier = random() % 100;
      candidate.credited_blocks = any_double();
      candidate.cost = any_double();
      candidate.eligible = random() % 2 == 0;
      if (!candidate.eligible) candidate.reason = "draining";
      candidate.load.in_flight_requests = random() % 9;
      candidate.load.decoding_requests = random() % 9;
      candidate.load.in_flight_blocks = random();
      candidate.load.peer_blocks = random() % 77;
      candidate.load.blocks = any_double();
      if (random() % 2 == 0) {
        candidate.load.scraped =
            router::ScrapedLoad{any_double(), any_double(), any_double(),
                                static_cast<int64_t>(random() >> 1) * (random() % 2 == 0 ? 1 : -1)};
      }
      d.candidates.push_back(std::move(candidate));
    }
    const std::optional<std::string> written = codec_internal::WriteDecisionJson(d);
    ASSERT_TRUE(written.has_value());
    const std::string document = codec_internal::Dump(codec_internal::DecisionJson(d));
    // The same values always: nlohmann's Grisu2 may print a double with a
    // digit more than the shortest that reads back, which this writer
    // prints; every other byte is the same.
    ASSERT_EQ(nlohmann::json::parse(*written), nlohmann::json::parse(document))
        << "round " << round;
    if (*written == document) ++same_bytes;
  }
  EXPECT_GT(same_bytes, 450);
  // Typical decisions (counts, credits in quarters, loads) print the same bytes.
  EXPECT_EQ(*codec_internal::WriteDecisionJson(TwoCandidates()),
            codec_internal::Dump(codec_internal::DecisionJson(TwoCandidates())));
  // A string that is not ASCII goes the document path.
  router::RouteDecision foreign;
  foreign.worker = "w\xc3\xa9";
  EXPECT_FALSE(codec_internal::WriteDecisionJson(foreign).has_value());
  EXPECT_EQ(EncodeRouteDecisionJson(foreign),
            codec_internal::Dump(codec_internal::DecisionJson(foreign)));
}

router::RouteDecision TwoCandidates() {
  router::RouteDecision decision;
  decision.decision_id = "d1";
  decision.worker = "w1";
  decision.cache_salt = "salt";
  decision.prompt_blocks = 4;
  decision.overlap_blocks = 3;
  router::Candidate chosen;
  chosen.worker = "w1";
  chosen.resident_blocks = 3;
  chosen.overlap_blocks = 3;
  chosen.tier_overlap[0] = 2;
  chosen.tier_overlap[1] = 1;
  chosen.load.in_flight_requests = 1;
  chosen.load.scraped = router::ScrapedLoad{2, 0, 0.5, 77};
  chosen.eligible = true;
  router::Candidate drained;
  drained.worker = "w2";
  drained.reason = "draining";
  decision.candidates = {chosen, drained};
  return decision;
}

TEST(RouteApiTest, TheDecisionNamesEveryCandidateWithItsTiersLoadAndReason) {
  const nlohmann::json json = nlohmann::json::parse(EncodeRouteDecisionJson(TwoCandidates()));
  EXPECT_EQ(json["worker"], "w1");
  EXPECT_EQ(json["cache_salt"], "salt");
  EXPECT_EQ(json["overlap_blocks"], 3);
  ASSERT_EQ(json["candidates"].size(), 2u);
  const nlohmann::json& chosen = json["candidates"][0];
  EXPECT_EQ(chosen["tier_overlap"],
            nlohmann::json::parse(R"({"hbm":2,"dram":1,"disk":0,"remote":0,"unknown":0})"));
  EXPECT_EQ(chosen["load"]["scraped"]["running"], 2.0);
  EXPECT_EQ(chosen["load"]["scraped"]["scraped_at_ms"], 77);
  EXPECT_FALSE(chosen.contains("reason"));
  EXPECT_EQ(json["candidates"][1]["reason"], "draining");
  EXPECT_FALSE(json["candidates"][1]["load"].contains("scraped"));
  EXPECT_FALSE(json.contains("error"));
}

TEST(RouteApiTest, AnUnroutableDecisionCarriesTheErrorBesideTheCandidates) {
  router::RouteDecision decision = TwoCandidates();
  decision.worker.clear();
  const nlohmann::json json = nlohmann::json::parse(EncodeUnroutableDecisionJson(decision));
  EXPECT_EQ(json["error"]["code"], "unavailable");
  EXPECT_EQ(json["candidates"].size(), 2u);
  EXPECT_EQ(json["worker"], "");
}

}  // namespace
}  // namespace kvgov
