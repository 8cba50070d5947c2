// Governance the engine obeys (docs/adr/0028), against the real binary:
// simulated vLLM engines whose prefix cache is keyed by cache_salt and
// whose events carry extra_keys, kvgov's gateway in front of them. What is
// asserted is what the *engine* reused: the cached_tokens of its own usage.

#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "connectors/test_support.h"
#include "e2e/bearer.h"
#include "e2e/daemon_process.h"
#include "e2e/gateway_daemon.h"
#include "e2e/tokens.h"
#include "e2e/wait.h"
#include "kvgov/simfleet/live_engine.h"

namespace kvgov::testing {
namespace {

using Json = nlohmann::json;

constexpr int64_t kBlockSize = 16;

class EnforcementE2ETest : public ::testing::Test {
 protected:
  // Two engines of `capacity_blocks` each.
  void StartEngines(size_t capacity_blocks) {
    for (const char* id : {"w1", "w2"}) {
      simfleet::LiveEngineOptions options;
      options.id = id;
      options.model = "llama";
      options.pool.capacity_blocks = capacity_blocks;
      options.pool.block_size = kBlockSize;
      options.speedup = 1000;
      Result<std::unique_ptr<simfleet::LiveEngine>> engine = simfleet::LiveEngine::Start(options);
      ASSERT_TRUE(engine.ok()) << engine.status().ToString();
      engines_.push_back(std::move(engine).value());
    }
  }

  void StartKvgov() {
    std::vector<std::string> specs;
    for (const auto& engine : engines_) specs.push_back(engine->EngineSpec());
    const int gateway_port = StartGatewayDaemon(daemon_, specs);
    ASSERT_NE(gateway_port, 0);
    control_ = std::make_unique<httplib::Client>("127.0.0.1", daemon_.port());
    gateway_ = std::make_unique<httplib::Client>("127.0.0.1", gateway_port);
    gateway_->set_read_timeout(std::chrono::seconds(10));
  }

  // Sends `prompt` for `tenant` ("" for none) and returns the tokens the
  // engine reported it reused; -1 when the request failed.
  int64_t Cached(const std::string& tenant, const std::vector<int64_t>& prompt) {
    httplib::Headers headers;
    if (!tenant.empty()) headers.emplace("X-Kvgov-Tenant", tenant);
    const Json body = {{"model", "llama"}, {"prompt", prompt}, {"max_tokens", 1}};
    httplib::Result answer =
        gateway_->Post("/v1/completions", headers, body.dump(), "application/json");
    last_status_ = HttpStatus(answer);
    last_body_ = answer ? answer->body : "";
    if (last_status_ != 200) return -1;
    const Json usage = Json::parse(answer->body)["usage"];
    return usage["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  }

  httplib::Result Control(const std::string& path, const Json& body) {
    return control_->Post(path, body.dump(), "application/json");
  }

  // The value of one sample on /metrics; 0 when absent.
  double Metric(const std::string& sample) {
    httplib::Result metrics = control_->Get("/metrics");
    if (!metrics) return -1;
    const size_t at = metrics->body.find("\n" + sample + " ");
    if (at == std::string::npos) return 0;
    return std::stod(metrics->body.substr(at + sample.size() + 2));
  }

  // Every salt the engines received, "" for none.
  std::set<std::string> SaltsReceived() const {
    std::set<std::string> salts;
    for (const auto& engine : engines_) {
      for (const std::string& salt : engine->received_salts()) salts.insert(salt);
    }
    return salts;
  }

  // Waits until some worker's events proved it keys by the salt (a
  // tenant's request came back with its salt in extra_keys): diverted
  // requests go only there.
  bool SaltsReported() {
    return WaitFor([&] {
      httplib::Result workers = control_->Get("/v1/workers");
      if (!workers || workers->status != 200) return false;
      last_body_ = workers->body;
      const Json rows = Json::parse(workers->body);
      for (const Json& worker : rows["workers"]) {
        if (worker.value("salts", "") == "reported") return true;
      }
      return false;
    });
  }

  Json Directive(const std::string& id) {
    httplib::Result got = control_->Get("/v1/invalidations/" + id);
    return got && got->status == 200 ? Json::parse(got->body) : Json();
  }

  std::vector<std::unique_ptr<simfleet::LiveEngine>> engines_;
  DaemonProcess daemon_;
  std::unique_ptr<httplib::Client> control_;
  std::unique_ptr<httplib::Client> gateway_;
  int last_status_ = 0;
  std::string last_body_;
};

TEST_F(EnforcementE2ETest, AQuarantineKeepsTheEngineFromReusingTheSpanAndNothingElse) {
  StartEngines(512);
  StartKvgov();
  const std::vector<int64_t> poisoned = Tokens(64, 1000);
  const std::vector<int64_t> other = Tokens(64, 5000);
  // Each engine reuses what each tenant computed before, under its salt.
  for (const char* tenant : {"acme", "globex"}) {
    ASSERT_EQ(Cached(tenant, poisoned), 0) << last_body_;
    ASSERT_EQ(Cached(tenant, poisoned), 64) << last_body_;
  }
  ASSERT_EQ(Cached("acme", other), 0);
  ASSERT_EQ(Cached("", poisoned), 0);
  ASSERT_EQ(Cached("", poisoned), 64);
  ASSERT_TRUE(SaltsReported()) << last_body_;
  const std::set<std::string> ordinary = SaltsReceived();
  ASSERT_EQ(ordinary.size(), 3u);  // acme's, globex's, none

  httplib::Result quarantined = Control(
      "/v1/quarantine",
      {{"model", "llama"}, {"tenant", "acme"}, {"token_ids", poisoned}, {"reason", "poisoned"}});
  ASSERT_EQ(HttpStatus(quarantined), 200) << (quarantined ? quarantined->body : "");
  const std::string quarantine = Json::parse(quarantined->body)["id"];

  // acme's next request crossing the span is recomputed once, under a
  // diverted salt; the one after reuses that clean recomputation.
  EXPECT_EQ(Cached("acme", poisoned), 0) << last_body_;
  EXPECT_EQ(Cached("acme", poisoned), 64) << last_body_;
  std::set<std::string> diverted;
  for (const std::string& salt : SaltsReceived()) {
    if (!ordinary.contains(salt)) diverted.insert(salt);
  }
  ASSERT_EQ(diverted.size(), 1u);
  // It extends acme's ordinary salt, so acme's revocation finds it too.
  bool extends_acme = false;
  for (const std::string& salt : ordinary) {
    extends_acme |= !salt.empty() && diverted.begin()->starts_with(salt + ".");
  }
  EXPECT_TRUE(extends_acme) << *diverted.begin();
  EXPECT_EQ(Metric("kvgov_quarantine_diversions_total{model=\"llama\",tenant=\"acme\"}"), 2);
  // A prompt that only shares the span's leading blocks crosses it too.
  std::vector<int64_t> extended = poisoned;
  for (int64_t token : Tokens(32, 9000)) extended.push_back(token);
  EXPECT_EQ(Cached("acme", extended), 64);  // the clean copy, not the poisoned one

  // The rest of the fleet keeps its cache: acme's other prompts, another
  // tenant's copy of the same span, untenanted requests. No engine flushed.
  EXPECT_EQ(Cached("acme", other), 64);
  EXPECT_EQ(Cached("globex", poisoned), 64);
  EXPECT_EQ(Cached("", poisoned), 64);
  EXPECT_EQ(Metric("kvgov_quarantine_diversions_total{model=\"llama\",tenant=\"globex\"}"), 0);

  // A quarantine of the untenanted span diverts untenanted requests too.
  ASSERT_EQ(HttpStatus(
                Control("/v1/quarantine",
                        {{"model", "llama"}, {"token_ids", poisoned}, {"reason", "poisoned too"}})),
            200);
  EXPECT_EQ(Cached("", poisoned), 0);
  EXPECT_EQ(Cached("", poisoned), 64);
  EXPECT_EQ(Metric("kvgov_quarantine_diversions_total{model=\"llama\",tenant=\"none\"}"), 2);

  // /v1/route hands out the diverted salt and says why.
  httplib::Result routed =
      Control("/v1/route", {{"model", "llama"}, {"tenant", "acme"}, {"token_ids", poisoned}});
  ASSERT_EQ(HttpStatus(routed), 200) << (routed ? routed->body : "");
  const Json decision = Json::parse(routed->body);
  EXPECT_EQ(decision["cache_salt"], *diverted.begin());
  EXPECT_EQ(decision["verdict"]["kind"], "quarantine");
  EXPECT_EQ(decision["verdict"]["reason"], "diverted");

  // Lifted, acme's requests go back to its ordinary salt and its own cache.
  ASSERT_EQ(
      HttpStatus(Control("/v1/quarantines/" + quarantine + "/lift", {{"reason", "a false alarm"}})),
      200);
  const size_t salts_before = SaltsReceived().size();
  EXPECT_EQ(Cached("acme", poisoned), 64);
  EXPECT_EQ(SaltsReceived().size(), salts_before);
}

TEST_F(EnforcementE2ETest, EnginesNotProvenToKeyBySaltTakeNoDivertedRequest) {
  StartEngines(512);
  StartKvgov();
  const std::vector<int64_t> poisoned = Tokens(32, 1000);
  ASSERT_EQ(Cached("", poisoned), 0);
  ASSERT_EQ(
      HttpStatus(Control("/v1/quarantine",
                         {{"model", "llama"}, {"token_ids", poisoned}, {"reason", "poisoned"}})),
      200);
  // Only unsalted traffic so far: nothing proves either engine honours a
  // salt, so the request is refused rather than risk the quarantined KV.
  EXPECT_EQ(Cached("", poisoned), -1);
  EXPECT_EQ(last_status_, 503);
  EXPECT_NE(last_body_.find("salt_unverified"), std::string::npos) << last_body_;
  // One tenant's request proves it; the diverted request is then served.
  ASSERT_EQ(Cached("acme", Tokens(32, 7000)), 0);
  ASSERT_TRUE(WaitFor([&] { return Cached("", poisoned) == 0; })) << last_body_;
}

TEST_F(EnforcementE2ETest, ARevokedTenantReachesNoneOfItsOldBlocksAndIsCertifiedOnceTheyAreGone) {
  // Small pools, so that other traffic evicts the revoked blocks.
  StartEngines(48);
  StartKvgov();
  const std::vector<int64_t> prompt = Tokens(64, 1000);
  for (const char* tenant : {"acme", "globex"}) {
    ASSERT_EQ(Cached(tenant, prompt), 0) << last_body_;
    ASSERT_EQ(Cached(tenant, prompt), 64) << last_body_;
  }
  ASSERT_TRUE(SaltsReported()) << last_body_;

  httplib::Result revoked = Control(
      "/v1/invalidations", {{"scope", "tenant"}, {"tenant", "acme"}, {"reason", "offboarded"}});
  ASSERT_EQ(HttpStatus(revoked), 202) << (revoked ? revoked->body : "");
  const Json answer = Json::parse(revoked->body);
  const std::string id = answer["id"];
  EXPECT_EQ(answer["state"], "acknowledged");
  EXPECT_GT(answer["unreachable_since_ms"].get<int64_t>(), 0);
  // acme's 4 blocks, on the one engine that computed them.
  EXPECT_EQ(answer["residue"]["blocks"], 4) << answer.dump();
  ASSERT_EQ(answer["residue"]["workers"].size(), 1u);
  EXPECT_EQ(answer["residue"]["workers"][0]["by_tier"]["hbm"], 4);

  // From now on acme's requests are salted anew: the old blocks are out of
  // reach on every engine, the new ones are reused; globex keeps its own.
  EXPECT_EQ(Cached("acme", prompt), 0);
  EXPECT_EQ(Cached("acme", prompt), 64);
  EXPECT_EQ(Cached("globex", prompt), 64);
  EXPECT_EQ(Directive(id)["state"], "acknowledged");

  // Other traffic evicts the old blocks (LRU): the engines' own removals
  // bring the residue to zero, and only then is it certified.
  for (int i = 0; i < 40 && Directive(id).value("state", "") != "certified"; ++i) {
    ASSERT_GE(Cached("initech", Tokens(64, 100000 + 1000 * i)), 0) << last_body_;
  }
  ASSERT_TRUE(WaitFor([&] { return Directive(id).value("state", "") == "certified"; }))
      << Directive(id).dump();
  const Json certified = Directive(id);
  EXPECT_EQ(certified["residue"]["blocks"], 0);
  const std::string certificate = certified["certificate_id"];
  httplib::Result verified = control_->Get("/v1/certificates/" + certificate + "/verify");
  ASSERT_EQ(HttpStatus(verified), 200);
  EXPECT_EQ(Json::parse(verified->body)["ok"], true) << verified->body;
  const Json cert = Json::parse(control_->Get("/v1/certificates/" + certificate)->body);
  EXPECT_EQ(cert["revocation"]["tenant"], "acme");
  EXPECT_EQ(cert["revocation"]["unreachable_since_ms"], answer["unreachable_since_ms"]);
  EXPECT_GE(cert["revocation"]["removed_by_ms"].get<int64_t>(),
            answer["unreachable_since_ms"].get<int64_t>());

  // With a flush, the owners' prefix caches are reset (everyone's), and the
  // clear is the witness.
  // A prompt globex computes now, so it has residue whatever the traffic
  // above evicted.
  const std::vector<int64_t> fresh = Tokens(64, 700000);
  ASSERT_EQ(Cached("globex", fresh), 0);
  ASSERT_EQ(Cached("globex", fresh), 64);
  // The engine's answer comes before its events reach kvgov: wait until the
  // index holds the prompt (a route credits all of it), or the revocation
  // may find no residue yet (seen under ASan).
  ASSERT_TRUE(WaitFor([&] {
    httplib::Result routed =
        Control("/v1/route", {{"model", "llama"}, {"tenant", "globex"}, {"token_ids", fresh}});
    if (HttpStatus(routed) != 200) return false;
    const Json decision = Json::parse(routed->body);
    Control("/v1/route/" + decision.value("decision_id", "") + "/done", Json::object());
    return decision.value("overlap_blocks", int64_t{0}) == 64 / kBlockSize;
  })) << last_body_;
  httplib::Result flushed =
      Control("/v1/invalidations",
              {{"scope", "tenant"}, {"tenant", "globex"}, {"reason", "erasure"}, {"flush", true}});
  ASSERT_EQ(HttpStatus(flushed), 202) << (flushed ? flushed->body : "");
  const Json flush_answer = Json::parse(flushed->body);
  const std::string flush_id = flush_answer["id"];
  ASSERT_TRUE(WaitFor([&] { return Directive(flush_id).value("state", "") == "certified"; }))
      << Directive(flush_id).dump();
  // Exactly the engines that held globex's residue are flushed: the one that
  // computed `fresh`, and the other too if globex's older blocks were not
  // yet evicted there by the traffic above.
  std::set<std::string> residue_workers;
  for (const Json& worker : flush_answer["residue"]["workers"]) {
    residue_workers.insert(worker["worker"].get<std::string>());
  }
  ASSERT_FALSE(residue_workers.empty()) << flush_answer.dump();
  const Json flush_directive = Directive(flush_id);
  std::set<std::string> flushed_workers;
  for (const Json& owner : flush_directive["owners"]) {
    flushed_workers.insert(owner["worker"].get<std::string>());
    EXPECT_EQ(owner["witness_kind"], "all_blocks_cleared") << owner.dump();
    EXPECT_EQ(owner["scope"], "whole_prefix_cache") << owner.dump();
    EXPECT_EQ(owner["connector"], "vllm") << owner.dump();
  }
  EXPECT_EQ(flushed_workers, residue_workers) << flush_directive.dump();
}

TEST_F(EnforcementE2ETest, QuarantinesAndRevocationsSurviveKill9) {
  StartEngines(512);
  StartKvgov();
  const std::vector<int64_t> poisoned = Tokens(32, 1000);
  const std::vector<int64_t> revoked = Tokens(32, 3000);
  ASSERT_EQ(Cached("acme", poisoned), 0);
  ASSERT_EQ(Cached("globex", revoked), 0);
  ASSERT_EQ(Cached("globex", revoked), 32);
  ASSERT_TRUE(SaltsReported()) << last_body_;
  ASSERT_EQ(HttpStatus(Control("/v1/quarantine", {{"model", "llama"},
                                                  {"tenant", "acme"},
                                                  {"token_ids", poisoned},
                                                  {"reason", "poisoned"}})),
            200);
  ASSERT_EQ(HttpStatus(Control("/v1/invalidations", {{"scope", "tenant"},
                                                     {"tenant", "globex"},
                                                     {"model", "llama"},
                                                     {"reason", "offboarded"}})),
            202);
  ASSERT_EQ(Cached("acme", poisoned), 0);   // diverted
  ASSERT_EQ(Cached("globex", revoked), 0);  // the new epoch
  ASSERT_EQ(Cached("globex", revoked), 32);

  daemon_.Kill();
  std::filesystem::remove(daemon_.dir() / "gateway-ready");  // the next start writes it anew
  StartKvgov();
  // Which engines report salts is learnt again (ADR 0019): any tenant's
  // request that crosses nothing teaches it.
  ASSERT_EQ(Cached("initech", Tokens(32, 8000)), 0);
  ASSERT_TRUE(SaltsReported()) << last_body_;
  const size_t salts_before = SaltsReceived().size();
  // The same diversion and the same new epoch: their clean copies reused,
  // no new salt sent, the old blocks still out of reach.
  EXPECT_EQ(Cached("acme", poisoned), 32) << last_body_;
  EXPECT_EQ(Cached("globex", revoked), 32) << last_body_;
  EXPECT_EQ(SaltsReceived().size(), salts_before);
}

}  // namespace
}  // namespace kvgov::testing
