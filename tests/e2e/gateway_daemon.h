#pragma once

// Starting kvgov with its gateway in front of simulated engines, as the
// gateway's end-to-end tests do.

#include <httplib.h>

#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "connectors/test_support.h"
#include "e2e/daemon_process.h"
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
  std::vector<std::string> args = {"--gateway-listen",    "127.0.0.1:0",
                                   "--gateway-ready-file", ready,
                                   "--probe-interval-ms", "50",
                                   "--gateway-first-byte-timeout-ms", "5000"};
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

}  // namespace kvgov::testing
