// An invalidation directive end to end: vLLM- and SGLang-shaped owners
// (real HTTP servers) reset their caches and their publishers (real ZeroMQ)
// report the removal; kvgov witnesses it, certifies, and the certificate
// verifies offline. A removal that never comes ends in witness_timeout.

#include <httplib.h>

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <thread>

#include "e2e/daemon_process.h"
#include "e2e/fake_control.h"
#include "e2e/fake_engine_publisher.h"
#include "e2e/wait.h"

namespace kvgov::testing {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;

constexpr int64_t kBlockSize = 4;

TEST(InvalidationE2ETest, DirectiveIsWitnessedCertifiedAndVerifiesOffline) {
  FakeEnginePublisher vllm(kBlockSize);
  FakeEnginePublisher sglang(kBlockSize);
  FakeControl vllm_control("/reset_prefix_cache", [&] { vllm.Clear(); });
  FakeControl sglang_control(
      "/flush_cache", [&] { sglang.Clear(); }, /*busy_answers=*/2);
  DaemonProcess daemon;
  ASSERT_TRUE(daemon
                  .Start({"--engine", EngineArg("w1", "vllm", vllm, vllm_control, kBlockSize),
                          "--engine", EngineArg("w2", "sglang", sglang, sglang_control, kBlockSize),
                          "--probe-interval-ms", "50"})
                  .ok())
      << daemon.Stderr();
  ASSERT_TRUE(vllm.WaitForSubscriber(milliseconds(20000)));
  ASSERT_TRUE(sglang.WaitForSubscriber(milliseconds(20000)));
  httplib::Client client("127.0.0.1", daemon.port());

  vllm.Store(std::nullopt, 2, 100);
  sglang.Store(std::nullopt, 2, 100);
  ASSERT_TRUE(WaitFor([&] {
    Json workers = Json::parse(client.Get("/v1/workers")->body)["workers"];
    return workers.size() == 2 && workers[0]["blocks"]["hbm"] == 2 &&
           workers[1]["blocks"]["hbm"] == 2;
  }));

  httplib::Result created = client.Post(
      "/v1/invalidations",
      Json({{"model", "llama"}, {"token_ids", Tokens(8, 100)}, {"reason", "poisoned_kv"}}).dump(),
      "application/json");
  ASSERT_EQ(created->status, 202) << created->body;
  const Json answer = Json::parse(created->body);
  const std::string id = answer["id"];
  // The answer names the engines it goes to, as the directive's record does.
  std::set<std::string> answered_owners;
  for (const Json& owner : answer["owners"]) {
    answered_owners.insert(owner["worker"].get<std::string>());
  }
  EXPECT_EQ(answered_owners, (std::set<std::string>{"w1", "w2"})) << created->body;

  Json directive;
  ASSERT_TRUE(WaitFor([&] {
    directive = Json::parse(client.Get("/v1/invalidations/" + id)->body);
    return directive["state"] == "certified" || directive["state"] == "failed";
  })) << directive.dump();
  ASSERT_EQ(directive["state"], "certified") << directive.dump() << daemon.Stderr();
  EXPECT_EQ(directive["targets"], 4);
  EXPECT_EQ(sglang_control.calls(), 3);  // two 400s, then the flush
  for (const Json& owner : directive["owners"]) {
    EXPECT_EQ(owner["state"], "witnessed");
    EXPECT_EQ(owner["witness_kind"], "all_blocks_cleared");
    EXPECT_EQ(owner["scope"], "whole_prefix_cache");
    EXPECT_EQ(owner["degraded"], true);
  }

  const std::string cert_id = directive["certificate_id"];
  httplib::Result certificate = client.Get("/v1/certificates/" + cert_id);
  ASSERT_EQ(certificate->status, 200);
  // The 16-digit prefix the demo prints finds it too; 7 digits are too few.
  httplib::Result by_prefix = client.Get("/v1/certificates/" + cert_id.substr(0, 16));
  ASSERT_EQ(by_prefix->status, 200);
  EXPECT_EQ(by_prefix->body, certificate->body);
  EXPECT_EQ(client.Get("/v1/certificates/" + cert_id.substr(0, 7))->status, 404);
  const std::string issuer_key = Json::parse(client.Get("/v1/issuer")->body)["public_key"];
  // The governance metrics count it (docs/formats/governance-api.md).
  const std::string metrics = client.Get("/metrics")->body;
  EXPECT_NE(metrics.find("kvgov_certificates_total{outcome=\"issued\"} 1\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvgov_certificates_total{outcome=\"failed\"} 0\n"), std::string::npos);
  EXPECT_NE(metrics.find("kvgov_invalidations{state=\"certified\"} 1\n"), std::string::npos);
  EXPECT_NE(metrics.find("kvgov_invalidations{state=\"failed\"} 0\n"), std::string::npos);
  ASSERT_EQ(daemon.Stop(), 0);

  const std::filesystem::path cert_file = daemon.dir() / "cert.json";
  std::ofstream(cert_file) << certificate->body;
  std::string output;
  EXPECT_EQ(DaemonProcess::RunToExit({"cert", "verify", cert_file.string(), "--data-dir",
                                      (daemon.dir() / "data").string()},
                                     &output),
            0)
      << output;
  EXPECT_EQ(DaemonProcess::RunToExit(
                {"cert", "verify", cert_file.string(), "--issuer-key", issuer_key}, &output),
            0)
      << output;

  // Any change to a signed field fails verification.
  Json tampered = Json::parse(certificate->body);
  tampered["target_count"] = 3;
  std::ofstream(cert_file) << tampered.dump();
  EXPECT_EQ(DaemonProcess::RunToExit(
                {"cert", "verify", cert_file.string(), "--issuer-key", issuer_key}, &output),
            1)
      << output;
  EXPECT_EQ(DaemonProcess::RunToExit(
                {"journal", "verify", "--data-dir", (daemon.dir() / "data").string()}, &output),
            0)
      << output;
}

TEST(InvalidationE2ETest, LmcacheAndExactSpanWebhookOwners) {
  FakeEnginePublisher lmcache(kBlockSize);
  FakeEnginePublisher exact(kBlockSize);
  std::vector<uint64_t> exact_hashes;
  // LMCache's controller clears the instance; the exact-span owner removes
  // precisely the named blocks and publishes BlockRemoved for them.
  FakeControl lmcache_control("/clear", [&] { lmcache.Clear(); });
  FakeControl webhook("/evict", [&] { exact.Remove(exact_hashes); });
  DaemonProcess daemon;
  ASSERT_TRUE(daemon
                  .Start({"--engine",
                          EngineArg("w1", "vllm", lmcache, lmcache_control, kBlockSize) +
                              ",connector=lmcache",
                          "--engine",
                          EngineArg("w2", "vllm", exact, webhook, kBlockSize) +
                              ",connector=webhook,connector-path=/evict",
                          "--probe-interval-ms", "50"})
                  .ok())
      << daemon.Stderr();
  ASSERT_TRUE(lmcache.WaitForSubscriber(milliseconds(20000)));
  ASSERT_TRUE(exact.WaitForSubscriber(milliseconds(20000)));
  httplib::Client client("127.0.0.1", daemon.port());
  lmcache.Store(std::nullopt, 1, 100);
  exact_hashes = exact.Store(std::nullopt, 1, 100);
  ASSERT_TRUE(WaitFor([&] {
    Json workers = Json::parse(client.Get("/v1/workers")->body)["workers"];
    return workers.size() == 2 && workers[0]["blocks"]["hbm"] == 1 &&
           workers[1]["blocks"]["hbm"] == 1;
  }));
  httplib::Result created =
      client.Post("/v1/invalidations",
                  Json({{"model", "llama"}, {"token_ids", Tokens(4, 100)}, {"reason", "r"}}).dump(),
                  "application/json");
  ASSERT_EQ(created->status, 202);
  const std::string id = Json::parse(created->body)["id"];
  Json directive;
  ASSERT_TRUE(WaitFor([&] {
    directive = Json::parse(client.Get("/v1/invalidations/" + id)->body);
    return directive["state"] == "certified" || directive["state"] == "failed";
  }));
  ASSERT_EQ(directive["state"], "certified") << directive.dump();
  std::map<std::string, Json> owners;
  for (const Json& owner : directive["owners"]) owners[owner["worker"]] = owner;
  EXPECT_EQ(owners["w1"]["connector"], "lmcache");
  EXPECT_EQ(owners["w1"]["witness_kind"], "all_blocks_cleared");
  EXPECT_EQ(owners["w2"]["connector"], "webhook");
  EXPECT_EQ(owners["w2"]["scope"], "exact_span");
  EXPECT_EQ(owners["w2"]["degraded"], false);
  EXPECT_EQ(owners["w2"]["witness_kind"], "block_removed");
}

TEST(InvalidationE2ETest, RemovalThatNeverComesEndsInWitnessTimeout) {
  FakeEnginePublisher vllm(kBlockSize);
  FakeControl silent("/reset_prefix_cache", [] {});  // says yes, removes nothing
  DaemonProcess daemon;
  ASSERT_TRUE(daemon
                  .Start({"--engine", EngineArg("w1", "vllm", vllm, silent, kBlockSize),
                          "--witness-timeout-ms", "300", "--probe-interval-ms", "50"})
                  .ok());
  ASSERT_TRUE(vllm.WaitForSubscriber(milliseconds(20000)));
  httplib::Client client("127.0.0.1", daemon.port());
  vllm.Store(std::nullopt, 1, 100);
  ASSERT_TRUE(WaitFor([&] {
    return Json::parse(client.Get("/v1/workers")->body)["workers"][0]["blocks"]["hbm"] == 1;
  }));
  httplib::Result created =
      client.Post("/v1/invalidations",
                  Json({{"model", "llama"}, {"token_ids", Tokens(4, 100)}, {"reason", "r"}}).dump(),
                  "application/json");
  ASSERT_EQ(created->status, 202);
  const std::string id = Json::parse(created->body)["id"];
  Json directive;
  ASSERT_TRUE(WaitFor([&] {
    directive = Json::parse(client.Get("/v1/invalidations/" + id)->body);
    return directive["state"] == "failed";
  })) << directive.dump();
  EXPECT_EQ(directive["failure"], "witness_timeout");
  EXPECT_EQ(directive["certificate_id"], "");
  const std::string metrics = client.Get("/metrics")->body;
  EXPECT_NE(metrics.find("kvgov_invalidations{state=\"failed\"} 1\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvgov_certificates_total{outcome=\"issued\"} 0\n"), std::string::npos);
  // Nobody saw the blocks go: they still earn no route credit.
  Json route = Json::parse(
      client
          .Post("/v1/route", Json({{"model", "llama"}, {"token_ids", Tokens(4, 100)}}).dump(),
                "application/json")
          ->body);
  EXPECT_EQ(route["overlap_blocks"], 0);
  EXPECT_EQ(route["candidates"][0]["resident_blocks"], 1);
}

// An engine that restarts after kvgov's flush call, instead of publishing
// AllBlocksCleared (issue 41): its new process numbers its batches from 0,
// below the seq the call was made at, and holds none of the old cache. The
// restart witnesses the whole-worker directive, and the certificate says
// so; before, it waited out witness_timeout.
TEST(InvalidationE2ETest, AnEngineRestartAfterTheFlushWitnessesAWholeWorkerDirective) {
  FakeEnginePublisher vllm(kBlockSize);
  FakeControl control("/reset_prefix_cache", [] {});  // accepts; the engine then restarts
  DaemonProcess daemon;
  ASSERT_TRUE(daemon
                  .Start({"--engine", EngineArg("w1", "vllm", vllm, control, kBlockSize),
                          "--witness-timeout-ms", "20000", "--probe-interval-ms", "50"})
                  .ok());
  ASSERT_TRUE(vllm.WaitForSubscriber(milliseconds(20000)));
  httplib::Client client("127.0.0.1", daemon.port());
  for (int prefix = 0; prefix < 5; ++prefix) vllm.Store(std::nullopt, 1, 100 + 10 * prefix);
  ASSERT_TRUE(WaitFor([&] {
    return Json::parse(client.Get("/v1/workers")->body)["workers"][0]["blocks"]["hbm"] == 5;
  }));
  httplib::Result created = client.Post(
      "/v1/invalidations",
      Json({{"model", "llama"}, {"scope", "worker"}, {"worker", "w1"}, {"reason", "r"}}).dump(),
      "application/json");
  ASSERT_EQ(created->status, 202) << created->body;
  const std::string id = Json::parse(created->body)["id"];
  ASSERT_TRUE(WaitFor([&] { return control.calls() >= 1; }));
  Json directive;
  ASSERT_TRUE(WaitFor([&] {
    directive = Json::parse(client.Get("/v1/invalidations/" + id)->body);
    return directive["state"] == "acknowledged";
  })) << directive.dump();

  vllm.Restart();
  vllm.Store(std::nullopt, 1, 900);  // seq 0 of the new process
  ASSERT_TRUE(WaitFor([&] {
    directive = Json::parse(client.Get("/v1/invalidations/" + id)->body);
    return directive["state"] == "certified" || directive["state"] == "failed";
  })) << directive.dump();
  ASSERT_EQ(directive["state"], "certified") << directive.dump() << daemon.Stderr();
  EXPECT_EQ(directive["owners"][0]["witness_kind"], "engine_restart");
  const Json certificate = Json::parse(
      client.Get("/v1/certificates/" + directive["certificate_id"].get<std::string>())->body);
  EXPECT_EQ(certificate["owners"][0]["witness"],
            Json({{"event_seqs", {0}}, {"kind", "engine_restart"}}))
      << certificate.dump();
}

// A directive waiting for its witness survives a crash of kvgov: its owners
// and their targets come back, the targets still earn no credit, the owner
// that acknowledged is not called again, and the removal the engine
// publishes while kvgov is down witnesses it, caught up through replay.
TEST(InvalidationE2ETest, AWaitingDirectiveSurvivesARestartAndIsWitnessedByTheCatchUp) {
  FakeEnginePublisher vllm(kBlockSize);
  FakeControl control("/reset_prefix_cache", [] {});  // accepts, removes nothing yet
  DaemonProcess daemon;
  const std::vector<std::string> args = {"--engine",
                                         EngineArg("w1", "vllm", vllm, control, kBlockSize),
                                         "--probe-interval-ms",
                                         "50",
                                         "--witness-timeout-ms",
                                         "60000"};
  ASSERT_TRUE(daemon.Start(args).ok()) << daemon.Stderr();
  ASSERT_TRUE(vllm.WaitForSubscriber(milliseconds(20000)));
  auto client = std::make_unique<httplib::Client>("127.0.0.1", daemon.port());
  vllm.Store(std::nullopt, 2, 100);
  ASSERT_TRUE(WaitFor([&] {
    Json workers = Json::parse(client->Get("/v1/workers")->body)["workers"];
    return workers[0]["blocks"]["hbm"] == 2 && workers[0]["health"]["healthy"] == true;
  }));
  httplib::Result created = client->Post(
      "/v1/invalidations",
      Json({{"model", "llama"}, {"token_ids", Tokens(8, 100)}, {"reason", "poisoned_kv"}}).dump(),
      "application/json");
  ASSERT_EQ(created->status, 202) << created->body;
  const std::string id = Json::parse(created->body)["id"];
  auto directive = [&] { return Json::parse(client->Get("/v1/invalidations/" + id)->body); };
  auto credited = [&] {
    Json decision = Json::parse(
        client
            ->Post("/v1/route", Json({{"model", "llama"}, {"token_ids", Tokens(8, 100)}}).dump(),
                   "application/json")
            ->body);
    return decision["candidates"][0]["overlap_blocks"].get<int64_t>();
  };
  ASSERT_TRUE(WaitFor([&] { return directive()["state"] == "acknowledged"; }))
      << directive().dump();
  EXPECT_EQ(credited(), 0);

  daemon.Kill();
  ASSERT_TRUE(daemon.Start(args).ok()) << daemon.Stderr();
  client = std::make_unique<httplib::Client>("127.0.0.1", daemon.port());
  Json resumed = directive();
  EXPECT_EQ(resumed["state"], "acknowledged") << resumed.dump();
  ASSERT_EQ(resumed["owners"].size(), 1u) << resumed.dump();
  EXPECT_EQ(resumed["owners"][0]["worker"], "w1");
  EXPECT_EQ(resumed["owners"][0]["pending"], 2);
  EXPECT_EQ(resumed["targets"], 2);
  EXPECT_EQ(credited(), 0);  // resident, but not credited until witnessed
  ASSERT_EQ(daemon.Stop(), 0) << daemon.Stderr();

  vllm.Clear();  // the engine resets while kvgov is down: nobody hears it live
  ASSERT_TRUE(daemon.Start(args).ok()) << daemon.Stderr();
  client = std::make_unique<httplib::Client>("127.0.0.1", daemon.port());
  Json done;
  ASSERT_TRUE(WaitFor([&] {
    done = directive();
    return done["state"] == "certified" || done["state"] == "failed";
  })) << done.dump();
  EXPECT_EQ(done["state"], "certified") << done.dump() << daemon.Stderr();
  EXPECT_EQ(done["owners"][0]["witness_kind"], "all_blocks_cleared");
  EXPECT_EQ(control.calls(), 1);  // acknowledged once; never called again
  EXPECT_EQ(daemon.Stop(), 0) << daemon.Stderr();
}

}  // namespace
}  // namespace kvgov::testing
