// A short soak of the real daemon: events, routes and governance writes at
// once (`make soak` runs the same for a minute).

#include <gtest/gtest.h>

#include "e2e/daemon_process.h"

namespace kvgov::testing {
namespace {

TEST(SoakE2ETest, UnderLoadNothingIsLostAppliedTwiceOrLeaked) {
  std::string output;
  const int code =
      DaemonProcess::RunToExit({"loadgen", "--duration", "8", "--engines", "3", "--rate", "150",
                                "--route-threads", "2", "--governance-every-ms", "50"},
                               &output);
  EXPECT_EQ(code, 0) << output;
  EXPECT_NE(output.find("checks       all held"), std::string::npos) << output;
  EXPECT_NE(output.find("(0 errors)"), std::string::npos) << output;
}

}  // namespace
}  // namespace kvgov::testing
