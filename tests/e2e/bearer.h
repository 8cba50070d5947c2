#pragma once

#include <httplib.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "e2e/daemon_process.h"

namespace kvgov::testing {

/// `kvgov token add NAME --role R... [--tenant T]` on `data_dir`; returns the
/// secret (the output's last line).
inline std::string AddToken(const std::string& data_dir, const std::string& name,
                            const std::vector<std::string>& roles, const std::string& tenant = "") {
  std::vector<std::string> args = {"token", "add", name, "--data-dir", data_dir};
  for (const std::string& role : roles) {
    args.push_back("--role");
    args.push_back(role);
  }
  if (!tenant.empty()) {
    args.push_back("--tenant");
    args.push_back(tenant);
  }
  std::string output;
  EXPECT_EQ(DaemonProcess::RunToExit(args, &output), 0) << output;
  while (!output.empty() && output.back() == '\n') output.pop_back();
  return output.substr(output.rfind('\n') + 1);
}

inline httplib::Headers Bearer(const std::string& secret) {
  return {{"Authorization", "Bearer " + secret}};
}

/// The answer's status; -1 when there was none.
inline int HttpStatus(const httplib::Result& result) { return result ? result->status : -1; }

}  // namespace kvgov::testing
