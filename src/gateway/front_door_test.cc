#include "gateway/front_door.h"
#include "testing/scratch_dir.h"

#include <utility>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace kvgov::gateway {
namespace {

using namespace std::chrono_literals;

// A blocking TCP client for what no HTTP client does on purpose: a head
// sent slowly, a connection dropped mid-request.
class RawClient {
 public:
  explicit RawClient(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  }
  ~RawClient() { Close(); }
  bool connected() const { return connected_; }
  bool Write(std::string_view bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Everything until the server closes, or `wait` passes.
  std::string ReadUntilClosed(std::chrono::milliseconds wait, bool* closed) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(wait.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((wait.count() % 1000) * 1000);
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string out;
    char buffer[4096];
    *closed = false;
    while (true) {
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n == 0) {
        *closed = true;
        break;
      }
      if (n < 0) break;  // timed out (or reset: then closed too)
      out.append(buffer, static_cast<size_t>(n));
    }
    if (errno == ECONNRESET) *closed = true;
    return out;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

// GCC 12 miscompiles a string literal passed straight to a function in a
// co_await expression ("array used as initializer"), and destroys twice a
// temporary made by ?: in one: the handlers below pass named values.
constexpr std::string_view kTextPlain = "text/plain";
constexpr std::string_view kEventStream = "text/event-stream";

int HttpStatusOf(const httplib::Result& result) { return result ? result->status : -1; }

FrontDoorOptions TestOptions() {
  FrontDoorOptions options;
  options.loops = 2;
  options.max_body_bytes = 1024;
  options.head_timeout = 300ms;
  options.idle_timeout = 2000ms;
  options.error_body = [](int status, std::string_view message) {
    return "{\"status\":" + std::to_string(status) + ",\"message\":\"" + std::string(message) +
           "\"}";
  };
  return options;
}

// Answers "<method> <target> <body>" whole, or, for /stream, three chunks.
asio::awaitable<void> Echo(Exchange& exchange) {
  const Request& request = exchange.request();
  if (request.target() == "/stream") {
    co_await exchange.StartStream(200, kEventStream);
    for (int i = 0; i < 3; ++i) {
      const std::string event = "data: " + std::to_string(i) + "\n\n";
      if (!co_await exchange.Send(event)) co_return;
    }
    co_await exchange.EndStream();
    co_return;
  }
  const HeaderList headers = {{"X-Test", "yes"}};
  std::string body = std::string(request.method_string()) + " " + std::string(request.target()) +
                     " " + request.body();
  co_await exchange.Respond(200, kTextPlain, std::move(body), headers);
}

TEST(FrontDoorTest, AnswersWholeAndStreamedOnOneKeptConnection) {
  Result<std::unique_ptr<FrontDoor>> door = FrontDoor::Start(TestOptions(), Echo);
  ASSERT_TRUE(door.ok()) << door.status().message();
  httplib::Client client("127.0.0.1", (*door)->port());
  client.set_keep_alive(true);
  httplib::Result whole = client.Post("/v1/x", "hello", "text/plain");
  ASSERT_TRUE(whole) << httplib::to_string(whole.error());
  EXPECT_EQ(whole->status, 200);
  EXPECT_EQ(whole->body, "POST /v1/x hello");
  EXPECT_EQ(whole->get_header_value("X-Test"), "yes");

  std::string streamed;
  int pieces = 0;
  httplib::Result stream = client.Get("/stream", [&](const char* data, size_t n) {
    streamed.append(data, n);
    ++pieces;
    return true;
  });
  ASSERT_TRUE(stream);
  EXPECT_EQ(stream->get_header_value("Transfer-Encoding"), "chunked");
  EXPECT_EQ(streamed, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  EXPECT_EQ((*door)->stats().requests, 2u);
  EXPECT_EQ((*door)->stats().connections, 1) << "the second request reused the connection";
}

TEST(FrontDoorTest, RefusesWhatItCannotServeWithAnErrorBody) {
  Result<std::unique_ptr<FrontDoor>> door = FrontDoor::Start(TestOptions(), Echo);
  ASSERT_TRUE(door.ok());
  httplib::Client client("127.0.0.1", (*door)->port());
  httplib::Result large = client.Post("/v1/x", std::string(4096, 'a'), "text/plain");
  ASSERT_TRUE(large);
  EXPECT_EQ(large->status, 413);
  EXPECT_NE(large->body.find("\"status\":413"), std::string::npos) << large->body;

  RawClient raw((*door)->port());
  ASSERT_TRUE(raw.connected());
  ASSERT_TRUE(raw.Write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n"));
  bool closed = false;
  const std::string answer = raw.ReadUntilClosed(2000ms, &closed);
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 400")) << answer;
  EXPECT_NE(answer.find("body: missing; POST /v1/chat/completions"), std::string::npos) << answer;
  EXPECT_TRUE(closed);

  RawClient garbage((*door)->port());
  ASSERT_TRUE(garbage.Write("NOT HTTP AT ALL\r\n\r\n"));
  EXPECT_TRUE(garbage.ReadUntilClosed(2000ms, &closed).starts_with("HTTP/1.1 400"));
}

TEST(FrontDoorTest, AHeadSentTooSlowlyIsDroppedWithoutAThread) {
  Result<std::unique_ptr<FrontDoor>> door = FrontDoor::Start(TestOptions(), Echo);
  ASSERT_TRUE(door.ok());
  // Slow-loris: a byte of the head every 100 ms keeps every per-read timer
  // happy; the head's whole-time limit (300 ms) does not.
  RawClient slow((*door)->port());
  ASSERT_TRUE(slow.connected());
  const std::string head = "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaa";
  const auto start = std::chrono::steady_clock::now();
  bool write_failed = false;
  for (char c : head) {
    if (!slow.Write(std::string_view(&c, 1))) {
      write_failed = true;
      break;
    }
    std::this_thread::sleep_for(100ms);
    if (std::chrono::steady_clock::now() - start > 3s) break;
  }
  bool closed = false;
  slow.ReadUntilClosed(1000ms, &closed);
  EXPECT_TRUE(closed || write_failed);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_EQ((*door)->stats().dropped_slow, 1u);
  EXPECT_EQ((*door)->stats().requests, 0u);
}

// Waits until told, as a handler waiting for an engine does.
struct Waiter {
  std::mutex mu;
  std::condition_variable changed;
  bool gone_seen = false;
  bool handler_done = false;
};

TEST(FrontDoorTest, AClientThatLeavesIsSeenWhileTheHandlerWaits) {
  Waiter waiter;
  auto handler = [&waiter](Exchange& exchange) -> asio::awaitable<void> {
    asio::steady_timer engine(co_await asio::this_coro::executor, std::chrono::seconds(30));
    exchange.OnClientGone([&] {
      {
        std::lock_guard lock(waiter.mu);
        waiter.gone_seen = true;
      }
      waiter.changed.notify_all();
      engine.cancel();  // as the gateway aborts the engine's request
    });
    boost::system::error_code ec;
    co_await engine.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    co_await exchange.Respond(200, kTextPlain, std::string("late"), {});
    {
      std::lock_guard lock(waiter.mu);
      waiter.handler_done = true;
    }
    waiter.changed.notify_all();
  };
  Result<std::unique_ptr<FrontDoor>> door = FrontDoor::Start(TestOptions(), handler);
  ASSERT_TRUE(door.ok());
  RawClient client((*door)->port());
  ASSERT_TRUE(client.Write("POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"));
  // The handler is running (non-streamed, nothing written yet) when the
  // client goes.
  for (int i = 0; i < 200 && (*door)->stats().exchanges == 0; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ((*door)->stats().exchanges, 1);
  client.Close();
  std::unique_lock lock(waiter.mu);
  ASSERT_TRUE(waiter.changed.wait_for(lock, 5s, [&] { return waiter.handler_done; }));
  EXPECT_TRUE(waiter.gone_seen);
}

TEST(FrontDoorTest, ForwardsThroughAPooledKeptEngineConnection) {
  httplib::Server engine;
  // The engine's connections, told apart by the gateway's port on each.
  std::mutex ports_mu;
  std::set<int> client_ports;
  engine.Post("/v1/echo", [&](const httplib::Request& request, httplib::Response& response) {
    {
      std::lock_guard lock(ports_mu);
      client_ports.insert(request.remote_port);
    }
    response.set_content("engine:" + request.body + ":" + request.get_header_value("X-Request-Id"),
                         "application/json");
  });
  engine.Post("/v1/stream", [&](const httplib::Request& request, httplib::Response& response) {
    {
      std::lock_guard lock(ports_mu);
      client_ports.insert(request.remote_port);
    }
    response.set_chunked_content_provider("text/event-stream", [](size_t, httplib::DataSink& sink) {
      for (int i = 0; i < 3; ++i) {
        const std::string event = "data: " + std::to_string(i) + "\n\n";
        sink.write(event.data(), event.size());
      }
      sink.done();
      return true;
    });
  });
  const int engine_port = engine.bind_to_any_port("127.0.0.1");
  std::thread engine_thread([&] { engine.listen_after_bind(); });
  while (!engine.is_running()) std::this_thread::sleep_for(1ms);
  const std::string engine_url = "http://127.0.0.1:" + std::to_string(engine_port);

  auto handler = [&engine_url](Exchange& exchange) -> asio::awaitable<void> {
    const std::string path = std::string(exchange.request().target());
    Result<UpstreamCall> call = co_await exchange.upstreams().Open(engine_url);
    if (!call.ok()) {
      co_await exchange.Respond(502, kTextPlain, call.status().message(), {});
      co_return;
    }
    const std::string request_id = "req-1";
    if (Status sent = co_await call->Send(path, exchange.request().body(), request_id);
        !sent.ok()) {
      co_await exchange.Respond(502, kTextPlain, sent.message(), {});
      co_return;
    }
    if (path == "/v1/stream") {
      co_await exchange.StartStream(call->status(), call->content_type());
      while (!call->done()) {
        Result<std::string_view> piece = co_await call->Read();
        if (!piece.ok() || !co_await exchange.Send(*piece)) co_return;
      }
      co_await exchange.EndStream();
      co_return;
    }
    Result<std::string> body = co_await call->ReadAll(1 << 20);
    std::string answer = body.ok() ? *body : body.status().ToString();
    co_await exchange.Respond(call->status(), call->content_type(), std::move(answer), {});
  };
  FrontDoorOptions options = TestOptions();
  options.loops = 1;  // one pool: the kept connection is found again
  Result<std::unique_ptr<FrontDoor>> door = FrontDoor::Start(options, handler);
  ASSERT_TRUE(door.ok());
  httplib::Client client("127.0.0.1", (*door)->port());
  for (int i = 0; i < 3; ++i) {
    httplib::Result r = client.Post("/v1/echo", "b" + std::to_string(i), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body, "engine:b" + std::to_string(i) + ":req-1");
  }
  httplib::Result streamed = client.Post("/v1/stream", "{}", "application/json");
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->body, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  {
    std::lock_guard lock(ports_mu);
    EXPECT_EQ(client_ports.size(), 1u) << "every request rode the first engine connection";
  }
  // The call goes back to the pool as the handler returns, just after the
  // client has its answer.
  auto stats = (*door)->upstream_stats();
  for (int i = 0; i < 200 && !stats.empty() && stats[0].second.idle == 0; ++i) {
    std::this_thread::sleep_for(5ms);
    stats = (*door)->upstream_stats();
  }
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].second.idle, 1);
  EXPECT_EQ(stats[0].second.active, 0);

  (*door)->Stop();
  engine.stop();
  engine_thread.join();
}

TEST(FrontDoorTest, AnUnreachableEngineIsUnavailableAndNamed) {
  auto handler = [](Exchange& exchange) -> asio::awaitable<void> {
    // A port nothing listens on (bound, then closed).
    const std::string unreachable = "http://127.0.0.1:1";
    Result<UpstreamCall> call = co_await exchange.upstreams().Open(unreachable);
    std::string body = call.ok() ? "" : call.status().ToString();
    const int status = call.ok() ? 200 : 502;
    co_await exchange.Respond(status, kTextPlain, std::move(body), {});
  };
  Result<std::unique_ptr<FrontDoor>> door = FrontDoor::Start(TestOptions(), handler);
  ASSERT_TRUE(door.ok());
  httplib::Client client("127.0.0.1", (*door)->port());
  httplib::Result r = client.Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 502);
  EXPECT_NE(r->body.find("engine 'http://127.0.0.1:1'"), std::string::npos) << r->body;
}

TEST(FrontDoorTest, SpeaksTlsWithTheFilesGivenAndRefusesFilesThatDoNotLoad) {
  const test_support::ScratchDir dir("front_door_tls");
  const std::string key = (dir / "tls.key").string();
  const std::string cert = (dir / "tls.crt").string();
  const std::string openssl =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
      "-nodes -days 1 -subj /CN=localhost -keyout " +
      key + " -out " + cert + " 2>/dev/null";
  ASSERT_EQ(std::system(openssl.c_str()), 0);
  FrontDoorOptions options = TestOptions();
  options.tls_cert_file = cert;
  options.tls_key_file = key;
  Result<std::unique_ptr<FrontDoor>> door = FrontDoor::Start(options, Echo);
  ASSERT_TRUE(door.ok()) << door.status().ToString();
  httplib::SSLClient tls("127.0.0.1", (*door)->port());
  tls.enable_server_certificate_verification(false);
  httplib::Result answer = tls.Post("/v1/x", "over tls", "text/plain");
  ASSERT_TRUE(answer) << httplib::to_string(answer.error());
  EXPECT_EQ(answer->body, "POST /v1/x over tls");
  std::string streamed;
  ASSERT_TRUE(tls.Get("/stream", [&](const char* data, size_t n) {
    streamed.append(data, n);
    return true;
  }));
  EXPECT_EQ(streamed, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  httplib::Client plain("127.0.0.1", (*door)->port());
  plain.set_read_timeout(1, 0);
  EXPECT_NE(HttpStatusOf(plain.Get("/v1/x")), 200) << "plaintext is not spoken";

  options.tls_key_file = cert;  // not a key
  Result<std::unique_ptr<FrontDoor>> wrong = FrontDoor::Start(options, Echo);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("cannot load certificate"), std::string::npos);
  options.tls_key_file = (dir / "missing.key").string();
  wrong = FrontDoor::Start(options, Echo);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("cannot read --tls-key"), std::string::npos);
}

TEST(FrontDoorTest, ABusyAddressIsAnIOErrorNamingIt) {
  Result<std::unique_ptr<FrontDoor>> first = FrontDoor::Start(TestOptions(), Echo);
  ASSERT_TRUE(first.ok());
  FrontDoorOptions options = TestOptions();
  options.port = (*first)->port();
  Result<std::unique_ptr<FrontDoor>> second = FrontDoor::Start(options, Echo);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kIOError);
  EXPECT_NE(second.status().message().find(std::to_string(options.port)), std::string::npos);
}

}  // namespace
}  // namespace kvgov::gateway
