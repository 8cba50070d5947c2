#include <httplib.h>

#include <gtest/gtest.h>

#include "kvgov/codec/route_api.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "kvgov/server/server.h"
#include "testing/scratch_dir.h"

namespace kvgov::server {
namespace {

using Json = nlohmann::json;

class HttpApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.port = 0;
    options.data_dir = (dir_ / "data").string();
    options.max_body_bytes = 64 * 1024;
    // Reports that name no owner lower with the owner "engine": admit it, and
    // nothing else.
    options.admit.push_back(AdmissionRule{"engine", Scope::kTenant, "test"});
    // A worker whose engine is not running: ZeroMQ connects lazily, so the
    // worker is registered and waits for a publisher that never comes.
    options.engines.push_back(
        *ingest::ParseEngineSpec("id=w1,events=tcp://127.0.0.1:1,model=llama,block-size=4"));
    Result<std::unique_ptr<Server>> server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
  }
  httplib::Result PostEvents(const std::string& body,
                             const std::string& type = "application/json") {
    return client_->Post("/v1/events", body, type);
  }
  Json GetJson(const std::string& path) {
    httplib::Result response = client_->Get(path);
    EXPECT_TRUE(response);
    EXPECT_EQ(response->status, 200);
    return Json::parse(response->body);
  }
  std::string Metrics() { return client_->Get("/metrics")->body; }

  test_support::ScratchDir dir_{"kvgov_http_api_test"};  // outlives the server
  std::unique_ptr<Server> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpApiTest, EventsAreAcceptedOrRejectedOneByOne) {
  httplib::Result response = PostEvents(R"({"events":[
    {"type":"kv_transfer","direction":"route","span_digest":"s1","tokens":16,"bytes_moved":0},
    {"type":"kv_transfer","direction":"sideways","span_digest":"s2"},
    {"type":"provider_cache","provider":"anthropic","model_id":"claude","cached_tokens":1200},
    {"type":"kv_transfer","direction":"offload","span_digest":"","tokens":4}
  ]})");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  Json body = Json::parse(response->body);
  EXPECT_EQ(body["accepted"], 2);
  ASSERT_EQ(body["rejected"].size(), 2u);
  EXPECT_EQ(body["rejected"][0]["index"], 1);
  EXPECT_EQ(body["rejected"][1]["index"], 3);
  EXPECT_EQ(body["rejected"][1]["error"], "$.events[3].span_digest: required, got empty");
  EXPECT_EQ(body["rejected"][1]["code"], "invalid_argument");
}

TEST_F(HttpApiTest, SavingsAreCountedUnderTheirOwnSource) {
  ASSERT_EQ(PostEvents(R"({"events":[
    {"type":"provider_cache","provider":"openai","model_id":"gpt","cached_tokens":4096},
    {"type":"tool_result","key":"grep:ab:1","event":"hit","result_digest":"r","saved_tokens":30}
  ]})")
                ->status,
            200);
  std::string metrics = Metrics();
  EXPECT_NE(metrics.find(R"(kvgov_prefill_tokens_saved_total{source="provider"} 4096)"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(R"(kvgov_prefill_tokens_saved_total{source="tool_result"} 30)"),
            std::string::npos);
  EXPECT_EQ(metrics.find(R"(kvgov_prefill_tokens_saved_total{source="native"})"),
            std::string::npos);
  EXPECT_NE(metrics.find(R"(kvgov_lookup_verdicts_total{source="provider",kind="transform",)"
                         R"(reason="policy_mismatch"} 1)"),
            std::string::npos);
}

TEST_F(HttpApiTest, TransportsMoveResidencyByTokenIds) {
  ASSERT_EQ(PostEvents(R"({"events":[
    {"type":"kv_transfer","direction":"offload","span_digest":"s","tokens":8,
     "to_tier":"dram","from_tier":"hbm","bytes_moved":1024,
     "worker":"w1","token_ids":[1,2,3,4,5,6,7,8]}
  ]})")
                ->status,
            200);
  Json workers = GetJson("/v1/workers");
  ASSERT_EQ(workers["workers"].size(), 1u);
  EXPECT_EQ(workers["workers"][0]["id"], "w1");
  EXPECT_EQ(workers["workers"][0]["blocks"]["dram"], 2);
  EXPECT_EQ(workers["workers"][0]["blocks"]["hbm"], 0);
  EXPECT_EQ(workers["workers"][0]["kind"], "vllm");
  EXPECT_NE(Metrics().find(R"(kvgov_bytes_moved_total{source="ride_engine",from_tier="hbm",)"
                           R"(to_tier="dram"} 1024)"),
            std::string::npos);

  httplib::Result evicted = PostEvents(R"({"events":[
    {"type":"kv_transfer","direction":"evict","span_digest":"s","from_tier":"dram",
     "worker":"w1","token_ids":[1,2,3,4,5,6,7,8]}]})");
  ASSERT_EQ(Json::parse(evicted->body)["accepted"], 1);
  EXPECT_EQ(GetJson("/v1/workers")["workers"][0]["blocks"]["dram"], 0);
}

TEST_F(HttpApiTest, UnadmittedReporterMovesNoResidency) {
  httplib::Result response = PostEvents(R"({"events":[
    {"type":"kv_transfer","direction":"store","span_digest":"s","to_tier":"hbm","owner":"rogue",
     "worker":"w1","token_ids":[1,2,3,4]}]})");
  Json body = Json::parse(response->body);
  EXPECT_EQ(body["accepted"], 0);
  EXPECT_EQ(body["rejected"][0]["error"],
            "$.events[0].owner: 'rogue' is not admitted (serve --admit OWNER), so its report "
            "moves no residency");
  EXPECT_EQ(GetJson("/v1/workers")["workers"][0]["blocks"]["hbm"], 0);
}

TEST_F(HttpApiTest, UnknownWorkerIsRejectedNotInvented) {
  httplib::Result response = PostEvents(R"({"events":[
    {"type":"kv_transfer","direction":"store","span_digest":"s","to_tier":"hbm",
     "worker":"ghost","token_ids":[1,2,3,4]}]})");
  Json body = Json::parse(response->body);
  EXPECT_EQ(body["accepted"], 0);
  EXPECT_EQ(body["rejected"][0]["error"], "$.events[0].worker: 'ghost' is not registered");
  EXPECT_EQ(GetJson("/v1/workers")["workers"].size(), 1u);
}

TEST_F(HttpApiTest, BodyErrorsHaveTheirOwnStatus) {
  httplib::Result not_json = PostEvents("{not json");
  EXPECT_EQ(not_json->status, 400);
  EXPECT_NE(not_json->body.find("invalid_argument"), std::string::npos);

  EXPECT_EQ(PostEvents(R"({"events":[]})", "text/plain")->status, 415);

  std::string huge = R"({"events":[)" + std::string(70 * 1024, ' ') + "]}";
  httplib::Result too_big = PostEvents(huge);
  EXPECT_EQ(too_big->status, 413);
  EXPECT_NE(too_big->body.find("65536-byte limit"), std::string::npos) << too_big->body;
}

TEST_F(HttpApiTest, MetricsExposeEngineFamilies) {
  std::string metrics = Metrics();
  EXPECT_NE(metrics.find(R"(kvgov_residency_blocks{worker="w1",tier="hbm"} 0)"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(R"(kvgov_engine_seq_gaps_total{worker="w1"} 0)"), std::string::npos);
  EXPECT_NE(metrics.find("# TYPE kvgov_engine_events_total counter"), std::string::npos);
}

}  // namespace
}  // namespace kvgov::server

namespace kvgov::server {
namespace {

TEST_F(HttpApiTest, RouteExplainsItselfAndReleases) {
  // Residency for w1 reported by a transport, by token ids.
  ASSERT_EQ(PostEvents(R"({"events":[{"type":"kv_transfer","direction":"store","span_digest":"s",
     "to_tier":"hbm","worker":"w1","token_ids":[1,2,3,4,5,6,7,8]}]})")
                ->status,
            200);
  httplib::Result response =
      client_->Post("/v1/route", R"({"model":"llama","token_ids":[1,2,3,4,5,6,7,8,9,10,11,12]})",
                    "application/json");
  ASSERT_TRUE(response);
  ASSERT_EQ(response->status, 200) << response->body;
  Json decision = Json::parse(response->body);
  EXPECT_EQ(decision["worker"], "w1");
  EXPECT_EQ(decision["prompt_blocks"], 3);
  EXPECT_EQ(decision["overlap_blocks"], 2);
  EXPECT_EQ(decision["cache_salt"], "");
  EXPECT_EQ(decision["verdict"]["kind"], "hit");
  EXPECT_EQ(decision["candidates"][0]["tier_overlap"]["hbm"], 2);
  EXPECT_EQ(decision["decision_id"].get<std::string>().size(), 32u);

  EXPECT_EQ(GetJson("/v1/workers")["workers"][0]["load"]["in_flight_requests"], 1);
  EXPECT_EQ(GetJson("/v1/workers")["workers"][0]["load"]["in_flight_blocks"], 1);
  // The caller saw the first token: the decision now weighs its decode.
  const std::string prefilled =
      "/v1/route/" + decision["decision_id"].get<std::string>() + "/prefilled";
  httplib::Result noted = client_->Post(prefilled, "", "application/json");
  ASSERT_EQ(noted->status, 200);
  EXPECT_EQ(Json::parse(noted->body)["decoding"], true);
  EXPECT_EQ(GetJson("/v1/workers")["workers"][0]["load"]["decoding_requests"], 1);
  const std::string done = "/v1/route/" + decision["decision_id"].get<std::string>() + "/done";
  EXPECT_EQ(client_->Post(done, "", "application/json")->status, 200);
  EXPECT_EQ(client_->Post(done, "", "application/json")->status, 404);
  EXPECT_EQ(GetJson("/v1/workers")["workers"][0]["load"]["in_flight_requests"], 0);
  EXPECT_EQ(GetJson("/v1/workers")["workers"][0]["load"]["decoding_requests"], 0);
  EXPECT_EQ(client_->Post(prefilled, "", "application/json")->status, 404);

  std::string metrics = Metrics();
  EXPECT_NE(metrics.find(R"(kvgov_route_decisions_total{outcome="routed"} 1)"), std::string::npos);
  EXPECT_NE(metrics.find("kvgov_route_overlap_blocks_count 1"), std::string::npos);
  // The credited overlap is a prediction, never a saving (ADR 0028).
  EXPECT_NE(metrics.find(R"(kvgov_route_predicted_tokens_total{model="llama",tenant="none"} 8)"),
            std::string::npos);
  EXPECT_EQ(metrics.find(R"(direction="route")"), std::string::npos);

  // Done with the engine's usage: that, and only that, counts as saved, and
  // the prediction is scored against it.
  const Json again = Json::parse(
      client_
          ->Post("/v1/route", R"({"model":"llama","token_ids":[1,2,3,4,5,6,7,8,9,10,11,12]})",
                 "application/json")
          ->body);
  const std::string reported = "/v1/route/" + again["decision_id"].get<std::string>() + "/done";
  httplib::Result bad = client_->Post(
      reported, R"({"usage":{"prompt_tokens":12,"prompt_tokens_details":{"cached_tokens":16}}})",
      "application/json");
  ASSERT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("more than prompt_tokens"), std::string::npos) << bad->body;
  httplib::Result accounted = client_->Post(
      reported, R"({"usage":{"prompt_tokens":12,"prompt_tokens_details":{"cached_tokens":4}}})",
      "application/json");
  ASSERT_EQ(accounted->status, 200) << accounted->body;
  EXPECT_EQ(Json::parse(accounted->body)["accounted"], true);
  metrics = Metrics();
  EXPECT_NE(metrics.find(R"(kvgov_cache_events_total{source="ride_engine",plane="kv_transfer",)"
                         R"(direction="route",outcome="ok"} 1)"),
            std::string::npos);
  EXPECT_NE(metrics.find(R"(kvgov_gateway_predictions_total{worker="w1",outcome="over"} 1)"),
            std::string::npos)
      << metrics;  // 8 predicted, 4 reported

  // The same prompt with its ids in the compact form routes the same way.
  httplib::Result compact = client_->Post(
      "/v1/route",
      Json{{"model", "llama"},
           {"token_ids_b64",
            EncodeTokenIdsBase64(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})}}
          .dump(),
      "application/json");
  ASSERT_EQ(compact->status, 200) << compact->body;
  EXPECT_EQ(Json::parse(compact->body)["worker"], "w1");
  EXPECT_EQ(Json::parse(compact->body)["overlap_blocks"], 2);
}

TEST_F(HttpApiTest, TenantSaltComesFromKvgovNotTheClient) {
  httplib::Result acme =
      client_->Post("/v1/route", R"({"model":"llama","tenant":"acme","token_ids":[1,2,3,4]})",
                    "application/json");
  ASSERT_EQ(acme->status, 200);
  const std::string salt = Json::parse(acme->body)["cache_salt"];
  EXPECT_EQ(salt.size(), 32u);
  httplib::Result again =
      client_->Post("/v1/route", R"({"model":"llama","tenant":"acme","token_ids":[1,2,3,4]})",
                    "application/json");
  EXPECT_EQ(Json::parse(again->body)["cache_salt"], salt);
  httplib::Result other =
      client_->Post("/v1/route", R"({"model":"llama","tenant":"umbrella","token_ids":[1,2,3,4]})",
                    "application/json");
  EXPECT_NE(Json::parse(other->body)["cache_salt"], salt);

  httplib::Result forged =
      client_->Post("/v1/route", R"({"model":"llama","cache_salt":"mine","token_ids":[1,2,3,4]})",
                    "application/json");
  EXPECT_EQ(forged->status, 400);
  EXPECT_NE(forged->body.find("$.cache_salt: unknown field"), std::string::npos);
}

TEST_F(HttpApiTest, DrainedWorkerIsNotRoutedAndSaysWhy) {
  ASSERT_EQ(client_->Post("/v1/workers/w1/drain", "", "application/json")->status, 200);
  httplib::Result response =
      client_->Post("/v1/route", R"({"model":"llama","token_ids":[1,2,3,4]})", "application/json");
  ASSERT_EQ(response->status, 503);
  Json body = Json::parse(response->body);
  EXPECT_EQ(body["worker"], "");
  EXPECT_EQ(body["candidates"][0]["reason"], "draining");
  EXPECT_EQ(GetJson("/v1/workers")["workers"][0]["health"]["draining"], true);
  ASSERT_EQ(client_->Delete("/v1/workers/w1/drain")->status, 200);
  EXPECT_EQ(
      client_->Post("/v1/route", R"({"model":"llama","token_ids":[1,2,3,4]})", "application/json")
          ->status,
      200);
  EXPECT_EQ(client_->Post("/v1/workers/ghost/drain", "", "application/json")->status, 404);
}

TEST_F(HttpApiTest, RouteErrors) {
  EXPECT_EQ(
      client_->Post("/v1/route", R"({"model":"qwen","token_ids":[1]})", "application/json")->status,
      404);
  EXPECT_EQ(client_->Post("/v1/route", R"({"token_ids":[1]})", "application/json")->status, 400);
  EXPECT_EQ(client_->Post("/v1/route", "{}", "text/plain")->status, 415);
  EXPECT_EQ(client_->Post("/v1/route/nothex/done", "", "application/json")->status, 404);
  std::string metrics = Metrics();
  EXPECT_NE(metrics.find(R"(kvgov_route_decisions_total{outcome="unknown_model"} 1)"),
            std::string::npos);
  EXPECT_NE(metrics.find(R"(kvgov_route_decisions_total{outcome="bad_request"} 2)"),
            std::string::npos);
}

// Token ids are non-negative int32 wherever a span is named: a route, a
// transport report, a quarantine. The refusal names the element.
TEST_F(HttpApiTest, TokenIdsOutsideInt32AreRefusedNamingTheElement) {
  httplib::Result route =
      client_->Post("/v1/route", R"({"model":"llama","token_ids":[-1,2]})", "application/json");
  ASSERT_TRUE(route);
  EXPECT_EQ(route->status, 400);
  EXPECT_EQ(Json::parse(route->body)["error"]["message"],
            "$.token_ids[0]: want a token id in 0..2147483647, got -1")
      << route->body;
  httplib::Result too_big = client_->Post(
      "/v1/route", R"({"model":"llama","token_ids":[1,2147483648]})", "application/json");
  EXPECT_EQ(too_big->status, 400);
  EXPECT_NE(too_big->body.find("$.token_ids[1]: want a token id in 0..2147483647, got "
                               "2147483648"),
            std::string::npos)
      << too_big->body;
  EXPECT_EQ(
      client_
          ->Post("/v1/route", R"({"model":"llama","token_ids":[0,2147483647]})", "application/json")
          ->status,
      200);

  httplib::Result event = PostEvents(R"({"events":[
    {"type":"kv_transfer","direction":"offload","span_digest":"s","tokens":4,
     "to_tier":"dram","from_tier":"hbm","worker":"w1","token_ids":[1,2,-3,4]}]})");
  ASSERT_TRUE(event);
  Json answer = Json::parse(event->body);
  EXPECT_EQ(answer["accepted"], 0) << event->body;
  EXPECT_EQ(answer["rejected"][0]["error"],
            "$.events[0].token_ids[2]: want a token id in "
            "0..2147483647, got -3")
      << event->body;
  EXPECT_EQ(GetJson("/v1/workers")["workers"][0]["blocks"]["dram"], 0);

  httplib::Result quarantine = client_->Post(
      "/v1/quarantine", R"({"model":"llama","reason":"x","token_ids":[1,-5]})", "application/json");
  EXPECT_EQ(quarantine->status, 400);
  EXPECT_NE(quarantine->body.find("$.token_ids[1]: want a token id"), std::string::npos)
      << quarantine->body;
}

TEST_F(HttpApiTest, ConfigReportsTheWeights) {
  Json config = GetJson("/v1/config");
  EXPECT_EQ(config["route"]["overlap_weight"], 2.0);
  EXPECT_EQ(config["route"]["tier_credit"]["hbm"], 1.0);
  EXPECT_EQ(config["route"]["tier_credit"]["dram"], 0.75);
  EXPECT_EQ(config["engines"][0]["id"], "w1");
  EXPECT_EQ(config["spool_dir"], "");
  EXPECT_TRUE(config["replica"].is_null());  // a single node
  EXPECT_EQ(config.dump().find("secret"), std::string::npos);
}

}  // namespace
}  // namespace kvgov::server

namespace kvgov::server {
namespace {

Json RouteTo(httplib::Client& client, const std::string& tokens) {
  httplib::Result response =
      client.Post("/v1/route", R"({"model":"llama","workers":["w1"],"token_ids":)" + tokens + "}",
                  "application/json");
  EXPECT_TRUE(response);
  return Json::parse(response->body);
}

TEST_F(HttpApiTest, LeaseCreditsOnlyWhileActive) {
  const std::string tokens = "[1,2,3,4,5,6,7,8]";
  ASSERT_EQ(PostEvents(R"({"events":[{"type":"kv_transfer","direction":"store","span_digest":"s",
     "to_tier":"hbm","worker":"w1","token_ids":)" +
                       tokens + "}]}")
                ->status,
            200);
  Json accepted = Json::parse(PostEvents(R"({"events":[{"type":"nixl_lease","lease_id":"l1",
     "event":"create","role":"prefill_pin","span_digest":"s","remote_engine":"w1","ttl_ms":60000,
     "token_ids":)" + tokens + "}]}")
                                  ->body);
  ASSERT_EQ(accepted["accepted"], 1) << accepted.dump();
  EXPECT_EQ(RouteTo(*client_, tokens)["overlap_blocks"], 2);

  ASSERT_EQ(Json::parse(PostEvents(R"({"events":[{"type":"nixl_lease","lease_id":"l1",
     "event":"transfer_complete","role":"prefill_pin"}]})")
                            ->body)["accepted"],
            1);
  Json after = RouteTo(*client_, tokens);
  EXPECT_EQ(after["overlap_blocks"], 0);
  EXPECT_EQ(after["verdict"]["reason"], "lease_released");
  EXPECT_EQ(after["candidates"][0]["resident_blocks"], 2);

  // A heartbeat after completion never revives the lease.
  Json revived = Json::parse(PostEvents(R"({"events":[{"type":"nixl_lease","lease_id":"l1",
     "event":"heartbeat","role":"prefill_pin"}]})")
                                 ->body);
  EXPECT_EQ(revived["accepted"], 0);
  EXPECT_NE(revived["rejected"][0]["error"].get<std::string>().find("cannot revive"),
            std::string::npos);

  Json leases = GetJson("/v1/leases");
  ASSERT_EQ(leases["leases"].size(), 1u);
  EXPECT_EQ(leases["leases"][0]["state"], "completed");
  std::string metrics = Metrics();
  EXPECT_NE(metrics.find(R"(kvgov_lease_transitions_total{from="active",to="completed"} 1)"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(R"(kvgov_lease_rejections_total{reason="failed_precondition"} 1)"),
            std::string::npos);
  EXPECT_NE(metrics.find(R"(kvgov_leases{state="completed"} 1)"), std::string::npos);
}

// Found by ingest_batch_fuzzer: a report after the grant was lowered and
// counted without the grant's checks.
TEST_F(HttpApiTest, LeaseReportWithNegativeCountsIsRefusedAfterGrant) {
  ASSERT_EQ(Json::parse(PostEvents(R"({"events":[{"type":"nixl_lease","lease_id":"l1",
     "event":"create","role":"prefill_pin","span_digest":"s","remote_engine":"w1",
     "ttl_ms":60000}]})")
                            ->body)["accepted"],
            1);
  Json heartbeat = Json::parse(PostEvents(R"({"events":[{"type":"nixl_lease","lease_id":"l1",
     "event":"heartbeat","role":"prefill_pin","tokens":-5}]})")
                                   ->body);
  EXPECT_EQ(heartbeat["accepted"], 0);
  ASSERT_EQ(heartbeat["rejected"].size(), 1u);
  EXPECT_NE(heartbeat["rejected"][0]["error"].get<std::string>().find("tokens"), std::string::npos)
      << heartbeat.dump();
  // Nothing of the refused report was counted: the lease is as granted.
  Json leases = GetJson("/v1/leases");
  ASSERT_EQ(leases["leases"].size(), 1u);
  EXPECT_EQ(leases["leases"][0]["event"], "create");
}

TEST_F(HttpApiTest, ExpiredLeaseStopsCreditWithoutAnyEvent) {
  const std::string tokens = "[1,2,3,4]";
  ASSERT_EQ(PostEvents(R"({"events":[{"type":"kv_transfer","direction":"store","span_digest":"s",
     "to_tier":"hbm","worker":"w1","token_ids":)" +
                       tokens + "}]}")
                ->status,
            200);
  ASSERT_EQ(Json::parse(PostEvents(R"({"events":[{"type":"nixl_lease","lease_id":"short",
     "event":"create","role":"prefill_pin","span_digest":"s","remote_engine":"w1","ttl_ms":50,
     "token_ids":)" + tokens + "}]}")
                            ->body)["accepted"],
            1);
  // Poll: the lease expires 50 ms after its grant, with no event at all.
  Json route;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    route = RouteTo(*client_, tokens);
  } while (route["overlap_blocks"] != 0 && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(route["verdict"]["reason"], "expired_ttl");
  const auto journal_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool journaled = false;
  while (!journaled && std::chrono::steady_clock::now() < journal_deadline) {
    // Hold the document: a range-for over a temporary's member dangles.
    const Json journal = GetJson("/v1/journal?since=1&limit=1000");
    for (const Json& row : journal["rows"]) {
      journaled |=
          row["kind"] == "lease.transition" &&
          row["payload"].get<std::string>().find("\"to\":\"expired\"") != std::string::npos;
    }
  }
  EXPECT_TRUE(journaled);
}

TEST_F(HttpApiTest, QuarantineStopsCreditAndIsJournaled) {
  const std::string tokens = "[1,2,3,4,5,6,7,8]";
  ASSERT_EQ(PostEvents(R"({"events":[{"type":"kv_transfer","direction":"store","span_digest":"s",
     "to_tier":"hbm","worker":"w1","token_ids":)" +
                       tokens + "}]}")
                ->status,
            200);
  ASSERT_EQ(RouteTo(*client_, tokens)["overlap_blocks"], 2);
  httplib::Result quarantined =
      client_->Post("/v1/quarantine",
                    R"({"model":"llama","token_ids":[1,2,3,4],"reason":"poisoned tool output"})",
                    "application/json");
  ASSERT_EQ(quarantined->status, 200) << quarantined->body;
  EXPECT_EQ(Json::parse(quarantined->body)["blocks"], 1);

  // The quarantined first block stops credit for everything after it too,
  // and a prompt crossing it goes out under a diverted salt, only to an
  // engine proven to key by it: w1's events never showed a salt.
  Json route = RouteTo(*client_, tokens);
  EXPECT_EQ(route["overlap_blocks"], 0);
  EXPECT_EQ(route["worker"], "");
  EXPECT_EQ(route["candidates"][0]["reason"], "salt_unverified");
  EXPECT_TRUE(route["cache_salt"].get<std::string>().find('.') != std::string::npos)
      << route.dump();
  EXPECT_NE(Metrics().find(R"(kvgov_quarantine_diversions_total{model="llama",tenant="none"} 1)"),
            std::string::npos);
  EXPECT_EQ(GetJson("/v1/quarantines")["quarantines"][0]["reason"], "poisoned tool output");
  bool journaled = false;
  Json journal = GetJson("/v1/journal?since=1&limit=100");
  for (const Json& row : journal["rows"]) journaled |= row["kind"] == "quarantine";
  EXPECT_TRUE(journaled) << journal.dump();

  EXPECT_EQ(client_->Post("/v1/quarantine", R"({"model":"llama","reason":"x"})", "application/json")
                ->status,
            400);
  // With invalidate, the same span also gets a directive; w1 has no control
  // URL, so its owner cannot be reached and the directive fails, journaled.
  httplib::Result with_invalidation = client_->Post(
      "/v1/quarantine", R"({"model":"llama","token_ids":[1,2,3,4],"reason":"x","invalidate":true})",
      "application/json");
  ASSERT_EQ(with_invalidation->status, 200) << with_invalidation->body;
  const std::string directive =
      Json::parse(with_invalidation->body)["invalidation"]["id"].get<std::string>();
  Json state;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    state = GetJson("/v1/invalidations/" + directive);
  } while (state["state"] != "failed" && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(state["failure"], "owner_unreachable") << state.dump();
}

}  // namespace
}  // namespace kvgov::server
