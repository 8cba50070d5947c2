// The gateway's front door at scale, against an engine that costs nothing
// (simfleet::InstantEngine): a client leaving cancels the engine's request
// whether or not anything was written yet, thousands of streams are held
// on the loops' threads, a client trickling its head is dropped without
// holding anyone else up. Real sockets throughout; the simulated engines
// (LiveEngine) make the workers live, the instant engine answers their
// OpenAI requests (the spec's openai= key).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "e2e/bearer.h"
#include "e2e/daemon_process.h"
#include "e2e/gateway_daemon.h"
#include "e2e/wait.h"
#include "kvgov/simfleet/live_engine.h"
#include "simfleet/instant_engine.h"

namespace kvgov::testing {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

// A client socket to the gateway, used without an HTTP library: thousands
// of them at once, a head sent byte by byte.
class Socket {
 public:
  explicit Socket(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) Close();
  }
  ~Socket() { Close(); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool Send(std::string_view bytes) {
    return fd_ >= 0 && ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
                           static_cast<ssize_t>(bytes.size());
  }
  // What is there to read now, without waiting; false once the peer closed.
  bool Drain(std::string* into) {
    char buffer[4096];
    while (true) {
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, MSG_DONTWAIT);
      if (n > 0) {
        into->append(buffer, static_cast<size_t>(n));
        continue;
      }
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// The request of a streamed completion, as bytes.
std::string StreamRequest(int n, int max_tokens) {
  const std::string body = Json{
      {"model", "llama"},
      {"prompt", "stream " + std::to_string(n) + " of many words"},
      {"max_tokens", max_tokens},
      {"stream", true}}.dump();
  return "POST /v1/completions HTTP/1.1\r\nHost: kvgov\r\nContent-Type: application/json\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The threads of process `pid` now.
int ThreadsOf(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("Threads:")) return std::stoi(line.substr(8));
  }
  return -1;
}

class FrontDoorE2ETest : public ::testing::Test {
 protected:
  void StartFleet(std::chrono::milliseconds token_interval,
                  const std::vector<std::string>& extra_args = {}) {
    simfleet::InstantEngineOptions instant;
    instant.model = "llama";
    instant.token_interval = token_interval;
    Result<std::unique_ptr<simfleet::InstantEngine>> started =
        simfleet::InstantEngine::Start(instant);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    instant_ = *std::move(started);
    std::vector<std::string> specs;
    for (const char* id : {"w1", "w2"}) {
      simfleet::LiveEngineOptions options;
      options.id = id;
      options.model = "llama";
      options.speedup = 1000;
      Result<std::unique_ptr<simfleet::LiveEngine>> engine = simfleet::LiveEngine::Start(options);
      ASSERT_TRUE(engine.ok()) << engine.status().ToString();
      specs.push_back(engine.value()->EngineSpec() + ",openai=" + instant_->url());
      engines_.push_back(std::move(engine).value());
    }
    gateway_port_ = StartGatewayDaemon(daemon_, specs, extra_args);
    ASSERT_NE(gateway_port_, 0);
  }

  std::unique_ptr<simfleet::InstantEngine> instant_;
  std::vector<std::unique_ptr<simfleet::LiveEngine>> engines_;
  DaemonProcess daemon_;
  int gateway_port_ = 0;
};

TEST_F(FrontDoorE2ETest, AClientThatLeavesANonStreamedRequestCancelsTheEnginesRequest) {
  StartFleet(50ms);
  httplib::Client client("127.0.0.1", gateway_port_);
  client.set_read_timeout(0, 300'000);  // gives up after 300 ms, and closes
  const auto sent = std::chrono::steady_clock::now();
  httplib::Result answer =
      client.Post("/v1/completions",
                  Json{{"model", "llama"}, {"prompt", "a long answer"}, {"max_tokens", 400}}.dump(),
                  "application/json");
  EXPECT_FALSE(answer) << "400 tokens at 50 ms take 20 s";
  client.stop();
  // The engine sees its client go long before it would have answered.
  ASSERT_TRUE(WaitFor([&] { return instant_->aborted() == 1; }));
  EXPECT_LT(std::chrono::steady_clock::now() - sent, 5s);
  EXPECT_EQ(instant_->open_answers(), 0);
}

TEST_F(FrontDoorE2ETest, AClientThatLeavesBeforeTheFirstEventCancelsTheEnginesRequest) {
  StartFleet(4000ms);  // the first event comes after 4 s
  Socket client(gateway_port_);
  ASSERT_TRUE(client.Send(StreamRequest(0, 100)));
  ASSERT_TRUE(WaitFor([&] { return instant_->open_answers() == 1; }));
  client.Close();  // nothing was written to it yet
  ASSERT_TRUE(WaitFor([&] { return instant_->aborted() == 1; }, 2s))
      << "the engine still streams for a client that left";
}

// Thousands of streams open at once, each forwarded to the engine at once
// (none waits for a thread), on the threads kvgov had before them. Under
// the sanitizers (make test-asan), every request costs several times as
// much: a quarter of the streams there.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kStreams = 500;
#else
constexpr int kStreams = 2000;
#endif
TEST_F(FrontDoorE2ETest, TwoThousandStreamsAtOnceOnTheLoopsThreads) {
  // An event every 2 s a stream: the streams already open stay cheap while
  // the rest start.
  StartFleet(2000ms, {"--gateway-loops", "2"});
  const int threads_before = ThreadsOf(daemon_.pid());
  std::vector<std::unique_ptr<Socket>> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.push_back(std::make_unique<Socket>(gateway_port_));
    ASSERT_TRUE(clients.back()->Send(StreamRequest(i, 1000))) << "stream " << i;
  }
  // Every stream's first event, within a bound.
  std::vector<std::string> received(kStreams);
  int started = 0;
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while (started < kStreams && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> fds;
    for (const auto& client : clients) fds.push_back({client->fd(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
    started = 0;
    for (int i = 0; i < kStreams; ++i) {
      if (received[i].find("data: ") == std::string::npos) {
        ASSERT_TRUE(clients[i]->Drain(&received[i]))
            << "stream " << i << " closed: " << received[i];
      }
      if (received[i].find("data: ") != std::string::npos) ++started;
    }
  }
  ASSERT_EQ(started, kStreams);
  EXPECT_EQ(instant_->open_answers(), kStreams) << "every stream open at the engine at once";
  EXPECT_TRUE(received[0].starts_with("HTTP/1.1 200")) << received[0];
  const int threads_during = ThreadsOf(daemon_.pid());
  EXPECT_LE(threads_during, threads_before + 2)
      << "kvgov grew from " << threads_before << " to " << threads_during << " threads";
  // Every client leaves: every engine request is cancelled.
  clients.clear();
  ASSERT_TRUE(WaitFor([&] { return instant_->open_answers() == 0; }, 30s));
  EXPECT_EQ(instant_->aborted(), static_cast<uint64_t>(kStreams));
}

// A slow-loris: hundreds of clients trickling their heads hold no thread,
// so a well-behaved client is served at once meanwhile, and each trickler
// is dropped when its head is not in after --gateway-header-timeout-ms.
TEST_F(FrontDoorE2ETest, ClientsTricklingTheirHeadsHoldNobodyUp) {
  constexpr int kTricklers = 300;
  StartFleet(0ms, {"--gateway-header-timeout-ms", "1500"});
  std::vector<std::unique_ptr<Socket>> tricklers;
  for (int i = 0; i < kTricklers; ++i) {
    tricklers.push_back(std::make_unique<Socket>(gateway_port_));
    ASSERT_TRUE(tricklers.back()->Send("POST /v1/completions HTTP/1.1\r\nHost: k"));
  }
  const auto start = std::chrono::steady_clock::now();
  httplib::Client client("127.0.0.1", gateway_port_);
  int served = 0;
  bool dropped = false;
  std::string last;
  while (std::chrono::steady_clock::now() - start < 4s) {
    // One more byte from every trickler, as a slow-loris keeps each read
    // timer happy; a write that fails means kvgov dropped it.
    for (auto& trickler : tricklers) {
      if (!trickler->Send("x")) dropped = true;
    }
    httplib::Result answer = client.Post(
        "/v1/completions", Json{{"model", "llama"}, {"prompt", "hello"}, {"max_tokens", 2}}.dump(),
        "application/json");
    if (HttpStatus(answer) == 200) ++served;
    last = answer ? answer->body : httplib::to_string(answer.error());
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_GE(served, 15) << last;
  // Past the header timeout every trickler was closed.
  for (auto& trickler : tricklers) {
    std::string rest;
    EXPECT_FALSE(trickler->Drain(&rest) && trickler->Send("x") && trickler->Send("x"))
        << "a trickler is still connected after 4 s";
  }
  EXPECT_TRUE(dropped);
  httplib::Client control("127.0.0.1", daemon_.port());
  httplib::Result metrics = control.Get("/metrics");
  ASSERT_EQ(HttpStatus(metrics), 200);
  EXPECT_NE(
      metrics->body.find("kvgov_gateway_slow_clients_dropped_total " + std::to_string(kTricklers)),
      std::string::npos);
}

// Idle connections past --gateway-max-connections are closed as they are
// accepted; the ones held cost no thread, and the gateway serves again as
// soon as some go.
TEST_F(FrontDoorE2ETest, IdleConnectionsPastTheLimitAreClosedAndTheRestCostNoThread) {
  constexpr int kLimit = 3000;
  constexpr int kOver = 500;
  StartFleet(0ms, {"--gateway-max-connections", std::to_string(kLimit)});
  const int threads_before = ThreadsOf(daemon_.pid());
  std::vector<std::unique_ptr<Socket>> idle;
  for (int i = 0; i < kLimit + kOver; ++i) {
    idle.push_back(std::make_unique<Socket>(gateway_port_));
    ASSERT_GE(idle.back()->fd(), 0) << "connection " << i;
  }
  // The last kOver were closed by kvgov: reading them finds the end.
  int closed = 0;
  ASSERT_TRUE(WaitFor([&] {
    closed = 0;
    std::string ignored;
    for (const auto& socket : idle) {
      if (!socket->Drain(&ignored)) ++closed;
    }
    return closed == kOver;
  })) << closed
      << " connections closed";
  EXPECT_LE(ThreadsOf(daemon_.pid()), threads_before + 2);
  httplib::Client control("127.0.0.1", daemon_.port());
  httplib::Result metrics = control.Get("/metrics");
  ASSERT_EQ(HttpStatus(metrics), 200) << "the control API is served meanwhile";
  EXPECT_NE(metrics->body.find("kvgov_gateway_connections " + std::to_string(kLimit)),
            std::string::npos);
  EXPECT_NE(metrics->body.find("kvgov_gateway_connections_refused_total " + std::to_string(kOver)),
            std::string::npos);
  // Some go: a new client is served.
  idle.resize(kLimit - 10);
  httplib::Client client("127.0.0.1", gateway_port_);
  ASSERT_TRUE(WaitFor([&] {
    httplib::Result answer = client.Post(
        "/v1/completions", Json{{"model", "llama"}, {"prompt", "hi"}, {"max_tokens", 1}}.dump(),
        "application/json");
    return HttpStatus(answer) == 200;
  }));
}

}  // namespace
}  // namespace kvgov::testing
