// Bearer tokens, roles, tenant binding and TLS against the real binary.

#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "e2e/bearer.h"
#include "e2e/daemon_process.h"
#include "e2e/wait.h"
#include "kvgov/simfleet/live_engine.h"

namespace kvgov::testing {
namespace {

using Json = nlohmann::json;

TEST(AuthE2ETest, TokensGateEveryRouteByRoleAndRevocationIsImmediate) {
  DaemonProcess daemon;
  ASSERT_TRUE(daemon.Start().ok());
  httplib::Client client("127.0.0.1", daemon.port());
  // No token yet: loopback is open.
  ASSERT_EQ(HttpStatus(client.Get("/v1/workers")), 200);

  const std::string reader = AddToken(daemon.data_dir(), "reader", {"read"});
  const std::string router = AddToken(daemon.data_dir(), "router", {"route"});
  ASSERT_EQ(reader.rfind("kvgov_", 0), 0u) << reader;
  const std::string route = R"({"model":"m","token_ids":[1,2,3]})";
  // The running daemon picks the file up by itself, each token within a
  // reload (a reload may fall between the two additions).
  ASSERT_TRUE(WaitFor(
      [&] {
        return HttpStatus(client.Get("/v1/workers")) == 401 &&
               HttpStatus(client.Post("/v1/route", Bearer(router), route, "application/json")) !=
                   401;
      },
      std::chrono::seconds(5)));
  httplib::Result unauthenticated = client.Get("/v1/workers");
  EXPECT_EQ(unauthenticated->get_header_value("WWW-Authenticate"), "Bearer realm=\"kvgov\"");
  EXPECT_EQ(Json::parse(unauthenticated->body)["error"]["code"], "unauthenticated");
  EXPECT_EQ(HttpStatus(client.Get("/healthz")), 200);  // liveness stays open
  EXPECT_EQ(HttpStatus(client.Get("/v1/workers", Bearer(reader))), 200);
  EXPECT_EQ(HttpStatus(client.Get("/metrics", Bearer(reader))), 200);
  EXPECT_EQ(HttpStatus(client.Get("/v1/workers", Bearer(reader + "0"))), 401);
  httplib::Result lacking = client.Post("/v1/route", Bearer(reader), route, "application/json");
  EXPECT_EQ(HttpStatus(lacking), 403);
  EXPECT_NE(lacking->body.find("lacks the route role"), std::string::npos) << lacking->body;
  // The router's token passes the gate (no worker serves "m": 404).
  EXPECT_EQ(HttpStatus(client.Post("/v1/route", Bearer(router), route, "application/json")), 404);
  EXPECT_EQ(
      HttpStatus(client.Post("/v1/events", Bearer(router), R"({"events":[]})", "application/json")),
      403);
  EXPECT_EQ(HttpStatus(client.Post("/v1/quarantine", Bearer(reader), "{}", "application/json")),
            403);

  std::string listed;
  ASSERT_EQ(DaemonProcess::RunToExit({"token", "list", "--data-dir", daemon.data_dir()}, &listed),
            0);
  EXPECT_NE(listed.find("reader"), std::string::npos);
  EXPECT_EQ(listed.find(reader.substr(6)), std::string::npos);  // no secrets
  EXPECT_NE(listed.find("Z\n"), std::string::npos) << listed;   // ISO-8601 UTC times
  std::string missing;
  EXPECT_EQ(DaemonProcess::RunToExit({"token", "list", "--data-dir", daemon.data_dir() + "-typo"},
                                     &missing),
            1)
      << missing;
  EXPECT_NE(missing.find("no data dir"), std::string::npos) << missing;

  std::string revoked;
  ASSERT_EQ(DaemonProcess::RunToExit({"token", "revoke", "reader", "--data-dir", daemon.data_dir()},
                                     &revoked),
            0)
      << revoked;
  EXPECT_TRUE(WaitFor([&] { return HttpStatus(client.Get("/v1/workers", Bearer(reader))) == 401; },
                      std::chrono::seconds(5)));
}

TEST(AuthE2ETest, BeyondLoopbackOnlyWithATokenAndTlsWhenConfigured) {
  DaemonProcess daemon;
  std::string output;
  EXPECT_EQ(DaemonProcess::RunToExit(
                {"serve", "--listen", "0.0.0.0:0", "--data-dir", daemon.data_dir()}, &output),
            1);
  EXPECT_NE(output.find("no bearer token exists"), std::string::npos) << output;

  const std::string reader = AddToken(daemon.data_dir(), "reader", {"read"});
  // A self-signed certificate for the listener.
  const std::filesystem::path dir = daemon.dir();
  const std::string key = (dir / "tls.key").string();
  const std::string cert = (dir / "tls.crt").string();
  const std::string openssl =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
      "-nodes -days 1 -subj /CN=localhost -keyout " +
      key + " -out " + cert + " 2>/dev/null";
  ASSERT_EQ(std::system(openssl.c_str()), 0);
  kvgov::Status started = daemon.Start({"--tls-cert", cert, "--tls-key", key}, "0.0.0.0:0");
  ASSERT_TRUE(started.ok()) << started.ToString();

  httplib::SSLClient tls("127.0.0.1", daemon.port());
  tls.set_ca_cert_path(cert.c_str());
  tls.enable_server_certificate_verification(false);  // issued to CN=localhost, dialled by IP
  EXPECT_EQ(HttpStatus(tls.Get("/healthz")), 200);
  EXPECT_EQ(HttpStatus(tls.Get("/v1/workers")), 401);
  EXPECT_EQ(HttpStatus(tls.Get("/v1/workers", Bearer(reader))), 200);
  httplib::Client plain("127.0.0.1", daemon.port());
  plain.set_read_timeout(std::chrono::seconds(2));
  EXPECT_NE(HttpStatus(plain.Get("/healthz")), 200);  // plaintext is not spoken
  EXPECT_EQ(daemon.Stop(), 0);

  EXPECT_EQ(DaemonProcess::RunToExit({"serve", "--data-dir", daemon.data_dir(), "--tls-cert", cert,
                                      "--tls-key", cert, "--listen", "127.0.0.1:0"},
                                     &output),
            1);
  EXPECT_NE(output.find("TLS: cannot load certificate"), std::string::npos) << output;
  // A file that is not there is not a mismatch: the answer says which.
  EXPECT_EQ(DaemonProcess::RunToExit({"serve", "--data-dir", daemon.data_dir(), "--tls-cert", cert,
                                      "--tls-key", key + ".missing", "--listen", "127.0.0.1:0"},
                                     &output),
            1);
  EXPECT_NE(output.find("TLS: cannot read --tls-key '" + key + ".missing': No such file"),
            std::string::npos)
      << output;
}

// The issuer's public key is public (issue 43: it once answered 401 once a
// token existed): whoever verifies a deletion certificate offline needs it,
// token or not. It is the same key a token holder is served.
TEST(AuthE2ETest, TheIssuerKeyNeedsNoTokenOnceTokensExist) {
  DaemonProcess daemon;
  ASSERT_TRUE(daemon.Start().ok());
  httplib::Client client("127.0.0.1", daemon.port());
  const std::string reader = AddToken(daemon.data_dir(), "reader", {"read"});
  ASSERT_TRUE(WaitFor([&] { return HttpStatus(client.Get("/v1/workers")) == 401; },
                      std::chrono::seconds(5)));

  httplib::Result open = client.Get("/v1/issuer");
  ASSERT_EQ(HttpStatus(open), 200) << (open ? open->body : "no answer");
  const Json issuer = Json::parse(open->body);
  EXPECT_EQ(issuer.value("algorithm", ""), "ed25519");
  EXPECT_EQ(issuer.value("public_key", "").size(), 64u) << issuer.dump();
  EXPECT_FALSE(issuer.value("key_id", "").empty()) << issuer.dump();
  httplib::Result with_token = client.Get("/v1/issuer", Bearer(reader));
  ASSERT_EQ(HttpStatus(with_token), 200);
  EXPECT_EQ(Json::parse(with_token->body), issuer);
  // A token that matches nothing is not refused here either: the route
  // does not look at it.
  EXPECT_EQ(HttpStatus(client.Get("/v1/issuer", Bearer(reader + "0"))), 200);
  // Everything else still needs one.
  EXPECT_EQ(HttpStatus(client.Get("/v1/journal")), 401);
}

// Two tenants send identical prompts through one engine.
class TenantIsolationE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    simfleet::LiveEngineOptions options;
    options.id = "w1";
    options.model = "llama";
    options.pool.capacity_blocks = 256;
    options.pool.block_size = 16;
    options.speedup = 1000;
    Result<std::unique_ptr<simfleet::LiveEngine>> engine = simfleet::LiveEngine::Start(options);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();

    fleet_ = AddToken(daemon_.data_dir(), "operator", {"admin", "read", "route"});
    transport_ = AddToken(daemon_.data_dir(), "transport", {"ingest"});
    a_ = AddToken(daemon_.data_dir(), "tenant-a", {"route", "read", "admin"}, "tenant-a");
    b_ = AddToken(daemon_.data_dir(), "tenant-b", {"route", "read", "admin"}, "tenant-b");
    kvgov::Status started = daemon_.Start({"--engine", engine_->EngineSpec(), "--probe-interval-ms",
                                           "50", "--witness-timeout-ms", "10000"});
    ASSERT_TRUE(started.ok()) << started.ToString();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", daemon_.port());
    ASSERT_TRUE(WaitFor(
        [&] {
          httplib::Result workers = client_->Get("/v1/workers", Bearer(fleet_));
          return workers && workers->status == 200 &&
                 Json::parse(workers->body)["workers"][0]["health"]["healthy"] == true;
        },
        std::chrono::seconds(10)));
  }

  Json Post(const std::string& secret, const std::string& path, const Json& body,
            int* status = nullptr) {
    httplib::Result result = client_->Post(path, Bearer(secret), body.dump(), "application/json");
    EXPECT_TRUE(result);
    if (status != nullptr) *status = result ? result->status : -1;
    return result ? Json::parse(result->body) : Json();
  }

  Json Get(const std::string& secret, const std::string& path, int* status = nullptr) {
    httplib::Result result = client_->Get(path, Bearer(secret));
    EXPECT_TRUE(result);
    if (status != nullptr) *status = result ? result->status : -1;
    return result ? Json::parse(result->body) : Json();
  }

  Json Route(const std::string& secret) {
    Json decision = Post(secret, "/v1/route", {{"model", "llama"}, {"token_ids", prompt_}});
    (void)client_->Post("/v1/route/" + decision.value("decision_id", "") + "/done", Bearer(secret),
                        "", "application/json");
    return decision;
  }

  std::unique_ptr<simfleet::LiveEngine> engine_;
  DaemonProcess daemon_;
  std::unique_ptr<httplib::Client> client_;
  std::string fleet_, transport_, a_, b_;
  std::vector<int64_t> prompt_ = [] {
    std::vector<int64_t> tokens(64);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>(i) * 7 + 3;
    return tokens;
  }();
};

TEST_F(TenantIsolationE2ETest, IdenticalPromptsShareNothingAcrossTenants) {
  // Tenant A's request fills the engine under A's salt.
  const Json first = Route(a_);
  const std::string salt_a = first.value("cache_salt", "");
  ASSERT_FALSE(salt_a.empty()) << first.dump();
  httplib::Client engine(engine_->control_url());
  ASSERT_EQ(HttpStatus(engine.Post("/v1/completions",
                                   Json{{"prompt", prompt_}, {"cache_salt", salt_a}}.dump(),
                                   "application/json")),
            200);
  ASSERT_TRUE(
      WaitFor([&] { return Route(a_).value("overlap_blocks", 0) == 4; }, std::chrono::seconds(10)));
  // The engine's events carried the salt among their extra keys.
  EXPECT_EQ(Get(fleet_, "/v1/workers")["workers"][0].value("salts", ""), "reported");

  // B, same prompt: a different salt and no overlap.
  const Json b_route = Route(b_);
  EXPECT_NE(b_route.value("cache_salt", ""), salt_a);
  EXPECT_EQ(b_route.value("overlap_blocks", -1), 0);
  int status = 0;
  Post(b_, "/v1/route", {{"model", "llama"}, {"tenant", "tenant-a"}, {"token_ids", prompt_}},
       &status);
  EXPECT_EQ(status, 403);
  // B cannot release A's decision, and is told no more than for a made-up id.
  const Json held = Post(a_, "/v1/route", {{"model", "llama"}, {"token_ids", prompt_}});
  const std::string held_id = held.value("decision_id", "");
  ASSERT_FALSE(held_id.empty()) << held.dump();
  Post(b_, "/v1/route/" + held_id + "/done", Json::object(), &status);
  EXPECT_EQ(status, 404);
  Post(a_, "/v1/route/" + held_id + "/done", Json::object(), &status);
  EXPECT_EQ(status, 200);
  // A client-chosen salt is refused outright (unknown field).
  Post(b_, "/v1/route", {{"model", "llama"}, {"cache_salt", salt_a}, {"token_ids", prompt_}},
       &status);
  EXPECT_EQ(status, 400);

  // Quarantine: A's is A's alone to see.
  const Json quarantined =
      Post(a_, "/v1/quarantine", {{"model", "llama"}, {"token_ids", prompt_}, {"reason", "test"}},
           &status);
  ASSERT_EQ(status, 200);
  EXPECT_FALSE(quarantined.contains("warning")) << quarantined.dump();  // a token names A
  EXPECT_TRUE(quarantined.contains("resident_blocks")) << quarantined.dump();
  EXPECT_EQ(Get(a_, "/v1/quarantines")["quarantines"].size(), 1u);
  EXPECT_EQ(Get(b_, "/v1/quarantines")["quarantines"].size(), 0u);
  EXPECT_EQ(Get(fleet_, "/v1/quarantines")["quarantines"].size(), 1u);
  // A tenant nothing knows of is most likely a typo: done, and said.
  const Json typo =
      Post(fleet_, "/v1/quarantine",
           {{"model", "llama"}, {"tenant", "tenant-aa"}, {"token_ids", prompt_}, {"reason", "x"}},
           &status);
  ASSERT_EQ(status, 200) << typo.dump();
  EXPECT_NE(typo.value("warning", "").find("tenant 'tenant-aa' is unknown"), std::string::npos)
      << typo.dump();
  EXPECT_EQ(typo["resident_blocks"], 0) << typo.dump();
  Post(b_, "/v1/quarantine",
       {{"model", "llama"}, {"tenant", "tenant-a"}, {"token_ids", prompt_}, {"reason", "x"}},
       &status);
  EXPECT_EQ(status, 403);
  Post(b_, "/v1/quarantine",
       {{"model", "llama"}, {"worker", "w1"}, {"block_hash", 1}, {"reason", "x"}}, &status);
  EXPECT_EQ(status, 403);

  // Invalidation and certificate: A's, invisible to B (404, as if absent).
  const Json opened =
      Post(a_, "/v1/invalidations",
           {{"model", "llama"}, {"token_ids", prompt_}, {"reason", "test"}}, &status);
  ASSERT_EQ(status, 202) << opened.dump();
  const std::string id = opened.value("id", "");
  Json directive;
  ASSERT_TRUE(WaitFor(
      [&] {
        directive = Get(a_, "/v1/invalidations/" + id);
        return directive.value("state", "") == "certified";
      },
      std::chrono::seconds(15)))
      << directive.dump();
  EXPECT_EQ(directive.value("tenant", ""), "tenant-a");
  Get(b_, "/v1/invalidations/" + id, &status);
  EXPECT_EQ(status, 404);
  const std::string certificate = directive.value("certificate_id", "");
  Get(a_, "/v1/certificates/" + certificate, &status);
  EXPECT_EQ(status, 200);
  Get(b_, "/v1/certificates/" + certificate, &status);
  EXPECT_EQ(status, 404);
  Get(b_, "/v1/certificates/" + certificate.substr(0, 8), &status);  // nor by prefix
  EXPECT_EQ(status, 404);
  Post(b_, "/v1/invalidations", {{"model", "llama"}, {"scope", "model"}, {"reason", "x"}}, &status);
  EXPECT_EQ(status, 403);

  // Leases carry no tenant: tenant-bound tokens see none.
  Post(transport_, "/v1/events",
       {{"events",
         {{{"type", "nixl_lease"},
           {"lease_id", "l1"},
           {"event", "create"},
           {"role", "prefill_pin"},
           {"remote_engine", "w1"},
           {"ttl_ms", 60000}}}}},
       &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(Get(fleet_, "/v1/leases")["leases"].size(), 1u);
  EXPECT_EQ(Get(a_, "/v1/leases")["leases"].size(), 0u);

  // Fleet-wide views are the fleet's.
  Get(a_, "/v1/journal", &status);
  EXPECT_EQ(status, 403);
  httplib::Result metrics = client_->Get("/metrics", Bearer(b_));
  EXPECT_EQ(HttpStatus(metrics), 403);
  const Json workers = Get(b_, "/v1/workers");
  ASSERT_EQ(workers["workers"].size(), 1u);
  EXPECT_FALSE(workers["workers"][0].contains("blocks"));
  EXPECT_TRUE(Get(fleet_, "/v1/workers")["workers"][0].contains("blocks"));

  // Revocation (ADR 0028): a tenant-bound admin revokes its own tenant only.
  const Json revocation = {{"scope", "tenant"}, {"tenant", "tenant-a"}, {"reason", "offboarded"}};
  Post(b_, "/v1/invalidations", revocation, &status);
  EXPECT_EQ(status, 403);
  const Json revoked = Post(a_, "/v1/invalidations", revocation, &status);
  ASSERT_EQ(status, 202) << revoked.dump();
  const Json revoked_directive = Get(a_, "/v1/invalidations/" + revoked.value("id", ""));
  EXPECT_EQ(revoked_directive.value("tenant", ""), "tenant-a") << revoked_directive.dump();
  EXPECT_EQ(Route(a_).value("overlap_blocks", -1), 0);  // its blocks are out of reach
  Get(b_, "/v1/invalidations/" + revoked.value("id", ""), &status);
  EXPECT_EQ(status, 404);
}

// Every journal row says who made it: the caller's token by name (never its
// secret), kvgov for its own decisions, and the token file for tokens
// added or revoked there, at start and while running.
TEST_F(TenantIsolationE2ETest, EveryJournalRowNamesWhoMadeIt) {
  httplib::Client engine(engine_->control_url());
  ASSERT_EQ(HttpStatus(engine.Post("/v1/completions", Json{{"prompt", prompt_}}.dump(),
                                   "application/json")),
            200);
  ASSERT_TRUE(WaitFor([&] { return Route(fleet_).value("overlap_blocks", 0) == 4; },
                      std::chrono::seconds(10)));
  int status = 0;
  const Json quarantined = Post(
      a_, "/v1/quarantine", {{"model", "llama"}, {"token_ids", prompt_}, {"reason", "q"}}, &status);
  ASSERT_EQ(status, 200) << quarantined.dump();
  Post(fleet_, "/v1/quarantines/" + quarantined.value("id", "") + "/lift", {{"reason", "ok"}},
       &status);
  ASSERT_EQ(status, 200);
  Post(fleet_, "/v1/workers/w1/drain", Json::object(), &status);
  ASSERT_EQ(status, 200);
  ASSERT_EQ(HttpStatus(client_->Delete("/v1/workers/w1/drain", Bearer(fleet_))), 200);
  Post(transport_, "/v1/events",
       {{"events",
         {{{"type", "nixl_lease"},
           {"lease_id", "l9"},
           {"event", "create"},
           {"role", "prefill_pin"},
           {"remote_engine", "w1"},
           {"ttl_ms", 60000}}}}},
       &status);
  ASSERT_EQ(status, 200);
  // The engine holds the prompt unsalted: the fleet's span.
  const Json opened = Post(fleet_, "/v1/invalidations",
                           {{"model", "llama"}, {"token_ids", prompt_}, {"reason", "i"}}, &status);
  ASSERT_EQ(status, 202) << opened.dump();
  Json directive;
  ASSERT_TRUE(WaitFor(
      [&] {
        directive = Get(fleet_, "/v1/invalidations/" + opened.value("id", ""));
        return directive.value("state", "") == "certified";
      },
      std::chrono::seconds(15)))
      << directive.dump();
  std::string revoked;
  ASSERT_EQ(DaemonProcess::RunToExit(
                {"token", "revoke", "tenant-b", "--data-dir", daemon_.data_dir()}, &revoked),
            0)
      << revoked;

  // kind -> the actors of its rows.
  std::map<std::string, std::set<std::string>> actors;
  Json rows;
  ASSERT_TRUE(WaitFor(
      [&] {
        rows = Get(fleet_, "/v1/journal?limit=1000")["rows"];
        actors.clear();
        for (const Json& row : rows) actors[row["kind"]].insert(row["actor"]);
        return actors.contains("token.revoke") && actors.contains("certificate");
      },
      std::chrono::seconds(5)))
      << rows.dump();
  for (const Json& row : rows) {
    EXPECT_FALSE(row.value("actor", "").empty()) << row.dump();
    EXPECT_EQ(row.value("origin", "x"), "") << row.dump();  // a single node
  }
  using Actors = std::set<std::string>;
  EXPECT_EQ(actors["serve.start"], Actors{"kvgov"});
  // The four tokens made before the data dir's first start: a baseline.
  EXPECT_EQ(actors["token.baseline"], Actors{"token-file"});
  EXPECT_FALSE(actors.contains("token.add"));
  EXPECT_EQ(actors["token.revoke"], Actors{"token-file"});
  EXPECT_EQ(actors["quarantine"], Actors{"token:tenant-a"});
  EXPECT_EQ(actors["quarantine.lift"], Actors{"token:operator"});
  EXPECT_EQ(actors["worker.drain"], Actors{"token:operator"});
  EXPECT_EQ(actors["worker.undrain"], Actors{"token:operator"});
  EXPECT_EQ(actors["lease.transition"], Actors{"token:transport"});
  EXPECT_EQ(actors["invalidation.planned"], Actors{"token:operator"});
  EXPECT_EQ(actors["invalidation.witnessed"], Actors{"kvgov"});
  EXPECT_EQ(actors["certificate"], Actors{"kvgov"});
  size_t baseline = 0;
  for (const Json& row : rows) {
    if (row["kind"] != "token.baseline") continue;
    ++baseline;
    const Json payload = Json::parse(row["payload"].get<std::string>());
    EXPECT_FALSE(payload.contains("sha256")) << payload.dump();
    EXPECT_TRUE(payload.contains("roles")) << payload.dump();
  }
  EXPECT_EQ(baseline, 4u);
  for (const std::string& secret : {fleet_, transport_, a_, b_}) {
    EXPECT_EQ(rows.dump().find(secret.substr(6)), std::string::npos);
  }

  // A restart journals nothing twice: the recorded token set is durable.
  // Made while kvgov was down: a token added, and one's secret replaced by
  // hand under the same name (a revoke and an add).
  ASSERT_EQ(daemon_.Stop(), 0);
  const std::string late = AddToken(daemon_.data_dir(), "late", {"read"});
  const std::string token_file = daemon_.data_dir() + "/tokens.json";
  Json file;
  {
    std::ifstream in(token_file);
    file = Json::parse(in);
  }
  for (Json& record : file["tokens"]) {
    if (record["name"] == "transport") record["sha256"] = std::string(64, 'a');
  }
  std::ofstream(token_file, std::ios::trunc) << file.dump(1);
  ASSERT_TRUE(daemon_.Start({"--engine", engine_->EngineSpec()}).ok());
  client_ = std::make_unique<httplib::Client>("127.0.0.1", daemon_.port());
  const Json after = Get(fleet_, "/v1/journal?limit=1000")["rows"];
  std::vector<std::string> changes;
  for (const Json& row : after) {
    if (row["kind"] == "token.add" || row["kind"] == "token.revoke") {
      changes.push_back(row["kind"].get<std::string>() + " " + row["subject"].get<std::string>());
    }
  }
  EXPECT_EQ(changes, (std::vector<std::string>{"token.revoke tenant-b", "token.revoke transport",
                                               "token.add late", "token.add transport"}))
      << after.dump();
  EXPECT_EQ(after.dump().find(std::string(64, 'a')), std::string::npos);  // no hash in a row
}

// An engine that honours cache_salt but publishes no extra keys (vLLM
// before extra_keys, vllm#33304): the salted requests the gateway sends come
// back unsalted. kvgov says so, indexes none of their blocks (an unsalted
// route would be credited with blocks the engine will not reuse for it),
// and sends no tenant's route there again. ADR 0019.
TEST(SaltCapabilityE2ETest, AnEngineThatDropsSaltsTakesNoTenantRoutes) {
  simfleet::LiveEngineOptions options;
  options.id = "w1";
  options.model = "llama";
  options.pool.capacity_blocks = 256;
  options.pool.block_size = 16;
  options.speedup = 1000;
  options.publishes_extra_keys = false;
  Result<std::unique_ptr<simfleet::LiveEngine>> engine = simfleet::LiveEngine::Start(options);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  DaemonProcess daemon;
  const std::string fleet = AddToken(daemon.data_dir(), "operator", {"admin", "read", "route"});
  const std::string tenant =
      AddToken(daemon.data_dir(), "tenant-a", {"route", "infer"}, "tenant-a");
  const std::string ready = (daemon.dir() / "gateway-ready").string();
  ASSERT_TRUE(daemon
                  .Start({"--engine", (*engine)->EngineSpec(), "--gateway-listen", "127.0.0.1:0",
                          "--gateway-ready-file", ready, "--probe-interval-ms", "50"})
                  .ok());
  int gateway_port = 0;
  ASSERT_TRUE(WaitFor([&] {
    std::ifstream in(ready);
    return static_cast<bool>(in >> gateway_port) && gateway_port > 0;
  }));
  httplib::Client client("127.0.0.1", daemon.port());
  httplib::Client gateway("127.0.0.1", gateway_port);
  auto workers = [&] {
    httplib::Result answer = client.Get("/v1/workers", Bearer(fleet));
    return answer && answer->status == 200 ? Json::parse(answer->body)["workers"] : Json::array();
  };
  ASSERT_TRUE(WaitFor([&] {
    const Json listed = workers();
    return listed.size() == 1 && listed[0]["health"]["healthy"] == true;
  }));
  EXPECT_EQ(workers()[0].value("salts", ""), "unknown");

  // Two of the tenant's requests (one could be a coincidence).
  auto prompt = [](int64_t start) {
    std::vector<int64_t> tokens(64);
    std::iota(tokens.begin(), tokens.end(), start);
    return tokens;
  };
  for (int64_t start : {40000, 50000}) {
    httplib::Result answer =
        gateway.Post("/v1/completions", Bearer(tenant),
                     Json{{"model", "llama"}, {"prompt", prompt(start)}, {"max_tokens", 1}}.dump(),
                     "application/json");
    ASSERT_EQ(HttpStatus(answer), 200) << (answer ? answer->body : "");
  }
  EXPECT_EQ((*engine)->received_salts().size(), 2u);
  Json worker;
  ASSERT_TRUE(WaitFor(
      [&] {
        worker = workers()[0];
        return worker.value("salts", "") == "not_reported";
      },
      std::chrono::seconds(10)))
      << worker.dump();
  EXPECT_EQ(worker["diagnostics"]["salt_blind_blocks"], 8) << worker.dump();
  EXPECT_EQ(worker["blocks"]["hbm"], 0) << worker.dump();

  // The tenant's next route has nowhere to go, and says why.
  const Json route = {{"model", "llama"}, {"token_ids", prompt(40000)}};
  httplib::Result again =
      client.Post("/v1/route", Bearer(tenant), route.dump(), "application/json");
  ASSERT_EQ(HttpStatus(again), 503) << (again ? again->body : "");
  EXPECT_EQ(Json::parse(again->body)["candidates"][0].value("reason", ""), "salt_blind")
      << again->body;
  // An unsalted route of the same prompt is credited nothing: the engine
  // holds those blocks under the tenant's salt only.
  httplib::Result unsalted =
      client.Post("/v1/route", Bearer(fleet), route.dump(), "application/json");
  ASSERT_EQ(HttpStatus(unsalted), 200) << (unsalted ? unsalted->body : "");
  EXPECT_EQ(Json::parse(unsalted->body).value("overlap_blocks", -1), 0) << unsalted->body;
  httplib::Result metrics = client.Get("/metrics", Bearer(fleet));
  ASSERT_EQ(HttpStatus(metrics), 200);
  EXPECT_NE(metrics->body.find(R"(kvgov_engine_salts{worker="w1",state="not_reported"} 1)"),
            std::string::npos);
  EXPECT_NE(metrics->body.find(R"(kvgov_engine_salt_blind_blocks_total{worker="w1"} 8)"),
            std::string::npos);
}

}  // namespace
}  // namespace kvgov::testing
