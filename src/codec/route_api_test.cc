#include "kvgov/codec/route_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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
