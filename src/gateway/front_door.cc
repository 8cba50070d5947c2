#include "gateway/front_door.h"

#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <sys/socket.h>

#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include "kvgov/log/log.h"

namespace kvgov::gateway {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;
using asio::use_awaitable;

namespace {

constexpr auto kAwaitEc = [](beast::error_code& ec) {
  return asio::redirect_error(use_awaitable, ec);
};

beast::tcp_stream& Lowest(beast::tcp_stream& stream) { return stream; }
beast::tcp_stream& Lowest(beast::ssl_stream<beast::tcp_stream>& stream) {
  return stream.next_layer();
}

}  // namespace

/// One event loop: its thread, its context, its engine connections.
struct Loop {
  explicit Loop(const connectors::UpstreamTimeouts& timeouts)
      : pool(context.get_executor(), timeouts) {}
  asio::io_context context;
  UpstreamPool pool;  // destroyed before the context: it marks its calls orphaned
  std::thread thread;
};

struct FrontDoor::Impl {
  FrontDoorOptions options;
  Handler handler;
  std::optional<ssl::context> tls;
  std::vector<std::unique_ptr<Loop>> loops;
  std::optional<tcp::acceptor> acceptor;  // on loops[0]
  uint16_t port = 0;
  std::atomic<bool> stopped{false};

  std::atomic<int64_t> connections{0};
  std::atomic<int64_t> exchanges{0};
  std::atomic<uint64_t> connections_refused{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> dropped_slow{0};

  asio::awaitable<void> Accept();
  template <typename Stream>
  asio::awaitable<void> Serve(Stream stream, Loop& loop);
};

namespace {

// Counts one more for as long as it lives; or, adopting, one counted
// already.
class Counted {
 public:
  explicit Counted(std::atomic<int64_t>& n, bool adopt = false) : n_(n) {
    if (!adopt) n_.fetch_add(1, std::memory_order_relaxed);
  }
  ~Counted() { n_.fetch_sub(1, std::memory_order_relaxed); }
  Counted(const Counted&) = delete;
  Counted& operator=(const Counted&) = delete;

 private:
  std::atomic<int64_t>& n_;
};

// The connection of one client, as the handler sees it. While the handler
// runs, a second coroutine (Watch) reads the client's side, so a client
// that closes is seen at once, even while nothing is being written to it.
template <typename Stream>
class Connection final : public Exchange {
 public:
  Connection(Stream& stream, beast::flat_buffer& buffer, FrontDoor::Impl& door, Loop& loop)
      : stream_(stream), buffer_(buffer), door_(door), loop_(loop), watch_done_(loop.context) {}

  void Begin(Request request) {
    request_ = std::move(request);
    answered_ = false;
    on_gone_ = nullptr;
  }

  const Request& request() const override { return request_; }
  bool client_gone() const override { return gone_; }
  void OnClientGone(std::function<void()> on_gone) override { on_gone_ = std::move(on_gone); }
  UpstreamPool& upstreams() override { return loop_.pool; }
  bool answered() const { return answered_; }
  bool keep_alive() const { return keep_alive_ && !gone_; }

  asio::awaitable<bool> Respond(int status, std::string_view content_type, std::string body,
                                const HeaderList& headers) override {
    answered_ = true;
    keep_alive_ = request_.keep_alive();
    http::response<http::string_body> response{static_cast<http::status>(status),
                                               request_.version()};
    response.set(http::field::content_type, content_type);
    for (const auto& [name, value] : headers) response.set(name, value);
    response.keep_alive(keep_alive_);
    response.body() = std::move(body);
    response.prepare_payload();
    beast::error_code ec;
    Lowest(stream_).expires_after(door_.options.send_timeout);
    co_await http::async_write(stream_, response, kAwaitEc(ec));
    co_return Wrote(ec);
  }

  asio::awaitable<bool> StartStream(int status, std::string_view content_type) override {
    answered_ = true;
    keep_alive_ = request_.keep_alive();
    http::response<http::empty_body> response{static_cast<http::status>(status),
                                              request_.version()};
    response.set(http::field::content_type, content_type);
    response.set(http::field::cache_control, "no-cache");
    response.keep_alive(keep_alive_);
    response.chunked(true);
    http::response_serializer<http::empty_body> serializer(response);
    beast::error_code ec;
    Lowest(stream_).expires_after(door_.options.send_timeout);
    co_await http::async_write_header(stream_, serializer, kAwaitEc(ec));
    co_return Wrote(ec);
  }

  asio::awaitable<bool> Send(std::string_view bytes) override {
    if (gone_) co_return false;
    if (bytes.empty()) co_return true;  // an empty chunk would end the body
    beast::error_code ec;
    Lowest(stream_).expires_after(door_.options.send_timeout);
    co_await asio::async_write(stream_, http::make_chunk(asio::buffer(bytes.data(), bytes.size())),
                               kAwaitEc(ec));
    co_return Wrote(ec);
  }

  asio::awaitable<void> EndStream() override {
    if (gone_) co_return;
    beast::error_code ec;
    Lowest(stream_).expires_after(door_.options.send_timeout);
    co_await asio::async_write(stream_, http::make_chunk_last(), kAwaitEc(ec));
    Wrote(ec);
  }

  // Starts reading the client's side while the handler runs.
  void StartWatching() {
    watching_ = true;
    watch_done_.expires_at(asio::steady_timer::time_point::max());
    asio::co_spawn(loop_.context, Watch(), asio::detached);
  }

  // Ends the read Watch started, and waits for it to end.
  asio::awaitable<void> StopWatching() {
    on_gone_ = nullptr;
    if (!watching_) co_return;
    stop_watching_ = true;
    beast::error_code ec;
    Lowest(stream_).socket().cancel(ec);
    co_await watch_done_.async_wait(kAwaitEc(ec));
    stop_watching_ = false;
  }

 private:
  bool Wrote(const beast::error_code& ec) {
    if (!ec) return true;
    if (ec == beast::error::timeout) door_.dropped_slow.fetch_add(1, std::memory_order_relaxed);
    ClientGone();
    return false;
  }

  void ClientGone() {
    if (gone_) return;
    gone_ = true;
    if (on_gone_) std::exchange(on_gone_, nullptr)();
  }

  asio::awaitable<void> Watch() {
    beast::error_code ec;
    // A client that sends the next request before this answer ends
    // (pipelining) ends the watch: its bytes stay in the buffer.
    const size_t n = co_await stream_.async_read_some(buffer_.prepare(4096), kAwaitEc(ec));
    buffer_.commit(n);
    if (ec && !stop_watching_) ClientGone();
    watching_ = false;
    watch_done_.cancel();
  }

  Stream& stream_;
  beast::flat_buffer& buffer_;
  FrontDoor::Impl& door_;
  Loop& loop_;
  Request request_;
  bool answered_ = false;
  bool keep_alive_ = false;
  bool gone_ = false;
  bool watching_ = false;
  bool stop_watching_ = false;
  asio::steady_timer watch_done_;  // cancelled when Watch ends
  std::function<void()> on_gone_;
};

// An answer the listener makes itself, on a connection it then closes.
template <typename Stream>
asio::awaitable<void> Refuse(Stream& stream, const FrontDoorOptions& options, int status,
                             std::string_view message) {
  http::response<http::string_body> response{static_cast<http::status>(status), 11};
  response.set(http::field::content_type, "application/json");
  response.keep_alive(false);
  response.body() = options.error_body ? options.error_body(status, message) : std::string(message);
  response.prepare_payload();
  beast::error_code ec;
  Lowest(stream).expires_after(options.send_timeout);
  co_await http::async_write(stream, response, kAwaitEc(ec));
}

}  // namespace

template <typename Stream>
asio::awaitable<void> FrontDoor::Impl::Serve(Stream stream, Loop& loop) {
  Counted open(connections, /*adopt=*/true);  // counted as it was accepted
  beast::error_code ec;
  if constexpr (!std::is_same_v<Stream, beast::tcp_stream>) {
    Lowest(stream).expires_after(options.head_timeout);
    co_await stream.async_handshake(ssl::stream_base::server, kAwaitEc(ec));
    if (ec) co_return;
  }
  beast::flat_buffer buffer;
  Connection<Stream> connection(stream, buffer, *this, loop);
  while (!stopped.load(std::memory_order_relaxed)) {
    // Idle until the next request's first byte; then the head has
    // head_timeout in all, however slowly its bytes come.
    if (buffer.size() == 0) {
      Lowest(stream).expires_after(options.idle_timeout);
      const size_t n = co_await stream.async_read_some(buffer.prepare(4096), kAwaitEc(ec));
      if (ec) co_return;
      buffer.commit(n);
    }
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<uint32_t>(options.max_header_bytes));
    parser.body_limit(options.max_body_bytes);
    Lowest(stream).expires_after(options.head_timeout);
    co_await http::async_read_header(stream, buffer, parser, kAwaitEc(ec));
    if (ec == beast::error::timeout) {
      dropped_slow.fetch_add(1, std::memory_order_relaxed);
      co_return;
    }
    if (ec == http::error::body_limit) {  // its Content-Length says so
      co_await Refuse(stream, options, 413, "body: larger than the limit");
      co_return;
    }
    if (ec == http::error::header_limit) {
      co_await Refuse(stream, options, 431, "headers: too large");
      co_return;
    }
    if (ec) {
      if (ec != http::error::end_of_stream && ec != asio::error::eof) {
        co_await Refuse(stream, options, 400,
                        "malformed HTTP request: the request line or a header could not be "
                        "parsed");
      }
      co_return;
    }
    const auto& head = parser.get();
    if (head.method() == http::verb::post && !head.has_content_length() && !head.chunked()) {
      co_await Refuse(stream, options, 400,
                      "body: missing; POST " + std::string(head.target()) +
                          " takes a JSON object, sent with Content-Length and Content-Type: "
                          "application/json");
      co_return;
    }
    if (beast::iequals(head[http::field::expect], "100-continue")) {
      http::response<http::empty_body> go_on{http::status::continue_, head.version()};
      Lowest(stream).expires_after(options.send_timeout);
      co_await http::async_write(stream, go_on, kAwaitEc(ec));
      if (ec) co_return;
    }
    Lowest(stream).expires_after(options.body_timeout);
    co_await http::async_read(stream, buffer, parser, kAwaitEc(ec));
    if (ec == http::error::body_limit) {
      co_await Refuse(stream, options, 413, "body: larger than the limit");
      co_return;
    }
    if (ec == beast::error::timeout) {
      dropped_slow.fetch_add(1, std::memory_order_relaxed);
      co_return;
    }
    if (ec) co_return;

    requests.fetch_add(1, std::memory_order_relaxed);
    connection.Begin(parser.release());
    Lowest(stream).expires_never();
    connection.StartWatching();
    {
      Counted serving(exchanges);
      try {
        co_await handler(connection);
      } catch (const std::exception& e) {
        log::Line(log::Level::kError, "gateway.handler_failed").Field("error", e.what());
      }
    }
    co_await connection.StopWatching();
    if (!connection.answered()) {
      co_await Refuse(stream, options, 500, "internal error");
      co_return;
    }
    if (!connection.keep_alive()) break;
  }
  if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  }
}

asio::awaitable<void> FrontDoor::Impl::Accept() {
  size_t next = 0;
  while (!stopped.load(std::memory_order_relaxed)) {
    Loop& loop = *loops[next];
    next = (next + 1) % loops.size();
    beast::error_code ec;
    tcp::socket socket = co_await acceptor->async_accept(loop.context, kAwaitEc(ec));
    if (ec == asio::error::operation_aborted || stopped.load(std::memory_order_relaxed)) co_return;
    if (ec) {
      // Out of descriptors, most likely: say so, and let a connection
      // close before trying again, rather than spin.
      log::Line(log::Level::kWarn, "gateway.accept_failed").Field("error", ec.message());
      asio::steady_timer pause(acceptor->get_executor(), std::chrono::milliseconds(50));
      co_await pause.async_wait(kAwaitEc(ec));
      continue;
    }
    // Counted here, not when its loop starts serving it, so a burst of
    // accepts cannot overshoot the limit.
    if (static_cast<size_t>(connections.fetch_add(1, std::memory_order_relaxed)) >=
        options.max_connections) {
      connections.fetch_sub(1, std::memory_order_relaxed);
      connections_refused.fetch_add(1, std::memory_order_relaxed);
      socket.close(ec);
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    if (tls) {
      asio::co_spawn(loop.context,
                     Serve(beast::ssl_stream<beast::tcp_stream>(std::move(socket), *tls), loop),
                     asio::detached);
    } else {
      asio::co_spawn(loop.context, Serve(beast::tcp_stream(std::move(socket)), loop),
                     asio::detached);
    }
  }
}

Result<std::unique_ptr<FrontDoor>> FrontDoor::Start(FrontDoorOptions options, Handler handler) {
  auto impl = std::make_unique<Impl>();
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return Status::InvalidArgument("TLS needs both a certificate file and a key file");
  }
  if (!options.tls_cert_file.empty()) {
    for (const auto& [flag, path] : {std::pair{"--tls-cert", &options.tls_cert_file},
                                     std::pair{"--tls-key", &options.tls_key_file}}) {
      if (!std::ifstream(*path)) {
        return Status::InvalidArgument(std::string("TLS: cannot read ") + flag + " '" + *path +
                                       "'");
      }
    }
    impl->tls.emplace(ssl::context::tls_server);
    beast::error_code ec;
    impl->tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                               ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                               ssl::context::no_tlsv1_1,
                           ec);
    impl->tls->use_certificate_chain_file(options.tls_cert_file, ec);
    if (!ec) impl->tls->use_private_key_file(options.tls_key_file, ssl::context::pem, ec);
    if (ec) {
      return Status::InvalidArgument("TLS: cannot load certificate '" + options.tls_cert_file +
                                     "' with key '" + options.tls_key_file + "': " + ec.message());
    }
  }
  const int loops = options.loops > 0
                        ? options.loops
                        : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  for (int i = 0; i < loops; ++i) {
    impl->loops.push_back(std::make_unique<Loop>(options.upstream_timeouts));
  }

  beast::error_code ec;
  const asio::ip::address address = asio::ip::make_address(options.host, ec);
  if (ec) {
    return Status::InvalidArgument("listen: '" + options.host + "' is not an IP address");
  }
  impl->acceptor.emplace(impl->loops[0]->context);
  const tcp::endpoint endpoint(address, options.port);
  impl->acceptor->open(endpoint.protocol(), ec);
  // SO_REUSEADDR only: SO_REUSEPORT would let a second process bind the
  // same port and take half the traffic.
  if (!ec) impl->acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor->bind(endpoint, ec);
  if (!ec) impl->acceptor->listen(SOMAXCONN, ec);
  if (ec) {
    return Status::IOError("listen on " + options.host + ":" + std::to_string(options.port) + ": " +
                           ec.message());
  }
  impl->port = impl->acceptor->local_endpoint().port();
  impl->options = std::move(options);
  impl->handler = std::move(handler);

  Impl* raw = impl.get();
  asio::co_spawn(raw->loops[0]->context, raw->Accept(), asio::detached);
  for (std::unique_ptr<Loop>& loop : raw->loops) {
    loop->thread = std::thread([context = &loop->context] {
      // Work guard: a loop with no connection yet waits for one.
      auto guard = asio::make_work_guard(*context);
      context->run();
    });
  }
  return std::unique_ptr<FrontDoor>(new FrontDoor(std::move(impl)));
}

FrontDoor::FrontDoor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FrontDoor::~FrontDoor() { Stop(); }

uint16_t FrontDoor::port() const { return impl_->port; }
int FrontDoor::loops() const { return static_cast<int>(impl_->loops.size()); }

FrontDoorStats FrontDoor::stats() const {
  return FrontDoorStats{impl_->connections.load(), impl_->exchanges.load(),
                        impl_->connections_refused.load(), impl_->requests.load(),
                        impl_->dropped_slow.load()};
}

std::vector<std::pair<std::string, UpstreamPoolStats>> FrontDoor::upstream_stats() const {
  std::map<std::string, UpstreamPoolStats> sum;
  for (const std::unique_ptr<Loop>& loop : impl_->loops) {
    for (const auto& [url, stats] : loop->pool.stats()) {
      sum[url].idle += stats.idle;
      sum[url].active += stats.active;
    }
  }
  return {sum.begin(), sum.end()};
}

void FrontDoor::Stop() {
  if (impl_->stopped.exchange(true)) return;
  asio::post(impl_->loops[0]->context, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor->close(ignored);
  });
  for (std::unique_ptr<Loop>& loop : impl_->loops) loop->context.stop();
  for (std::unique_ptr<Loop>& loop : impl_->loops) {
    if (loop->thread.joinable()) loop->thread.join();
  }
  impl_->acceptor.reset();
  // The suspended coroutines (with their sockets) go with their contexts.
  impl_->loops.clear();
}

}  // namespace kvgov::gateway
