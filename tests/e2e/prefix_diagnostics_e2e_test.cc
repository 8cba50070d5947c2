// Cache breakers found in the traffic the gateway forwards
// (docs/formats/prefix-diagnostics.md): a simulated vLLM engine behind
// kvgov's gateway, tenants' prompts sent with their own tokens, and the
// report read as an operator and as a tenant would.

#include <httplib.h>

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "e2e/bearer.h"
#include "e2e/daemon_process.h"
#include "e2e/gateway_daemon.h"
#include "e2e/wait.h"
#include "kvgov/simfleet/live_engine.h"

namespace kvgov::testing {
namespace {

using Json = nlohmann::json;

constexpr int64_t kBlockSize = 16;

// A 4,000-word system prompt (the simulated engine makes a word a token)
// whose word 40 is `stamp`, then `question`.
std::string Prompt(const std::string& stamp, const std::string& question) {
  std::string text;
  for (int i = 0; i < 4000; ++i) {
    text += (i ? " " : "") + (i == 40 ? stamp : "s" + std::to_string(i));
  }
  return text + " " + question;
}

class PrefixDiagnosticsE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    simfleet::LiveEngineOptions options;
    options.id = "w1";
    options.model = "llama";
    options.pool.capacity_blocks = 4096;
    options.pool.block_size = kBlockSize;
    options.speedup = 1000;
    Result<std::unique_ptr<simfleet::LiveEngine>> engine = simfleet::LiveEngine::Start(options);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
    operator_ = AddToken(daemon_.data_dir(), "operator", {"read", "admin"});
    acme_ = AddToken(daemon_.data_dir(), "acme-app", {"infer", "read"}, "acme");
    beta_ = AddToken(daemon_.data_dir(), "beta-app", {"infer", "read"}, "beta");
    gateway_port_ =
        StartGatewayDaemon(daemon_, {engine_->EngineSpec()}, {}, Bearer(operator_));
    ASSERT_NE(gateway_port_, 0);
  }

  void Complete(const std::string& secret, const std::string& prompt) {
    httplib::Client gateway("127.0.0.1", gateway_port_);
    gateway.set_read_timeout(std::chrono::seconds(30));
    httplib::Result answer = gateway.Post(
        "/v1/completions", Bearer(secret),
        Json{{"model", "llama"}, {"prompt", prompt}, {"max_tokens", 1}}.dump(),
        "application/json");
    ASSERT_EQ(HttpStatus(answer), 200) << (answer ? answer->body : "") << daemon_.Stderr();
  }

  // Where the engine's own tokens of two prompts first differ.
  size_t FirstDifferingToken(const std::string& a, const std::string& b) {
    httplib::Client engine(engine_->control_url());
    auto tokenize = [&](const std::string& prompt) {
      httplib::Result answer =
          engine.Post("/tokenize", Json{{"prompt", prompt}}.dump(), "application/json");
      EXPECT_EQ(HttpStatus(answer), 200);
      return Json::parse(answer->body)["tokens"].get<std::vector<int64_t>>();
    };
    const std::vector<int64_t> x = tokenize(a);
    const std::vector<int64_t> y = tokenize(b);
    size_t i = 0;
    while (i < x.size() && i < y.size() && x[i] == y[i]) ++i;
    return i;
  }

  Json Report(const std::string& secret, const std::string& query = "") {
    httplib::Client control("127.0.0.1", daemon_.port());
    httplib::Result answer = control.Get("/v1/diagnostics/prefix" + query, Bearer(secret));
    EXPECT_EQ(HttpStatus(answer), 200) << (answer ? answer->body : "");
    return answer && answer->status == 200 ? Json::parse(answer->body) : Json();
  }

  std::unique_ptr<simfleet::LiveEngine> engine_;
  DaemonProcess daemon_;
  std::string operator_;
  std::string acme_;
  std::string beta_;
  int gateway_port_ = 0;
};

TEST_F(PrefixDiagnosticsE2ETest, ATimestampInTheSystemPromptIsNamedWithWhatItCosts) {
  for (int minute = 0; minute < 4; ++minute) {
    Complete(acme_, Prompt("12:0" + std::to_string(minute), "what is new?"));
  }
  // beta's prompts share a clean system prompt and differ after it.
  Complete(beta_, Prompt("static", "first question"));
  Complete(beta_, Prompt("static", "another one entirely"));

  const size_t truth = FirstDifferingToken(Prompt("12:00", "q"), Prompt("12:01", "q"));
  const Json report = Report(operator_);
  ASSERT_EQ(report["findings"].size(), 1u) << report.dump();
  const Json& finding = report["findings"][0];
  EXPECT_EQ(finding["kind"], "breaker");
  EXPECT_EQ(finding["model"], "llama");
  EXPECT_EQ(finding["tenant"], "acme");
  EXPECT_EQ(finding["occurrences"], 3);  // the first request had nothing to differ from
  const int64_t position = finding["position_tokens"];
  EXPECT_LE(position, static_cast<int64_t>(truth));
  EXPECT_GT(position + kBlockSize, static_cast<int64_t>(truth));
  EXPECT_LE(finding["length_tokens"].get<int64_t>(), kBlockSize);
  // Everything after the stamp repeats: the prompt's tokens less the
  // stamp's granule and what precedes it, within a granule.
  const int64_t prompt_tokens = finding["prompt_tokens"];
  const int64_t after = prompt_tokens - static_cast<int64_t>(truth) - 1;
  EXPECT_LE(finding["avoidable_tokens_per_request"].get<int64_t>(), after);
  EXPECT_GT(finding["avoidable_tokens_per_request"].get<int64_t>(), after - 2 * kBlockSize);
  EXPECT_NE(finding["advice"].get<std::string>().find("move what changes there"),
            std::string::npos);
  // No prompt text is kept or shown.
  EXPECT_EQ(report.dump().find("12:0"), std::string::npos) << report.dump();
  EXPECT_EQ(report.dump().find("s41"), std::string::npos) << report.dump();

  // The metric counts each request's avoidable tokens; the log names it once.
  httplib::Client control("127.0.0.1", daemon_.port());
  const std::string metrics = control.Get("/metrics", Bearer(operator_))->body;
  const std::string series =
      R"(kvgov_prefix_avoidable_prefill_tokens_total{model="llama",tenant="acme",cause="breaker"} )";
  ASSERT_NE(metrics.find(series), std::string::npos) << metrics.substr(0, 2000);
  EXPECT_EQ(std::stoll(metrics.substr(metrics.find(series) + series.size())),
            finding["avoidable_tokens_total"].get<int64_t>());
  EXPECT_TRUE(WaitFor([&] { return daemon_.Stderr().find("prefix.breaker_found") != std::string::npos; }));
}

TEST_F(PrefixDiagnosticsE2ETest, ATenantSeesItsOwnFindingsOnly) {
  for (int minute = 0; minute < 2; ++minute) {
    Complete(acme_, Prompt("09:1" + std::to_string(minute), "q"));
    Complete(beta_, Prompt("10:1" + std::to_string(minute), "q"));
  }
  EXPECT_EQ(Report(operator_)["findings"].size(), 2u);
  const Json acme = Report(acme_);
  ASSERT_EQ(acme["findings"].size(), 1u) << acme.dump();
  EXPECT_EQ(acme["findings"][0]["tenant"], "acme");
  EXPECT_EQ(Report(operator_, "?tenant=beta")["findings"][0]["tenant"], "beta");
  EXPECT_TRUE(Report(operator_, "?model=other")["findings"].empty());

  httplib::Client control("127.0.0.1", daemon_.port());
  EXPECT_EQ(HttpStatus(control.Get("/v1/diagnostics/prefix?tenant=beta", Bearer(acme_))), 403);
}

}  // namespace
}  // namespace kvgov::testing
