// Starts the real `kvgov` binary and talks to it over HTTP.

#include <httplib.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "e2e/daemon_process.h"

namespace kvgov::testing {
namespace {

TEST(ServeE2ETest, HealthzAnswersAndSigtermStopsCleanly) {
  DaemonProcess daemon;
  Status started = daemon.Start();
  ASSERT_TRUE(started.ok()) << started.ToString();

  httplib::Client client("127.0.0.1", daemon.port());
  httplib::Result response = client.Get("/healthz");
  ASSERT_TRUE(response) << httplib::to_string(response.error());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, R"({"status":"ok"})");

  EXPECT_EQ(daemon.Stop(), 0) << daemon.Stderr();
  EXPECT_NE(daemon.Stderr().find("shutting down"), std::string::npos) << daemon.Stderr();
}

// The start lines say where the gateway is, and warn when nothing is
// configured to follow (deploy/kvgov.toml as shipped has no engine).
TEST(ServeE2ETest, TheStartLinesNameTheGatewayAndWarnOfNoEngine) {
  DaemonProcess bare;
  ASSERT_TRUE(bare.Start({"--gateway-listen", "127.0.0.1:0"}).ok()) << bare.Stderr();
  EXPECT_EQ(bare.Stop(), 0);
  EXPECT_NE(bare.Stderr().find("kvgov serve: the gateway is at http://127.0.0.1:"),
            std::string::npos)
      << bare.Stderr();
  EXPECT_NE(bare.Stderr().find("warning: no engine is configured"), std::string::npos)
      << bare.Stderr();

  DaemonProcess with_engine;
  ASSERT_TRUE(with_engine.Start({"--engine", "id=w1,events=tcp://127.0.0.1:1,model=m"}).ok())
      << with_engine.Stderr();
  EXPECT_EQ(with_engine.Stop(), 0);
  EXPECT_NE(with_engine.Stderr().find("kvgov serve: listening on http://127.0.0.1:"),
            std::string::npos)
      << with_engine.Stderr();
  EXPECT_EQ(with_engine.Stderr().find("the gateway is at"), std::string::npos)
      << with_engine.Stderr();
  EXPECT_EQ(with_engine.Stderr().find("no engine is configured"), std::string::npos)
      << with_engine.Stderr();
}

TEST(ServeE2ETest, RefusesToListenBeyondLoopback) {
  std::string output;
  int code = DaemonProcess::RunToExit(
      {"serve", "--listen", "0.0.0.0:0", "--data-dir", "/tmp/kvgov-e2e-never-created"}, &output);
  EXPECT_EQ(code, 1);
  EXPECT_NE(output.find("refusing to listen on '0.0.0.0'"), std::string::npos) << output;
}

TEST(ServeE2ETest, BadListenFlagIsAUsageError) {
  std::string output;
  EXPECT_EQ(DaemonProcess::RunToExit({"serve", "--listen", "127.0.0.1:http"}, &output), 2);
  EXPECT_NE(output.find("port 'http' is not a number"), std::string::npos) << output;
}

TEST(CliE2ETest, VersionAndHelp) {
  std::string output;
  EXPECT_EQ(DaemonProcess::RunToExit({"version"}, &output), 0);
  EXPECT_EQ(output.rfind("kvgov ", 0), 0u) << output;

  EXPECT_EQ(DaemonProcess::RunToExit({"--help"}, &output), 0);
  EXPECT_NE(output.find("governance plane for KV caches"), std::string::npos) << output;
  EXPECT_NE(output.find("serve"), std::string::npos);

  EXPECT_EQ(DaemonProcess::RunToExit({"serve", "--help"}, &output), 0);
  EXPECT_NE(output.find("--data-dir"), std::string::npos) << output;

  EXPECT_NE(DaemonProcess::RunToExit({"no-such-command"}, &output), 0);
}

// A mistyped command or flag is answered by the suggestion alone, not by
// CLI11's "A subcommand is required" or a bare "arguments were not expected".
TEST(CliE2ETest, AMistypedCommandOrFlagIsAnsweredWithWhatWasMeant) {
  std::string output;
  EXPECT_EQ(DaemonProcess::RunToExit({"simulte"}, &output), 2);
  EXPECT_EQ(output.rfind("kvgov: 'simulte' is not a command of 'kvgov'; did you mean "
                         "'simulate'?",
                         0),
            0u)
      << output;
  EXPECT_EQ(output.find("A subcommand is required"), std::string::npos) << output;

  EXPECT_EQ(DaemonProcess::RunToExit({"serve", "--gateway", "127.0.0.1:0"}, &output), 2);
  EXPECT_NE(output.find("'--gateway' is not a flag of 'serve'; did you mean '--gateway-listen'"),
            std::string::npos)
      << output;
  EXPECT_EQ(output.find("were not expected"), std::string::npos) << output;

  EXPECT_EQ(DaemonProcess::RunToExit({"serve", "-listen", "127.0.0.1:0"}, &output), 2);
  EXPECT_NE(output.find("long flags take two dashes: '--listen'"), std::string::npos) << output;
}

}  // namespace
}  // namespace kvgov::testing

namespace kvgov::testing {
namespace {

TEST(ServeE2ETest, ConfigFileRegistersEngines) {
  DaemonProcess daemon;
  const std::filesystem::path config = daemon.dir() / "kvgov.toml";
  {
    std::ofstream out(config);
    out << "[serve]\n"
           "engine = [\"id=w1,events=tcp://127.0.0.1:1,model=llama\",\n"
           "          \"id=w2,kind=sglang,events=tcp://127.0.0.1:2,model=qwen,block-size=64\"]\n";
  }
  Status started = daemon.Start({"--config", config.string()});
  ASSERT_TRUE(started.ok()) << started.ToString();
  httplib::Client client("127.0.0.1", daemon.port());
  httplib::Result response = client.Get("/v1/workers");
  ASSERT_TRUE(response);
  EXPECT_NE(response->body.find(R"("id":"w1")"), std::string::npos) << response->body;
  EXPECT_NE(response->body.find(R"("block_size":64)"), std::string::npos) << response->body;
  EXPECT_NE(response->body.find(R"("kind":"sglang")"), std::string::npos) << response->body;
}

TEST(ServeE2ETest, ConfigFileErrorsNameTheKey) {
  DaemonProcess scratch;
  const std::filesystem::path config = scratch.dir() / "bad.toml";
  {
    std::ofstream out(config);
    out << "[serve]\ncolour = \"red\"\n";
  }
  std::string output;
  EXPECT_EQ(DaemonProcess::RunToExit({"serve", "--config", config.string()}, &output), 2);
  EXPECT_NE(output.find(":2: key 'colour' is not a setting of [serve]"), std::string::npos)
      << output;
  // A key written the way TOML files usually spell names is the flag's.
  {
    std::ofstream out(config);
    out << "[serve]\ngateway_listen = \"127.0.0.1:0\"\n";
  }
  EXPECT_EQ(DaemonProcess::RunToExit({"serve", "--config", config.string()}, &output), 2);
  EXPECT_NE(output.find(":2: key 'gateway_listen' is not a setting of [serve]; did you mean "
                        "'gateway-listen'?"),
            std::string::npos)
      << output;

  {
    std::ofstream out(config);
    out << "[serve]\nengine = [\"id=w1,events=tcp://h:1\"]\n";
  }
  EXPECT_EQ(DaemonProcess::RunToExit({"serve", "--config", config.string()}, &output), 2);
  EXPECT_NE(output.find("model: required in an engine spec"), std::string::npos) << output;
}

}  // namespace
}  // namespace kvgov::testing

namespace kvgov::testing {
namespace {

TEST(ServeE2ETest, ABadConfigFileNamesItsLineAndKey) {
  DaemonProcess daemon;  // only for its scratch dir
  const std::filesystem::path config = daemon.dir() / "bad.toml";
  auto run = [&](const std::string& text) {
    std::ofstream(config) << text;
    std::string output;
    const int code = DaemonProcess::RunToExit(
        {"serve", "--config", config.string(), "--data-dir", daemon.data_dir()}, &output);
    EXPECT_EQ(code, 2) << output;
    return output;
  };
  const std::string where = config.string() + ":3: ";
  EXPECT_NE(run("# kvgov\n[serve]\nlisten_on = \"127.0.0.1:0\"\n")
                .find(where + "key 'listen_on' is not a setting of [serve]"),
            std::string::npos);
  EXPECT_NE(run("[serve]\n\nlisten = \"127.0.0.1:0\n")
                .find(where + "key 'listen': the string is "
                              "not closed"),
            std::string::npos);
  const std::string out_of_range =
      run("[serve]\nlisten = \"127.0.0.1:0\"\nprobe-interval-ms = 1\n");
  EXPECT_NE(out_of_range.find("--probe-interval-ms"), std::string::npos) << out_of_range;
  EXPECT_NE(out_of_range.find("comes from " + config.string() + ":3"), std::string::npos)
      << out_of_range;
}

}  // namespace
}  // namespace kvgov::testing
