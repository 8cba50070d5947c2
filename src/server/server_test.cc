#include "kvgov/server/server.h"

#include <httplib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "kvgov/store/store.h"
#include "testing/scratch_dir.h"

namespace kvgov::server {
namespace {

class ServerTest : public ::testing::Test {
 protected:
  ServerOptions Options() const {
    ServerOptions options;
    options.port = 0;
    options.data_dir = (dir_ / "data").string();
    options.ready_file = (dir_ / "ready").string();
    return options;
  }

  test_support::ScratchDir dir_{"kvgov_server_test"};
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

// cpp-httplib listens with an accept queue of 5; a burst of more
// concurrent connects than that, while every pool thread is busy, had the
// kernel reset the ones it dropped. The queue is widened, as `ss` reads it
// (iproute2: Send-Q of a listening socket is its backlog).
TEST_F(ServerTest, TheListenersAcceptQueueIsWide) {
  ServerOptions options = Options();
  options.gateway_host = "127.0.0.1";
  Result<std::unique_ptr<Server>> server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  for (const uint16_t port : {(*server)->port(), (*server)->gateway_port()}) {
    const std::string command = "ss -Hltn 'sport = :" + std::to_string(port) + "' 2>/dev/null";
    FILE* pipe = ::popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    char line[512] = {};
    const bool read = std::fgets(line, sizeof(line), pipe) != nullptr;
    const int exit = ::pclose(pipe);
    if (!read && exit != 0) GTEST_SKIP() << "ss (iproute2) is not available to read the backlog";
    ASSERT_TRUE(read) << "ss shows no listener on port " << port;
    char state[32] = {};
    unsigned long queued = 0, backlog = 0;
    ASSERT_EQ(std::sscanf(line, "%31s %lu %lu", state, &queued, &backlog), 3) << line;
    EXPECT_GE(backlog, 128u) << line;
  }
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

// Sends raw bytes and returns the answer: headers and a Content-Length
// body, or whatever came within two seconds.
std::string RawExchange(uint16_t port, const std::string& request, time_t timeout_s = 2) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const timeval timeout{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    char buffer[4096];
    for (ssize_t n; (n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;) {
      answer.append(buffer, static_cast<size_t>(n));
      const size_t end = answer.find("\r\n\r\n");
      const size_t length = answer.find("Content-Length: ");
      if (end != std::string::npos && length != std::string::npos &&
          answer.size() >= end + 4 + std::stoul(answer.substr(length + 16))) {
        break;
      }
    }
  }
  ::close(fd);
  return answer;
}

// Refusals cpp-httplib makes before any handler runs still name the problem.
TEST_F(ServerTest, RequestsRefusedBeforeAnyHandlerGetAJsonError) {
  Result<std::unique_ptr<Server>> server = Server::Start(Options());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string malformed = RawExchange((*server)->port(), "NOT-HTTP\r\n\r\n");
  EXPECT_NE(malformed.find("400"), std::string::npos) << malformed;
  EXPECT_NE(malformed.find(R"("code":"invalid_argument")"), std::string::npos) << malformed;
  EXPECT_NE(malformed.find("malformed HTTP request"), std::string::npos) << malformed;

  const std::string long_target = RawExchange(
      (*server)->port(), "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(long_target.find(R"("error")"), std::string::npos) << long_target.substr(0, 300);
}

// `curl -X POST` to a route that takes a body, and a body over the limit:
// the answer says what is missing, or which flag raises the limit. (The
// bodyless one is answered once cpp-httplib's 5 s read timeout has waited
// for a body that could still come without a length.)
TEST_F(ServerTest, ABodylessOrOversizedPostIsToldWhatToDo) {
  ServerOptions options = Options();
  options.max_body_bytes = 1024;
  Result<std::unique_ptr<Server>> server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string bodyless =
      RawExchange((*server)->port(), "POST /v1/quarantine HTTP/1.1\r\nHost: x\r\n\r\n",
                  /*timeout_s=*/15);
  EXPECT_EQ(bodyless.rfind("HTTP/1.1 400", 0), 0u) << bodyless;
  EXPECT_NE(bodyless.find("body: missing; POST /v1/quarantine takes a JSON object"),
            std::string::npos)
      << bodyless;
  const std::string oversized =
      RawExchange((*server)->port(),
                  "POST /v1/quarantine HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n"
                  "Connection: close\r\n\r\n" +
                      std::string(4096, ' '));
  EXPECT_EQ(oversized.rfind("HTTP/1.1 413", 0), 0u) << oversized;
  EXPECT_NE(oversized.find("1024-byte limit; `kvgov serve --max-body-bytes`"), std::string::npos)
      << oversized;
}

// `curl -X POST URL` sends neither a body nor Content-Length: the routes
// that take no body answer it (here 404, for what they do not know), not
// 400 "malformed"; a body sent anyway is read and ignored.
TEST_F(ServerTest, PostsThatTakeNoBodyAnswerWithoutOne) {
  Result<std::unique_ptr<Server>> server = Server::Start(Options());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint16_t port = (*server)->port();
  const std::string done = RawExchange(port, "POST /v1/route/" + std::string(32, 'a') +
                                                 "/done HTTP/1.1\r\nHost: x\r\n"
                                                 "Connection: close\r\n\r\n");
  EXPECT_EQ(done.rfind("HTTP/1.1 404", 0), 0u) << done;
  const std::string drain = RawExchange(
      port, "POST /v1/workers/w1/drain HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(drain.rfind("HTTP/1.1 404", 0), 0u) << drain;
  EXPECT_NE(drain.find("'w1' is not registered"), std::string::npos) << drain;
  const std::string with_body =
      RawExchange(port,
                  "POST /v1/workers/w1/drain HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                  "Connection: close\r\n\r\n{}");
  EXPECT_EQ(with_body.rfind("HTTP/1.1 404", 0), 0u) << with_body;
}

// A quarantine kvgov cannot read back must not be dropped quietly (that
// would give its blocks credit again): start-up refuses, naming it.
TEST_F(ServerTest, AnUnreadableQuarantineRefusesStartUp) {
  {
    ASSERT_TRUE(Server::Start(Options()).ok());  // creates the data dir and store
  }
  {
    Result<std::unique_ptr<store::Store>> store =
        store::Store::Open((dir_ / "data" / "store").string());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    const store::WriteOp bad{store::Column::kGovernance, "quarantine/q1", R"({"id":"q1"})"};
    ASSERT_TRUE((*store)->Write({&bad, 1}, /*sync=*/true).ok());
  }
  Result<std::unique_ptr<Server>> server = Server::Start(Options());
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kCorruption);
  EXPECT_NE(server.status().message().find("quarantine/q1"), std::string::npos)
      << server.status().ToString();
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
