#include "kvgov/client/http_sink.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "kvgov/codec/ingest_batch.h"

namespace kvgov::client {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

bool WaitFor(const std::function<bool()>& done, milliseconds timeout = milliseconds(10000)) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return done();
}

// A stand-in for kvgov's POST /v1/events on loopback: a real HTTP server
// whose answer the test chooses per request. It records every request.
class FakeKvgov {
 public:
  struct Request {
    size_t events = 0;
    std::string content_type;
    std::string authorization;
  };
  // Gets the request number (0-based) and its event count; returns the
  // status and body to answer with.
  using Answer = std::function<std::pair<int, std::string>(size_t call, size_t events)>;

  explicit FakeKvgov(Answer answer = AcceptAll()) : answer_(std::move(answer)) {
    server_.Post("/v1/events",
                 [this](const httplib::Request& request, httplib::Response& response) {
                   Result<IngestBatch> batch = DecodeIngestBatchJson(request.body, {});
                   const size_t events = batch.ok() ? batch->events.size() : 0;
                   size_t call;
                   {
                     std::lock_guard lock(mu_);
                     if (!batch.ok()) decode_errors_.push_back(batch.status().ToString());
                     call = requests_.size();
                     requests_.push_back({events, request.get_header_value("Content-Type"),
                                          request.get_header_value("Authorization")});
                   }
                   auto [status, body] = answer_(call, events);
                   response.status = status;
                   response.set_content(body, "application/json");
                 });
    // As kvgov does: without it each answer's body waits out the client's
    // delayed ACK of its headers.
    server_.set_tcp_nodelay(true);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(milliseconds(1));
  }
  ~FakeKvgov() {
    server_.stop();
    thread_.join();
  }

  static Answer AcceptAll() {
    return [](size_t, size_t events) {
      return std::make_pair(200, R"({"accepted":)" + std::to_string(events) + R"(,"rejected":[]})");
    };
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<Request> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  size_t events_received() const {
    std::lock_guard lock(mu_);
    size_t total = 0;
    for (const Request& r : requests_) total += r.events;
    return total;
  }
  std::vector<std::string> decode_errors() const {
    std::lock_guard lock(mu_);
    return decode_errors_;
  }

 private:
  Answer answer_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<Request> requests_;
  std::vector<std::string> decode_errors_;
};

// A loopback port nothing listens on: bound, read and closed again.
uint16_t UnusedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

Event Route(int i) {
  KVTransfer transfer;
  transfer.direction = KVTransferDirection::kRoute;
  transfer.span.span_digest = "span-" + std::to_string(i);
  transfer.span.tokens = 16;
  transfer.span.owner = "test";
  return TransferEvent(std::move(transfer));
}

// Options for `url`, the rest at their defaults until `set` changes them.
HttpSinkOptions Options(std::string url,
                        const std::function<void(HttpSinkOptions&)>& set = nullptr) {
  HttpSinkOptions options;
  options.url = std::move(url);
  if (set) set(options);
  return options;
}

std::unique_ptr<HttpSink> MakeSink(HttpSinkOptions options) {
  Result<std::unique_ptr<HttpSink>> sink = HttpSink::Create(std::move(options));
  EXPECT_TRUE(sink.ok()) << sink.status().ToString();
  return std::move(sink).value();
}

TEST(HttpSinkTest, BatchesByCountWithItsHeaders) {
  FakeKvgov kvgov;
  auto sink = MakeSink(Options(kvgov.url(), [&](HttpSinkOptions& o) {
    o.bearer_token = "kvgov_secret";
    o.max_batch_events = 10;
    o.max_batch_age = milliseconds(60000);
  }));
  for (int i = 0; i < 25; ++i) ASSERT_TRUE(sink->Emit(Route(i)).ok());
  // Two full batches leave at once; the last five wait for their age.
  ASSERT_TRUE(WaitFor([&] { return sink->stats().sent == 20; }));
  EXPECT_EQ(sink->stats().pending, 5u);
  EXPECT_EQ(kvgov.requests().size(), 2u);
  ASSERT_TRUE(sink->Flush(milliseconds(10000)).ok());

  std::vector<FakeKvgov::Request> requests = kvgov.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].events, 10u);
  EXPECT_EQ(requests[1].events, 10u);
  EXPECT_EQ(requests[2].events, 5u);
  EXPECT_EQ(requests[0].content_type, "application/json");
  EXPECT_EQ(requests[0].authorization, "Bearer kvgov_secret");
  EXPECT_TRUE(kvgov.decode_errors().empty());

  SinkStats stats = sink->stats();
  EXPECT_EQ(stats.queued, 25u);
  EXPECT_EQ(stats.sent, 25u);
  EXPECT_EQ(stats.batches, 3u);
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_EQ(stats.retries, 0u);
  EXPECT_EQ(stats.last_error, "");
}

TEST(HttpSinkTest, BatchesByAge) {
  FakeKvgov kvgov;
  auto sink = MakeSink(Options(kvgov.url(), [&](HttpSinkOptions& o) {
    o.max_batch_events = 1000;
    o.max_batch_age = milliseconds(50);
  }));
  const auto start = Clock::now();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(sink->Emit(Route(i)).ok());
  ASSERT_TRUE(WaitFor([&] { return kvgov.requests().size() == 1; }));
  EXPECT_GE(Clock::now() - start, milliseconds(45));
  EXPECT_EQ(kvgov.requests()[0].events, 3u);
  ASSERT_TRUE(WaitFor([&] { return sink->stats().sent == 3; }));
}

TEST(HttpSinkTest, BatchesByBytes) {
  FakeKvgov kvgov;
  auto sink = MakeSink(Options(kvgov.url(), [&](HttpSinkOptions& o) {
    o.max_batch_events = 1000;
    o.max_batch_bytes = 4096;
    o.max_batch_age = milliseconds(60000);
  }));
  // About 90 bytes each: a 4 KiB body holds some 45.
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(sink->Emit(Route(i)).ok());
  ASSERT_TRUE(sink->Flush(milliseconds(10000)).ok());
  std::vector<FakeKvgov::Request> requests = kvgov.requests();
  ASSERT_GE(requests.size(), 3u);
  EXPECT_LT(requests[0].events, 50u);
  EXPECT_EQ(kvgov.events_received(), 100u);
}

TEST(HttpSinkTest, RetriesA503ThenDelivers) {
  FakeKvgov kvgov([](size_t call, size_t events) {
    if (call < 2) return std::make_pair(503, std::string(R"({"error":"busy"})"));
    return FakeKvgov::AcceptAll()(call, events);
  });
  auto sink = MakeSink(
      Options(kvgov.url(), [&](HttpSinkOptions& o) { o.initial_backoff = milliseconds(1); }));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(sink->Emit(Route(i)).ok());
  ASSERT_TRUE(sink->Flush(milliseconds(10000)).ok());
  SinkStats stats = sink->stats();
  EXPECT_EQ(stats.sent, 4u);
  EXPECT_EQ(stats.retries, 2u);
  EXPECT_EQ(stats.failed, 0u);
  EXPECT_EQ(stats.batches, 1u);
  EXPECT_EQ(kvgov.requests().size(), 3u);
}

TEST(HttpSinkTest, GivesUpAfterMaxAttempts) {
  FakeKvgov kvgov([](size_t, size_t) { return std::make_pair(503, std::string("overloaded")); });
  auto sink = MakeSink(Options(kvgov.url(), [&](HttpSinkOptions& o) {
    o.max_attempts = 3;
    o.initial_backoff = milliseconds(1);
  }));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(sink->Emit(Route(i)).ok());
  ASSERT_TRUE(sink->Flush(milliseconds(10000)).ok());  // settled: given up counts
  SinkStats stats = sink->stats();
  EXPECT_EQ(stats.failed, 4u);
  EXPECT_EQ(stats.sent, 0u);
  EXPECT_EQ(stats.retries, 2u);
  EXPECT_EQ(stats.batches, 0u);
  EXPECT_THAT(stats.last_error, HasSubstr("gave up after 3 attempts: HTTP 503: overloaded"));
  EXPECT_EQ(kvgov.requests().size(), 3u);
}

TEST(HttpSinkTest, NeverRetriesA4xx) {
  FakeKvgov kvgov([](size_t, size_t) {
    return std::make_pair(400, std::string(R"({"error":{"code":"invalid_argument"}})"));
  });
  auto sink = MakeSink(
      Options(kvgov.url(), [&](HttpSinkOptions& o) { o.initial_backoff = milliseconds(1); }));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(sink->Emit(Route(i)).ok());
  ASSERT_TRUE(sink->Flush(milliseconds(10000)).ok());
  SinkStats stats = sink->stats();
  EXPECT_EQ(stats.rejected, 4u);
  EXPECT_EQ(stats.retries, 0u);
  EXPECT_EQ(stats.batches, 1u);
  EXPECT_THAT(stats.last_error, HasSubstr("HTTP 400"));
  EXPECT_EQ(kvgov.requests().size(), 1u);
}

TEST(HttpSinkTest, CountsElementRejectionsFromKvgovsAnswer) {
  FakeKvgov kvgov([](size_t, size_t events) {
    return std::make_pair(
        200,
        R"({"accepted":)" + std::to_string(events - 1) +
            R"(,"rejected":[{"error":"$.events[0].accepted: worker: 'w9' is not registered","index":0}]})");
  });
  auto sink = MakeSink(Options(kvgov.url()));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(sink->Emit(Route(i)).ok());
  ASSERT_TRUE(sink->Flush(milliseconds(10000)).ok());
  SinkStats stats = sink->stats();
  EXPECT_EQ(stats.sent, 2u);
  EXPECT_EQ(stats.rejected, 1u);
  EXPECT_THAT(stats.last_error, HasSubstr("kvgov rejected 1 of 3 events"));
  EXPECT_THAT(stats.last_error, HasSubstr("is not registered"));
}

TEST(HttpSinkTest, DropsWhenFullAndNeverBlocks) {
  std::atomic<bool> release{false};
  FakeKvgov kvgov([&](size_t call, size_t events) {
    // kvgov hangs: the sender is stuck in its first request.
    while (!release) std::this_thread::sleep_for(milliseconds(1));
    return FakeKvgov::AcceptAll()(call, events);
  });
  auto sink = MakeSink(Options(kvgov.url(), [&](HttpSinkOptions& o) {
    o.max_batch_events = 10;
    o.max_queue_events = 100;
    o.request_timeout = milliseconds(60000);
  }));
  constexpr int kBurst = 100000;
  int accepted = 0;
  std::vector<Clock::duration> latencies;
  latencies.reserve(kBurst);
  const auto start = Clock::now();
  for (int i = 0; i < kBurst; ++i) {
    const Event event = Route(i);
    const auto before = Clock::now();
    const Status emitted = sink->Emit(event);
    latencies.push_back(Clock::now() - before);
    if (emitted.ok()) {
      ++accepted;
    } else {
      ASSERT_EQ(emitted.code(), StatusCode::kResourceExhausted);
    }
  }
  const auto elapsed = Clock::now() - start;
  std::sort(latencies.begin(), latencies.end());
  auto micros = [&](double quantile) {
    return std::chrono::duration<double, std::micro>(
               latencies[static_cast<size_t>(quantile * (latencies.size() - 1))])
        .count();
  };
  std::printf(
      "burst of %d Emits with kvgov hung: %d accepted; Emit p50 %.2f us, p99 %.2f us, "
      "p99.9 %.2f us, max %.1f us\n",
      kBurst, accepted, micros(0.5), micros(0.99), micros(0.999), micros(1.0));
  // The queue (100) plus at most the one batch in flight (10) got in.
  EXPECT_LE(accepted, 110);
  EXPECT_GE(accepted, 100);
  // A blocked sender must cost the caller nothing: generous for sanitizers.
  EXPECT_LT(elapsed, std::chrono::seconds(5));
  SinkStats stats = sink->stats();
  EXPECT_EQ(stats.queued, static_cast<uint64_t>(accepted));
  EXPECT_EQ(stats.dropped, static_cast<uint64_t>(kBurst - accepted));

  release = true;
  ASSERT_TRUE(sink->Flush(milliseconds(10000)).ok());
  EXPECT_EQ(sink->stats().sent, static_cast<uint64_t>(accepted));
  EXPECT_EQ(kvgov.events_received(), static_cast<size_t>(accepted));
}

TEST(HttpSinkTest, FlushTimesOutAndCloseIsBoundedWhenKvgovIsDown) {
  const uint16_t port = UnusedPort();
  auto sink = MakeSink(Options("http://127.0.0.1:" + std::to_string(port), [&](HttpSinkOptions& o) {
    o.max_attempts = 1000;
    o.initial_backoff = milliseconds(5);
    o.max_backoff = milliseconds(20);
  }));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(sink->Emit(Route(i)).ok());
  Status flushed = sink->Flush(milliseconds(100));
  EXPECT_EQ(flushed.code(), StatusCode::kUnavailable);
  EXPECT_THAT(flushed.message(), HasSubstr("5 events still pending"));
  EXPECT_GT(sink->stats().retries, 0u);
  EXPECT_THAT(sink->stats().last_error, HasSubstr("connect"));

  const auto start = Clock::now();
  Status closed = sink->Close(milliseconds(200));
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
  EXPECT_THAT(closed.message(), HasSubstr("5 events undelivered"));
  SinkStats stats = sink->stats();
  EXPECT_EQ(stats.failed, 5u);
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_EQ(sink->Emit(Route(9)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(sink->stats().dropped, 1u);
  EXPECT_TRUE(sink->Close(milliseconds(10)).ok());  // idempotent
}

TEST(HttpSinkTest, CloseAbandonsARequestInFlight) {
  std::atomic<bool> release{false};
  FakeKvgov kvgov([&](size_t call, size_t events) {
    while (!release) std::this_thread::sleep_for(milliseconds(1));
    return FakeKvgov::AcceptAll()(call, events);
  });
  auto sink = MakeSink(
      Options(kvgov.url(), [&](HttpSinkOptions& o) { o.request_timeout = milliseconds(60000); }));
  ASSERT_TRUE(sink->Emit(Route(1)).ok());
  ASSERT_TRUE(WaitFor([&] { return kvgov.requests().size() == 1; }));
  const auto start = Clock::now();
  EXPECT_FALSE(sink->Close(milliseconds(50)).ok());
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
  EXPECT_EQ(sink->stats().failed, 1u);
  release = true;
}

TEST(HttpSinkTest, DestructorDeliversWhatIsQueued) {
  FakeKvgov kvgov;
  {
    auto sink = MakeSink(
        Options(kvgov.url(), [&](HttpSinkOptions& o) { o.max_batch_age = milliseconds(60000); }));
    for (int i = 0; i < 7; ++i) ASSERT_TRUE(sink->Emit(Route(i)).ok());
  }
  EXPECT_EQ(kvgov.events_received(), 7u);
}

TEST(HttpSinkTest, ManyThreadsEmitAtOnce) {
  FakeKvgov kvgov;
  auto sink =
      MakeSink(Options(kvgov.url(), [&](HttpSinkOptions& o) { o.max_queue_events = 1 << 20; }));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5000; ++i) EXPECT_TRUE(sink->Emit(Route(t * 5000 + i)).ok());
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_TRUE(sink->Flush(milliseconds(30000)).ok());
  EXPECT_EQ(sink->stats().sent, 20000u);
  EXPECT_EQ(kvgov.events_received(), 20000u);
}

TEST(HttpSinkTest, EmitRefusesWhatItCannotSend) {
  FakeKvgov kvgov;
  auto sink = MakeSink(Options(kvgov.url(), [&](HttpSinkOptions& o) { o.max_batch_bytes = 1024; }));
  Event bad = Route(1);
  std::get<KVTransfer>(bad.record).span.span_digest = "\xff";
  EXPECT_EQ(sink->Emit(bad).code(), StatusCode::kInvalidArgument);
  Event big = Route(2);
  big.location.emplace();
  big.location->worker = "w1";
  big.location->token_ids.assign(500, 123456);
  Status too_big = sink->Emit(big);
  EXPECT_EQ(too_big.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(too_big.message(), HasSubstr("over max_batch_bytes 1024"));
  SinkStats stats = sink->stats();
  EXPECT_EQ(stats.invalid, 2u);
  EXPECT_EQ(stats.queued, 0u);
}

TEST(HttpSinkTest, CreateValidatesItsOptions) {
  EXPECT_EQ(HttpSink::Create(Options("https://kvgov:8787")).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      HttpSink::Create(
          Options("http://h:1", [&](HttpSinkOptions& o) { o.bearer_token = "a\r\nX-Evil: 1"; }))
          .status()
          .code(),
      StatusCode::kInvalidArgument);
  EXPECT_FALSE(HttpSink::Create(Options("http://h:1", [&](HttpSinkOptions& o) {
                 o.max_batch_events = 0;
               })).ok());
  EXPECT_FALSE(HttpSink::Create(Options("http://h:1", [&](HttpSinkOptions& o) {
                 o.max_attempts = 0;
               })).ok());
  EXPECT_FALSE(HttpSink::Create(Options("http://h:1", [&](HttpSinkOptions& o) {
                 o.max_batch_bytes = 1 << 20;
                 o.max_queue_bytes = 1024;
               })).ok());
}

}  // namespace
}  // namespace kvgov::client
