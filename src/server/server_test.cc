#include "kvgov/server/server.h"

#include <httplib.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace kvgov::server {
namespace {

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvgov_server_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  ServerOptions Options() const {
    ServerOptions options;
    options.port = 0;
    options.data_dir = (dir_ / "data").string();
    options.ready_file = (dir_ / "ready").string();
    return options;
  }

  std::filesystem::path dir_;
};

TEST_F(ServerTest, HealthzAnswersOnAnEphemeralPort) {
  Result<std::unique_ptr<Server>> server = Server::Start(Options());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_NE((*server)->port(), 0);

  httplib::Client client("127.0.0.1", (*server)->port());
  httplib::Result response = client.Get("/healthz");
  ASSERT_TRUE(response) << httplib::to_string(response.error());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, R"({"status":"ok"})");
  EXPECT_EQ(response->get_header_value("Content-Type"), "application/json");
}

TEST_F(ServerTest, UnknownRouteIsAJsonNotFoundNamingTheRoute) {
  Result<std::unique_ptr<Server>> server = Server::Start(Options());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  httplib::Client client("127.0.0.1", (*server)->port());
  httplib::Result response = client.Get("/v1/nowhere");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 404);
  EXPECT_NE(response->body.find("no route for GET /v1/nowhere"), std::string::npos)
      << response->body;
}

TEST_F(ServerTest, WritesReadyFileAndPrivateDataDir) {
  Result<std::unique_ptr<Server>> server = Server::Start(Options());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::ifstream ready(Options().ready_file);
  int port = 0;
  ready >> port;
  EXPECT_EQ(port, (*server)->port());

  struct stat info {};
  ASSERT_EQ(::stat(Options().data_dir.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
}

TEST_F(ServerTest, RefusesNonLoopbackListenAddress) {
  ServerOptions options = Options();
  options.host = "0.0.0.0";
  Result<std::unique_ptr<Server>> server = Server::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(server.status().message().find("'0.0.0.0'"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(options.data_dir));
}

TEST_F(ServerTest, PortInUseIsAnIOError) {
  Result<std::unique_ptr<Server>> first = Server::Start(Options());
  ASSERT_TRUE(first.ok());
  ServerOptions options = Options();
  options.port = (*first)->port();
  options.ready_file.clear();
  Result<std::unique_ptr<Server>> second = Server::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kIOError);
}

TEST_F(ServerTest, ShutdownIsIdempotent) {
  Result<std::unique_ptr<Server>> server = Server::Start(Options());
  ASSERT_TRUE(server.ok());
  const uint16_t port = (*server)->port();
  (*server)->Shutdown();
  (*server)->Shutdown();
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(1);
  EXPECT_FALSE(client.Get("/healthz"));
}

TEST(LoopbackTest, RecognisesLoopbackAddressesOnly) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.10.0.3"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("::"));
  EXPECT_FALSE(IsLoopbackHost("example.com"));
  EXPECT_FALSE(IsLoopbackHost(""));
}

}  // namespace
}  // namespace kvgov::server
