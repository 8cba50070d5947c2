#pragma once

// Starting kvgov with its gateway in front of simulated engines, as the
// gateway's end-to-end tests do.

#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "connectors/test_support.h"
#include "e2e/daemon_process.h"
#include "e2e/run_command.h"
#include "e2e/wait.h"

namespace kvgov::testing {

/// Starts `daemon` with the gateway on a free loopback port, following
/// `engine_specs` (probed every 50 ms, a 5 s first-byte timeout), plus
/// `extra_args`; waits until the gateway's port is known and every engine
/// is probed healthy (read with `control_headers`). Returns the gateway's
/// port; 0 after a test failure.
inline int StartGatewayDaemon(DaemonProcess& daemon, const std::vector<std::string>& engine_specs,
                              const std::vector<std::string>& extra_args = {},
                              const httplib::Headers& control_headers = {}) {
  const std::string ready = (daemon.dir() / "gateway-ready").string();
  std::vector<std::string> args = {"--gateway-listen",
                                   "127.0.0.1:0",
                                   "--gateway-ready-file",
                                   ready,
                                   "--probe-interval-ms",
                                   "50",
                                   "--gateway-first-byte-timeout-ms",
                                   "5000"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  for (const std::string& spec : engine_specs) {
    args.push_back("--engine");
    args.push_back(spec);
  }
  if (Status started = daemon.Start(args); !started.ok()) {
    ADD_FAILURE() << started.ToString();
    return 0;
  }
  int port = 0;
  if (!WaitFor([&] {
        std::ifstream in(ready);
        return static_cast<bool>(in >> port) && port > 0;
      })) {
    ADD_FAILURE() << "the gateway never wrote its port to " << ready;
    return 0;
  }
  httplib::Client control("127.0.0.1", daemon.port());
  std::string last;
  if (!WaitFor([&] {
        httplib::Result workers = control.Get("/v1/workers", control_headers);
        last = std::to_string(HttpStatus(workers)) + (workers ? workers->body : "");
        if (!workers || workers->status != 200) return false;
        size_t healthy = 0;
        const nlohmann::json rows = nlohmann::json::parse(workers->body);
        for (const nlohmann::json& w : rows["workers"]) {
          healthy += w.contains("health") && w["health"]["healthy"] == true;
        }
        return healthy == engine_specs.size();
      })) {
    ADD_FAILURE() << "not every engine was probed healthy: " << last;
    return 0;
  }
  return port;
}

/// Why the npm package `package` cannot be used from tests/node, for a
/// test to skip with; empty when it is installed.
inline std::string NodePackageMissing(std::string_view package) {
  const std::filesystem::path node_dir = KVGOV_NODE_TESTS_DIR;
  if (std::filesystem::exists(node_dir / "node_modules" / package / "package.json")) return "";
  return std::string(package) + " is not installed in " + node_dir.string() +
         ": scripts/install-node-test-deps.sh (run by make test) could not reach the npm "
         "registry or find npm";
}

/// Runs tests/node/openai_sdk_gateway.mjs (the official OpenAI SDK's checks)
/// against the gateway at `gateway_port` with `token`; its exit status, and
/// what it printed in `output` (a JSON line last).
/// `responses` false leaves out the Responses checks (a model served by
/// prefill and decode pools, which the gateway serves over completions and
/// chat only).
inline int RunOpenAISdkChecks(int gateway_port, const std::string& token, std::string* output,
                              bool responses = true) {
  const std::filesystem::path node_dir = KVGOV_NODE_TESTS_DIR;
  return RunCommand("node " + (node_dir / "openai_sdk_gateway.mjs").string() +
                        " http://127.0.0.1:" + std::to_string(gateway_port) + "/v1 " + token +
                        (responses ? "" : " --no-responses") + " 2>&1",
                    output);
}

// tests/node/anthropic_sdk_gateway.mjs against the gateway (the SDK adds
// /v1/messages to the base URL itself).
inline int RunAnthropicSdkChecks(int gateway_port, const std::string& token, std::string* output) {
  const std::filesystem::path node_dir = KVGOV_NODE_TESTS_DIR;
  return RunCommand("node " + (node_dir / "anthropic_sdk_gateway.mjs").string() +
                        " http://127.0.0.1:" + std::to_string(gateway_port) + " " + token + " 2>&1",
                    output);
}

}  // namespace kvgov::testing
