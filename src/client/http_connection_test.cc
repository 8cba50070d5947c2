#include "client/http_connection.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace kvgov::client::internal {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

// A loopback server that answers each request with bytes the test writes
// by hand, for the answer shapes a real server library would never send.
// One connection at a time; `answer` gets the request (head and body) and
// returns the bytes to write, and whether to close afterwards.
class RawServer {
 public:
  struct Reply {
    std::string bytes;
    bool close = false;
  };
  explicit RawServer(std::function<Reply(const std::string&)> answer) : answer_(std::move(answer)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(::listen(listen_fd_, 8), 0);
    socklen_t length = sizeof(address);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~RawServer() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    thread_.join();
  }
  uint16_t port() const { return port_; }
  int connections() const { return connections_; }

 private:
  void Serve() {
    while (!stopping_) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      ++connections_;
      std::string pending;
      char buffer[4096];
      bool open = true;
      while (open) {
        // One request: headers, then Content-Length bytes.
        size_t head_end;
        while ((head_end = pending.find("\r\n\r\n")) == std::string::npos) {
          const ssize_t got = ::recv(fd, buffer, sizeof(buffer), 0);
          if (got <= 0) {
            open = false;
            break;
          }
          pending.append(buffer, static_cast<size_t>(got));
        }
        if (!open) break;
        const size_t at = pending.find("Content-Length: ");
        const size_t length = std::stoul(pending.substr(at + 16));
        while (pending.size() < head_end + 4 + length) {
          const ssize_t got = ::recv(fd, buffer, sizeof(buffer), 0);
          if (got <= 0) break;
          pending.append(buffer, static_cast<size_t>(got));
        }
        const std::string request = pending.substr(0, head_end + 4 + length);
        pending.erase(0, request.size());
        Reply reply = answer_(request);
        ::send(fd, reply.bytes.data(), reply.bytes.size(), MSG_NOSIGNAL);
        if (reply.close) open = false;
      }
      ::close(fd);
    }
  }

  std::function<Reply(const std::string&)> answer_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

HttpEndpoint Local(uint16_t port) {
  Result<HttpEndpoint> endpoint = ParseHttpUrl("http://127.0.0.1:" + std::to_string(port));
  EXPECT_TRUE(endpoint.ok());
  return *endpoint;
}

TEST(ParseHttpUrlTest, HostPortAndPrefix) {
  Result<HttpEndpoint> plain = ParseHttpUrl("http://kvgov.internal");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->host, "kvgov.internal");
  EXPECT_EQ(plain->port, "80");
  EXPECT_EQ(plain->host_header, "kvgov.internal:80");
  EXPECT_EQ(plain->path_prefix, "");

  Result<HttpEndpoint> full = ParseHttpUrl("HTTP://10.0.0.1:8787/kvgov/");
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->host, "10.0.0.1");
  EXPECT_EQ(full->port, "8787");
  EXPECT_EQ(full->path_prefix, "/kvgov");

  Result<HttpEndpoint> v6 = ParseHttpUrl("http://[::1]:9000");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->host_header, "[::1]:9000");
}

TEST(ParseHttpUrlTest, RefusesWhatItCannotSpeakOrCarry) {
  EXPECT_THAT(ParseHttpUrl("https://h:1").status().message(), HasSubstr("https is not supported"));
  EXPECT_FALSE(ParseHttpUrl("ftp://h").ok());
  EXPECT_FALSE(ParseHttpUrl("http://").ok());
  EXPECT_FALSE(ParseHttpUrl("http://h:0").ok());
  EXPECT_FALSE(ParseHttpUrl("http://h:65536").ok());
  EXPECT_FALSE(ParseHttpUrl("http://h:80x").ok());
  EXPECT_FALSE(ParseHttpUrl("http://user:pw@h").ok());
  EXPECT_FALSE(ParseHttpUrl("http://h/a?b=c").ok());
  EXPECT_FALSE(ParseHttpUrl("http://h/a b").ok());
  EXPECT_FALSE(ParseHttpUrl("http://h/a\r\nX: y").ok());
  EXPECT_FALSE(ParseHttpUrl("http://[::1").ok());
}

TEST(HttpConnectionTest, SendsTheRequestAndReusesTheConnection) {
  std::vector<std::string> requests;
  RawServer server([&](const std::string& request) {
    requests.push_back(request);
    return RawServer::Reply{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"};
  });
  HttpConnection connection(Local(server.port()), {}, nullptr);
  for (int i = 0; i < 3; ++i) {
    Result<HttpResponse> response =
        connection.Post("/v1/events", "Content-Type: application/json\r\n", "{\"a\":1}");
    ASSERT_TRUE(response.ok()) << response.status().ToString();
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body, "ok");
  }
  EXPECT_EQ(server.connections(), 1);
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0],
            "POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(server.port()) +
                "\r\nContent-Length: 7\r\nContent-Type: application/json\r\n\r\n{\"a\":1}");
}

TEST(HttpConnectionTest, ReadsChunkedAndCloseFramedAnswers) {
  int call = 0;
  RawServer server([&](const std::string&) {
    if (call++ == 0) {
      return RawServer::Reply{
          "HTTP/1.1 100 Continue\r\n\r\n"
          "HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n"
          "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"};
    }
    return RawServer::Reply{"HTTP/1.0 400 Bad Request\r\n\r\nread to the end", true};
  });
  HttpConnection connection(Local(server.port()), {}, nullptr);
  Result<HttpResponse> chunked = connection.Post("/", "", "");
  ASSERT_TRUE(chunked.ok()) << chunked.status().ToString();
  EXPECT_EQ(chunked->status, 503);
  EXPECT_EQ(chunked->body, "hello world");
  Result<HttpResponse> to_close = connection.Post("/", "", "");
  ASSERT_TRUE(to_close.ok()) << to_close.status().ToString();
  EXPECT_EQ(to_close->status, 400);
  EXPECT_EQ(to_close->body, "read to the end");
}

TEST(HttpConnectionTest, ReopensAConnectionTheServerClosedWhileIdle) {
  // The server answers and closes without saying so: the next request on
  // the kept-alive connection meets EOF and goes out again on a new one.
  RawServer server([&](const std::string&) {
    return RawServer::Reply{"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true};
  });
  HttpConnection connection(Local(server.port()), {}, nullptr);
  ASSERT_TRUE(connection.Post("/", "", "x").ok());
  Result<HttpResponse> again = connection.Post("/", "", "y");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(server.connections(), 2);
}

TEST(HttpConnectionTest, MalformedAnswersAreTransportErrors) {
  const std::vector<std::string> answers = {
      "SMTP ready\r\n\r\n",
      "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
      "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
  };
  for (const std::string& answer : answers) {
    RawServer server([&](const std::string&) { return RawServer::Reply{answer, true}; });
    HttpConnection connection(Local(server.port()), {}, nullptr);
    Result<HttpResponse> response = connection.Post("/", "", "");
    EXPECT_FALSE(response.ok()) << answer;
    EXPECT_EQ(response.status().code(), StatusCode::kUnavailable) << answer;
  }
}

TEST(HttpConnectionTest, ConnectionRefusedIsUnavailable) {
  uint16_t port;
  {
    RawServer closed([](const std::string&) { return RawServer::Reply{}; });
    port = closed.port();
  }
  HttpConnection connection(Local(port), {}, nullptr);
  Result<HttpResponse> response = connection.Post("/", "", "");
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kUnavailable);
}

TEST(HttpConnectionTest, TimeoutAndInterruptEndAHungRequest) {
  std::atomic<bool> release{false};
  RawServer server([&](const std::string&) {
    while (!release) std::this_thread::sleep_for(milliseconds(5));
    return RawServer::Reply{"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true};
  });
  {
    HttpConnection connection(Local(server.port()), {milliseconds(1000), milliseconds(100)},
                              nullptr);
    const auto start = std::chrono::steady_clock::now();
    Result<HttpResponse> response = connection.Post("/", "", "");
    EXPECT_THAT(response.status().message(), HasSubstr("timed out"));
    EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000));
  }
  {
    Interrupter interrupter;
    HttpConnection connection(Local(server.port()), {milliseconds(1000), milliseconds(60000)},
                              &interrupter);
    std::thread stopper([&] {
      std::this_thread::sleep_for(milliseconds(50));
      interrupter.Interrupt();
    });
    const auto start = std::chrono::steady_clock::now();
    Result<HttpResponse> response = connection.Post("/", "", "");
    stopper.join();
    EXPECT_THAT(response.status().message(), HasSubstr("interrupted"));
    EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
  }
  release = true;
}

}  // namespace
}  // namespace kvgov::client::internal
