// The operator's console in a real browser (tests/node/console_browser.mjs:
// Debian's Chromium driven by puppeteer-core) against the real binary with
// two simulated vLLM engines, one of them holding a prompt.

#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "e2e/bearer.h"
#include "e2e/daemon_process.h"
#include "e2e/gateway_daemon.h"
#include "e2e/run_command.h"
#include "e2e/wait.h"
#include "kvgov/simfleet/live_engine.h"

namespace kvgov::testing {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kChromium = "/usr/bin/chromium";

// `count` words: the simulated engine tokenizes one token a word.
std::string Words(const std::string& stem, int count) {
  std::string words;
  for (int i = 0; i < count; ++i) words += (i ? " " : "") + stem + std::to_string(i);
  return words;
}

// 40 words, so 2 blocks.
std::string PromptWords() { return Words("w", 40); }

TEST(ConsoleE2ETest, TheConsoleShowsWhatTheApiSaysInARealBrowser) {
  const fs::path node_dir = KVGOV_NODE_TESTS_DIR;
  if (const std::string missing = NodePackageMissing("puppeteer-core"); !missing.empty()) {
    GTEST_SKIP() << missing;
  }
  if (!fs::exists(kChromium)) {
    GTEST_SKIP() << kChromium << " is missing: scripts/install-deps.sh installs Debian's "
                 << "chromium package (run make test as root or with sudo)";
  }
  std::vector<std::unique_ptr<simfleet::LiveEngine>> engines;
  for (const char* id : {"w1", "w2"}) {
    simfleet::LiveEngineOptions options;
    options.id = id;
    options.model = "llama";
    options.pool.capacity_blocks = 512;
    options.pool.block_size = 16;
    options.speedup = 1000;
    Result<std::unique_ptr<simfleet::LiveEngine>> engine = simfleet::LiveEngine::Start(options);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engines.push_back(std::move(engine).value());
  }
  DaemonProcess daemon;
  const std::string fleet =
      AddToken(daemon.data_dir(), "operator", {"admin", "read", "route", "ingest"});
  const std::string tenant =
      AddToken(daemon.data_dir(), "tenant-a", {"admin", "read", "route"}, "tenant-a");
  ASSERT_TRUE(daemon
                  .Start({"--engine", engines[0]->EngineSpec(), "--engine",
                          engines[1]->EngineSpec(), "--probe-interval-ms", "100",
                          "--traffic-interval-ms", "500", "--witness-timeout-ms", "10000"})
                  .ok());
  httplib::Client control("127.0.0.1", daemon.port());
  // w1 holds the prompt, as the engine's events say; w2 holds 8 blocks of
  // another, so the fleet's bars have two lengths to draw to one scale.
  httplib::Client engine(engines[0]->control_url());
  ASSERT_EQ(HttpStatus(engine.Post("/v1/completions", Json{{"prompt", PromptWords()}}.dump(),
                                   "application/json")),
            200);
  httplib::Client other_engine(engines[1]->control_url());
  ASSERT_EQ(
      HttpStatus(other_engine.Post("/v1/completions", Json{{"prompt", Words("other", 136)}}.dump(),
                                   "application/json")),
      200);
  std::string last;
  ASSERT_TRUE(WaitFor(
      [&] {
        httplib::Result workers = control.Get("/v1/workers", Bearer(fleet));
        last = std::to_string(HttpStatus(workers)) + " " + (workers ? workers->body : "");
        if (!workers || workers->status != 200) return false;
        int healthy = 0;
        std::map<std::string, int64_t> hbm;
        const Json page = Json::parse(workers->body);
        for (const Json& w : page["workers"]) {
          healthy += w["health"]["healthy"] == true;
          hbm[w["id"]] = w["blocks"]["hbm"].get<int64_t>();
        }
        return healthy == 2 && hbm["w1"] == 2 && hbm["w2"] == 8;
      },
      std::chrono::seconds(15)))
      << last;

  const fs::path shots = fs::path(KVGOV_BUILD_DIR) / "console-screenshots";
  fs::create_directories(shots);
  const std::string command = "node " + (node_dir / "console_browser.mjs").string() +
                              " http://127.0.0.1:" + std::to_string(daemon.port()) + " " + fleet +
                              " " + tenant + " " + shots.string() + " '" + PromptWords() + "' 2>&1";
  std::string output;
  ASSERT_EQ(RunCommand(command, &output), 0) << output << daemon.Stderr();
  const Json seen = Json::parse(output.substr(output.rfind('{')));
  EXPECT_EQ(seen["ok"], true);
  EXPECT_EQ(seen["workers"], Json::array({"w1", "w2"}));
  EXPECT_TRUE(fs::exists(shots / "fleet.png"));
  RecordProperty("console", output);
}

}  // namespace
}  // namespace kvgov::testing
