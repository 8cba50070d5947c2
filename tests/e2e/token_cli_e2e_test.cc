// What a new operator runs first, against the real binary (issue 43): where
// `kvgov token add` puts a token without --data-dir, --redis with
// --data-dir, `kvgov token list --redis`, and `kvgov keygen` run twice.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "e2e/daemon_process.h"
#include "e2e/run_command.h"
#include "kvgov/auth/tokens.h"
#include "testing/redis_server_process.h"
#include "testing/scratch_dir.h"

namespace kvgov::testing {
namespace {

namespace fs = std::filesystem;

using test_support::ScratchDir;

std::string ReadAll(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

std::string LastLine(std::string output) {
  while (!output.empty() && output.back() == '\n') output.pop_back();
  return output.substr(output.rfind('\n') + 1);
}

// Without --data-dir the token goes into ./kvgov-data under the current
// directory, as before, but the output now says so and names the file in
// full; the secret stays alone on the last line.
TEST(TokenCliE2ETest, AddSaysWhichDataDirItWroteTo) {
  ScratchDir cwd("kvgov_token_cli_cwd");
  std::string output;
  const std::string command =
      "cd '" + cwd.path().string() + "' && '" KVGOV_BINARY "' token add app --role infer 2>&1";
  ASSERT_EQ(RunCommand(command, &output), 0) << output;
  const fs::path data_dir = cwd.path() / "kvgov-data";
  EXPECT_TRUE(fs::exists(data_dir / "tokens.json"));
  EXPECT_NE(output.find("no --data-dir given: using the default, ./kvgov-data (" +
                        data_dir.string() + ")"),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("created token 'app' in " + (data_dir / "tokens.json").string()),
            std::string::npos)
      << output;
  EXPECT_EQ(LastLine(output).rfind("kvgov_", 0), 0u) << output;

  // Given one, it names that one and does not speak of a default.
  ScratchDir other("kvgov_token_cli_other");
  const std::string given = (other.path() / "data").string();
  output.clear();
  ASSERT_EQ(DaemonProcess::RunToExit(
                {"token", "add", "ops", "--role", "admin", "--data-dir", given}, &output),
            0)
      << output;
  EXPECT_NE(output.find("created token 'ops' in " + given + "/tokens.json"), std::string::npos)
      << output;
  EXPECT_EQ(output.find("default"), std::string::npos) << output;
  EXPECT_EQ(LastLine(output).rfind("kvgov_", 0), 0u) << output;

  // --help states the default, and lists every role there is.
  output.clear();
  ASSERT_EQ(DaemonProcess::RunToExit({"token", "add", "--help"}, &output), 0) << output;
  EXPECT_NE(output.find("Default: ./kvgov-data"), std::string::npos) << output;
  for (const auth::RoleInfo& role : auth::Roles()) {
    EXPECT_NE(output.find("  " + std::string(role.name) + " "), std::string::npos)
        << role.name << " is missing from:\n"
        << output;
  }
  // So does the refusal of a role there is not.
  output.clear();
  EXPECT_EQ(DaemonProcess::RunToExit(
                {"token", "add", "x", "--role", "gateway", "--data-dir", given}, &output),
            2);
  EXPECT_NE(output.find("want " + auth::RoleNames()), std::string::npos) << output;
}

// --redis and --data-dir name two different homes for tokens: the command
// refuses the pair, says which to drop and why, and writes nowhere.
TEST(TokenCliE2ETest, RedisWithDataDirIsRefusedNotIgnored) {
  ScratchDir dir("kvgov_token_cli");
  const std::string data_dir = (dir.path() / "data").string();
  // No Redis listens here: the refusal comes before any connection.
  const std::string redis = "redis://127.0.0.1:1";
  const std::vector<std::vector<std::string>> commands = {
      {"token", "add", "app", "--role", "infer", "--redis", redis, "--data-dir", data_dir},
      {"token", "revoke", "app", "--data-dir", data_dir, "--redis", redis},
      {"token", "list", "--redis", redis, "--data-dir", data_dir},
      {"token", "--data-dir", data_dir, "list", "--redis", redis}};
  for (const std::vector<std::string>& args : commands) {
    std::string output;
    EXPECT_EQ(DaemonProcess::RunToExit(args, &output), 2) << output;
    EXPECT_NE(output.find("--redis and --data-dir do not go together"), std::string::npos)
        << output;
    EXPECT_NE(output.find("Drop --data-dir for a replicated fleet"), std::string::npos) << output;
    EXPECT_NE(output.find("drop --redis to use one data dir's tokens.json"), std::string::npos)
        << output;
  }
  EXPECT_FALSE(fs::exists(data_dir));
}

// `kvgov token list --redis` lists what `token add|revoke --redis` wrote to
// the replicas' log, with no replica running.
TEST(TokenCliE2ETest, ListWithRedisReadsTheReplicatedTokens) {
  test_support::RedisServerProcess redis;
  Status started = redis.Start();
  ASSERT_TRUE(started.ok()) << started.ToString();
  std::string output;
  ASSERT_EQ(DaemonProcess::RunToExit({"token", "list", "--redis", redis.url()}, &output), 0)
      << output;
  EXPECT_EQ(output.find("(fleet)"), std::string::npos) << output;  // no tokens yet

  std::vector<std::string> secrets;
  for (const std::vector<std::string>& add :
       {std::vector<std::string>{"app", "--role", "infer", "--tenant", "acme"},
        std::vector<std::string>{"ops", "--role", "admin", "--role", "read"},
        std::vector<std::string>{"old", "--role", "read"}}) {
    std::vector<std::string> args = {"token", "add"};
    args.insert(args.end(), add.begin(), add.end());
    args.insert(args.end(), {"--redis", redis.url()});
    output.clear();
    ASSERT_EQ(DaemonProcess::RunToExit(args, &output), 0) << output;
    secrets.push_back(LastLine(output));
  }
  output.clear();
  ASSERT_EQ(DaemonProcess::RunToExit({"token", "revoke", "old", "--redis", redis.url()}, &output),
            0)
      << output;

  output.clear();
  ASSERT_EQ(DaemonProcess::RunToExit({"token", "list", "--redis", redis.url()}, &output), 0)
      << output;
  EXPECT_NE(output.find("NAME"), std::string::npos) << output;
  const size_t app = output.find("\napp ");
  const size_t ops = output.find("\nops ");
  ASSERT_NE(app, std::string::npos) << output;
  ASSERT_NE(ops, std::string::npos) << output;
  EXPECT_LT(app, ops) << output;  // in the order they were added, as a replica's file
  EXPECT_NE(output.find("infer", app), std::string::npos) << output;
  EXPECT_NE(output.find("acme", app), std::string::npos) << output;
  EXPECT_NE(output.find("admin,read", ops), std::string::npos) << output;
  EXPECT_EQ(output.find("\nold "), std::string::npos) << output;  // revoked
  for (const std::string& secret : secrets) {
    ASSERT_EQ(secret.rfind("kvgov_", 0), 0u);
    EXPECT_EQ(output.find(secret.substr(6)), std::string::npos);  // never a secret
  }

  // Another --redis-prefix is another fleet's log.
  output.clear();
  ASSERT_EQ(DaemonProcess::RunToExit(
                {"token", "list", "--redis", redis.url(), "--redis-prefix", "other"}, &output),
            0)
      << output;
  EXPECT_EQ(output.find("\napp "), std::string::npos) << output;

  // Redis gone: an error naming it, not an empty table.
  redis.Stop();
  output.clear();
  EXPECT_EQ(DaemonProcess::RunToExit({"token", "list", "--redis", redis.url()}, &output), 1)
      << output;
  EXPECT_NE(output.find("kvgov token list: "), std::string::npos) << output;
  EXPECT_EQ(output.find("NAME"), std::string::npos) << output;
}

// keygen keeps files that exist; run again it says so, file by file, and
// the keys stay what they were.
TEST(TokenCliE2ETest, KeygenRunTwiceSaysItKeptTheFiles) {
  ScratchDir dir("kvgov_token_cli");
  const std::string issuer = (dir.path() / "issuer.key").string();
  const std::string secret = (dir.path() / "tenant.key").string();
  std::string first;
  ASSERT_EQ(DaemonProcess::RunToExit(
                {"keygen", "--issuer-key", issuer, "--tenant-secret-file", secret}, &first),
            0)
      << first;
  EXPECT_NE(first.find("issuer key " + issuer), std::string::npos) << first;
  EXPECT_NE(first.find("tenant secret " + secret + ": created"), std::string::npos) << first;
  EXPECT_EQ(first.find("kept"), std::string::npos) << first;
  const std::string issuer_bytes = ReadAll(issuer);
  const std::string secret_bytes = ReadAll(secret);
  ASSERT_FALSE(issuer_bytes.empty());
  ASSERT_FALSE(secret_bytes.empty());

  std::string second;
  ASSERT_EQ(DaemonProcess::RunToExit(
                {"keygen", "--issuer-key", issuer, "--tenant-secret-file", secret}, &second),
            0)
      << second;
  EXPECT_NE(second, first);
  EXPECT_NE(second.find("tenant secret " + secret + ": kept: it existed, and was not overwritten"),
            std::string::npos)
      << second;
  EXPECT_NE(second.find("): kept: it existed, and was not overwritten"), std::string::npos)
      << second;  // the issuer key's line, after its key id
  EXPECT_EQ(second.find("created"), std::string::npos) << second;
  EXPECT_NE(second.find("nothing new was written"), std::string::npos) << second;
  // The same key id both times: the key was read back, not made anew.
  const auto key_id = [](const std::string& output) {
    const size_t at = output.find("(key id ");
    return at == std::string::npos ? std::string() : output.substr(at, 8 + 16 + 1);
  };
  EXPECT_EQ(key_id(second), key_id(first));
  EXPECT_EQ(ReadAll(issuer), issuer_bytes);
  EXPECT_EQ(ReadAll(secret), secret_bytes);

  // One kept, one made: each line says which.
  fs::remove(secret);
  std::string third;
  ASSERT_EQ(DaemonProcess::RunToExit(
                {"keygen", "--issuer-key", issuer, "--tenant-secret-file", secret}, &third),
            0)
      << third;
  EXPECT_NE(third.find("): kept"), std::string::npos) << third;
  EXPECT_NE(third.find("tenant secret " + secret + ": created"), std::string::npos) << third;
  EXPECT_EQ(third.find("nothing new was written"), std::string::npos) << third;
}

}  // namespace
}  // namespace kvgov::testing
