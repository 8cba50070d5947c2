// Cache breakers found in the traffic the gateway forwards
// (docs/formats/prefix-diagnostics.md): a simulated vLLM engine behind
// kvgov's gateway, tenants' prompts sent with their own tokens, and the
// report read as an operator and as a tenant would.

#include <httplib.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
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
    // beta lets kvgov show the tokens around its breakers; acme does not.
    gateway_port_ = StartGatewayDaemon(daemon_, {engine_->EngineSpec()},
                                       {"--prefix-context-tenant", "beta"}, Bearer(operator_));
    ASSERT_NE(gateway_port_, 0);
  }

  void Complete(const std::string& secret, const std::string& prompt) {
    httplib::Client gateway("127.0.0.1", gateway_port_);
    gateway.set_read_timeout(std::chrono::seconds(30));
    httplib::Result answer = gateway.Post(
        "/v1/completions", Bearer(secret),
        Json{{"model", "llama"}, {"prompt", prompt}, {"max_tokens", 1}}.dump(), "application/json");
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
  EXPECT_TRUE(
      WaitFor([&] { return daemon_.Stderr().find("prefix.breaker_found") != std::string::npos; }));
}

// Tool definitions serialized in another order on each call (a map
// iterated in hash order): the same content, reordered.
TEST_F(PrefixDiagnosticsE2ETest, ToolDefinitionsInAnotherOrderAreAReordering) {
  auto tool = [](const std::string& name, int words) {
    std::string text = "tool " + name + ":";
    for (int i = 0; i < words; ++i) text += " " + name + std::to_string(i);
    return text;
  };
  const std::string system = "you are an agent with these tools.";
  const std::string search = tool("search", 300);
  const std::string fetch = tool("fetch", 250);
  const std::string shell = tool("shell", 200);
  Complete(acme_, system + " " + search + " " + fetch + " " + shell + " question one");
  Complete(acme_, system + " " + fetch + " " + search + " " + shell + " question two");

  const Json report = Report(operator_);
  ASSERT_EQ(report["findings"].size(), 1u) << report.dump();
  const Json& finding = report["findings"][0];
  EXPECT_EQ(finding["kind"], "reordering");
  EXPECT_LE(finding["position_tokens"].get<int64_t>(), 16);  // where the first tool starts
  // The tools recur but for what granules straddle: about 750 tokens.
  EXPECT_GE(finding["avoidable_tokens_per_request"].get<int64_t>(), 600);
  EXPECT_LE(finding["avoidable_tokens_per_request"].get<int64_t>(), 760);
  EXPECT_NE(finding["advice"].get<std::string>().find("one fixed order"), std::string::npos);
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
  EXPECT_FALSE(acme["findings"][0].contains("context")) << acme.dump();
  // beta allowed it: the span and a few tokens either side, as the engine
  // detokenizes them (the newest prompt's, stamped 10:11).
  const Json beta = Report(beta_);
  ASSERT_EQ(beta["findings"].size(), 1u) << beta.dump();
  const Json& context = beta["findings"][0]["context"];
  EXPECT_EQ(context["offset_tokens"], beta["findings"][0]["position_tokens"].get<int64_t>() - 8);
  const std::string text = context.value("text", "");
  EXPECT_NE(text.find("s39 10:11 s41"), std::string::npos) << beta.dump();
  EXPECT_EQ(Report(operator_, "?tenant=beta")["findings"][0]["tenant"], "beta");
  EXPECT_TRUE(Report(operator_, "?model=other")["findings"].empty());

  httplib::Client control("127.0.0.1", daemon_.port());
  EXPECT_EQ(HttpStatus(control.Get("/v1/diagnostics/prefix?tenant=beta", Bearer(acme_))), 403);
}

// The lint: no traffic, the requests given, tokenized by the engine.
TEST_F(PrefixDiagnosticsE2ETest, TheLintNamesTheRulesARequestBreaksAndWhatFixingThemSaves) {
  std::string rules;
  for (int i = 0; i < 60; ++i) rules += " rule" + std::to_string(i);
  auto chat = [&](const std::string& opening, const Json& tools) {
    return Json{{"model", "llama"},
                {"messages",
                 {{{"role", "system"}, {"content", opening + rules}},
                  {{"role", "user"}, {"content", "what now?"}}}},
                {"tools", tools}};
  };
  const Json search = {{"type", "function"}, {"function", {{"name", "search"}}}};
  const Json fetch = {{"type", "function"}, {"function", {{"name", "fetch"}}}};
  httplib::Client control("127.0.0.1", daemon_.port());
  auto lint = [&](const Json& body) {
    httplib::Result answer =
        control.Post("/v1/lint/prompt", Bearer(acme_), body.dump(), "application/json");
    EXPECT_EQ(HttpStatus(answer), 200) << (answer ? answer->body : "");
    return answer && answer->status == 200 ? Json::parse(answer->body) : Json();
  };

  const Json broken = lint({{"requests",
                             {chat("It is 2026-12-04 09:41.", Json::array({search, fetch})),
                              chat("It is 2026-12-04 09:42.", Json::array({fetch, search}))}}});
  std::set<std::string> rules_found;
  for (const Json& finding : broken["findings"]) rules_found.insert(finding["rule"]);
  EXPECT_EQ(rules_found, (std::set<std::string>{"volatile_before_static", "tool_order"}))
      << broken.dump();
  // The engine's tokens: the stamp early, so little is shared as sent;
  // with it moved out and one tool order, all but the question is.
  const int64_t prompt_tokens = broken["requests"][0]["prompt_tokens"];
  EXPECT_GT(prompt_tokens, 60);
  EXPECT_LT(broken["shared_prefix_tokens"].get<int64_t>(), 10);
  EXPECT_GT(broken["shared_prefix_tokens_if_fixed"].get<int64_t>(), prompt_tokens - 10);
  EXPECT_LT(broken["requests"][0]["stable_prefix_tokens"].get<int64_t>(), 10);

  const Json clean = lint({{"requests",
                            {chat("Hello.", Json::array({search, fetch})),
                             chat("Hello.", Json::array({search, fetch}))}}});
  EXPECT_TRUE(clean["findings"].empty()) << clean.dump();
  EXPECT_EQ(clean["shared_prefix_tokens"], clean["shared_prefix_tokens_if_fixed"]);

  // Anthropic's shape: a breakpoint after a system prompt that changes.
  auto messages = [&](const std::string& user) {
    return Json{{"model", "llama"},
                {"system",
                 {{{"type", "text"},
                   {"text", "You help " + user + "." + rules},
                   {"cache_control", {{"type", "ephemeral"}}}}}},
                {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  };
  const Json anthropic = lint({{"requests", {messages("alice"), messages("bob")}}});
  ASSERT_EQ(anthropic["findings"].size(), 1u) << anthropic.dump();
  EXPECT_EQ(anthropic["findings"][0]["rule"], "breakpoint_changes");
  EXPECT_EQ(anthropic["findings"][0]["where"], "$.requests[1].system[0].text");
  EXPECT_EQ(anthropic["requests"][0]["format"], "anthropic");

  // kvgov lint sends a file of requests, one a line, and exits 1 on a
  // broken rule, 0 on none.
  auto run_lint = [&](const Json& first, const Json& second, std::string* output) {
    const std::filesystem::path file = daemon_.dir() / "requests.jsonl";
    std::ofstream(file) << first.dump() << "\n\n" << second.dump() << "\n";
    return DaemonProcess::RunToExit(
        {"lint", file.string(), "--kvgov", "http://127.0.0.1:" + std::to_string(daemon_.port()),
         "--token", acme_},
        output);
  };
  std::string output;
  EXPECT_EQ(run_lint(chat("Hello.", Json::array({search, fetch})),
                     chat("Hello.", Json::array({fetch, search})), &output),
            1);
  EXPECT_NE(output.find("$.requests[1].tools: tool_order: the same tools as request 0 in another "
                        "order"),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("2 requests, 1 finding; shared prefix "), std::string::npos) << output;
  EXPECT_EQ(run_lint(chat("Hello.", Json::array({search})), chat("Hello.", Json::array({search})),
                     &output),
            0)
      << output;

  // A model no engine serves, and a bad body, say so.
  Json unknown = chat("Hello.", Json::array());
  unknown["model"] = "nope";
  httplib::Result refused = control.Post("/v1/lint/prompt", Bearer(acme_),
                                         Json{{"requests", {unknown}}}.dump(), "application/json");
  EXPECT_EQ(HttpStatus(refused), 404);
  EXPECT_NE(refused->body.find("$.requests[0]"), std::string::npos) << refused->body;
  httplib::Result bad =
      control.Post("/v1/lint/prompt", Bearer(acme_), R"({"requests":{}})", "application/json");
  EXPECT_EQ(HttpStatus(bad), 400);
  EXPECT_NE(bad->body.find("$.requests: want a non-empty array"), std::string::npos) << bad->body;
}

}  // namespace
}  // namespace kvgov::testing
