#include "gateway/upstream_pool.h"

#include <utility>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <deque>
#include <limits>
#include <optional>

namespace kvgov::gateway {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

struct Endpoint {
  std::string host;
  std::string port;
  std::string prefix;  // a path prefix, without its trailing '/'
};

Result<Endpoint> ParseBaseUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) {
    return Status::InvalidArgument("engine URL '" + std::string(url) +
                                   "': the gateway reaches engines over http:// only");
  }
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  Endpoint endpoint;
  if (slash != std::string_view::npos) {
    endpoint.prefix = std::string(rest.substr(slash));
    while (endpoint.prefix.ends_with('/')) endpoint.prefix.pop_back();
  }
  // [v6]:port, host:port or host.
  size_t colon = std::string_view::npos;
  if (authority.starts_with('[')) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return Status::InvalidArgument("engine URL '" + std::string(url) + "': unclosed '['");
    }
    endpoint.host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size() && authority[close + 1] == ':') colon = close + 1;
  } else {
    colon = authority.rfind(':');
    endpoint.host = std::string(authority.substr(0, colon));
  }
  endpoint.port = colon == std::string_view::npos ? "80" : std::string(authority.substr(colon + 1));
  if (endpoint.host.empty() || endpoint.port.empty()) {
    return Status::InvalidArgument("engine URL '" + std::string(url) + "': no host or port");
  }
  return endpoint;
}

std::string Describe(const beast::error_code& ec) {
  return ec == beast::error::timeout ? "timed out" : ec.message();
}

}  // namespace

// A body is read through a fixed buffer, so an answer of any length costs
// kReadChunk bytes per stream here.
struct UpstreamCall::Connection {
  static constexpr size_t kReadChunk = 8192;

  explicit Connection(const asio::any_io_executor& executor) : stream(executor) {}

  beast::tcp_stream stream;
  Endpoint endpoint;
  beast::flat_buffer buffer;
  std::optional<http::response_parser<http::buffer_body>> parser;
  std::array<char, kReadChunk> chunk;
  Clock::time_point idle_since;
};

struct UpstreamPool::Engine {
  std::deque<std::unique_ptr<UpstreamCall::Connection>> idle;  // oldest first
  Counters* counters = nullptr;
  std::unique_ptr<Counters> owned_counters = std::make_unique<Counters>();
};

UpstreamPool::UpstreamPool(asio::any_io_executor executor, connectors::UpstreamTimeouts timeouts)
    : executor_(std::move(executor)), timeouts_(timeouts) {}

UpstreamPool::~UpstreamPool() { *alive_ = false; }

UpstreamPool::Engine& UpstreamPool::EngineFor(std::string_view base_url) {
  if (auto it = engines_.find(base_url); it != engines_.end()) return *it->second;
  MutexLock lock(stats_mu_);
  auto engine = std::make_unique<Engine>();
  engine->counters = engine->owned_counters.get();
  return *engines_.emplace(std::string(base_url), std::move(engine)).first->second;
}

std::vector<std::pair<std::string, UpstreamPoolStats>> UpstreamPool::stats() const {
  MutexLock lock(stats_mu_);
  std::vector<std::pair<std::string, UpstreamPoolStats>> out;
  for (const auto& [url, engine] : engines_) {
    out.emplace_back(url,
                     UpstreamPoolStats{engine->counters->idle.load(std::memory_order_relaxed),
                                       engine->counters->active.load(std::memory_order_relaxed)});
  }
  return out;
}

asio::awaitable<Result<UpstreamCall>> UpstreamPool::Open(std::string_view base_url) {
  Engine& engine = EngineFor(base_url);
  const Clock::time_point now = Clock::now();
  while (!engine.idle.empty()) {
    std::unique_ptr<UpstreamCall::Connection> kept = std::move(engine.idle.back());
    engine.idle.pop_back();
    engine.counters->idle.fetch_sub(1, std::memory_order_relaxed);
    if (now - kept->idle_since < kMaxIdle) {
      engine.counters->active.fetch_add(1, std::memory_order_relaxed);
      co_return UpstreamCall(this, std::string(base_url), std::move(kept), /*kept=*/true);
    }
  }
  Result<Endpoint> endpoint = ParseBaseUrl(base_url);
  if (!endpoint.ok()) co_return endpoint.status();
  auto connection = std::make_unique<UpstreamCall::Connection>(executor_);
  connection->endpoint = *std::move(endpoint);
  beast::error_code ec;
  tcp::resolver resolver(executor_);
  const tcp::resolver::results_type addresses =
      co_await resolver.async_resolve(connection->endpoint.host, connection->endpoint.port,
                                      asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    co_return Status::Unavailable("engine '" + std::string(base_url) +
                                  "': cannot resolve its host: " + ec.message());
  }
  connection->stream.expires_after(std::chrono::milliseconds(timeouts_.connect_ms));
  co_await connection->stream.async_connect(addresses,
                                            asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    const std::string why = "engine '" + std::string(base_url) + "': connect " + Describe(ec);
    if (ec == beast::error::timeout) co_return Status::DeadlineExceeded(why);
    co_return Status::Unavailable(why);
  }
  connection->stream.socket().set_option(tcp::no_delay(true), ec);
  engine.counters->active.fetch_add(1, std::memory_order_relaxed);
  co_return UpstreamCall(this, std::string(base_url), std::move(connection), /*kept=*/false);
}

void UpstreamPool::Keep(const std::string& base_url,
                        std::unique_ptr<UpstreamCall::Connection> connection) {
  Engine& engine = EngineFor(base_url);
  engine.counters->active.fetch_sub(1, std::memory_order_relaxed);
  if (engine.idle.size() >= kMaxIdlePerEngine) {
    engine.idle.pop_front();  // the oldest goes; it would expire first
    engine.counters->idle.fetch_sub(1, std::memory_order_relaxed);
  }
  connection->idle_since = Clock::now();
  connection->parser.reset();
  connection->stream.expires_never();
  engine.idle.push_back(std::move(connection));
  engine.counters->idle.fetch_add(1, std::memory_order_relaxed);
}

void UpstreamPool::Released(const std::string& base_url) {
  EngineFor(base_url).counters->active.fetch_sub(1, std::memory_order_relaxed);
}

UpstreamCall::UpstreamCall(UpstreamPool* pool, std::string base_url,
                           std::unique_ptr<Connection> connection, bool kept)
    : pool_alive_(pool->alive_),
      pool_(pool),
      base_url_(std::move(base_url)),
      connection_(std::move(connection)),
      kept_(kept) {}

UpstreamCall::UpstreamCall(UpstreamCall&&) noexcept = default;

UpstreamCall::~UpstreamCall() {
  if (connection_ == nullptr || !pool_alive_ || !*pool_alive_) return;
  const bool reusable = !aborted_ && connection_->parser && connection_->parser->is_done() &&
                        connection_->parser->keep_alive() && connection_->stream.socket().is_open();
  if (reusable) {
    pool_->Keep(base_url_, std::move(connection_));
  } else {
    beast::error_code ignored;
    connection_->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    connection_->stream.close();
    pool_->Released(base_url_);
  }
}

bool UpstreamCall::done() const {
  return connection_ == nullptr || (connection_->parser && connection_->parser->is_done());
}

void UpstreamCall::Abort() {
  if (aborted_) return;
  aborted_ = true;
  if (connection_ == nullptr) return;
  beast::error_code ignored;
  connection_->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  connection_->stream.close();
}

asio::awaitable<Status> UpstreamCall::Send(std::string_view path, std::string body,
                                           std::string_view request_id) {
  const connectors::UpstreamTimeouts timeouts = pool_->timeouts();
  for (int attempt = 0;; ++attempt) {
    if (aborted_) co_return Status::Cancelled("the client went away");
    Connection& c = *connection_;
    http::request<http::string_body> request{http::verb::post,
                                             c.endpoint.prefix + std::string(path), 11};
    request.set(http::field::host, c.endpoint.host + ":" + c.endpoint.port);
    request.set(http::field::content_type, "application/json");
    request.set(http::field::accept, "application/json, text/event-stream");
    if (!request_id.empty()) request.set("X-Request-Id", request_id);
    request.keep_alive(true);
    request.body() = body;
    request.prepare_payload();
    const Clock::time_point sent = Clock::now();
    beast::error_code ec;
    c.stream.expires_after(std::chrono::milliseconds(timeouts.first_byte_ms));
    co_await http::async_write(c.stream, request, asio::redirect_error(asio::use_awaitable, ec));
    if (!ec) {
      c.parser.emplace();
      // Bounded by the callers (ReadAll, the relay). Not boost::none: Beast
      // 1.74 compares a Content-Length with a disabled limit as exceeding it.
      c.parser->body_limit(std::numeric_limits<uint64_t>::max());
      c.parser->header_limit(64 * 1024);
      co_await http::async_read_header(c.stream, c.buffer, *c.parser,
                                       asio::redirect_error(asio::use_awaitable, ec));
    }
    if (aborted_) co_return Status::Cancelled("the client went away");
    if (!ec) {
      status_ = static_cast<int>(c.parser->get().result_int());
      content_type_ = std::string(c.parser->get()[http::field::content_type]);
      co_return Status::Ok();
    }
    // A kept connection the engine closed while it sat idle fails at once;
    // nothing was answered, so the request goes once more on a new one.
    const bool closed_while_kept =
        kept_ && attempt == 0 && ec != beast::error::timeout &&
        Clock::now() - sent < std::chrono::milliseconds(timeouts.first_byte_ms);
    if (closed_while_kept) {
      c.stream.close();
      pool_->Released(base_url_);
      connection_.reset();
      Result<UpstreamCall> fresh = co_await pool_->Open(base_url_);
      if (!fresh.ok()) co_return fresh.status();
      connection_ = std::move(fresh->connection_);
      kept_ = false;
      if (aborted_) co_return Status::Cancelled("the client went away");
      continue;
    }
    const std::string why =
        "engine '" + base_url_ + "': " +
        (ec == beast::error::timeout
             ? "no answer within " + std::to_string(timeouts.first_byte_ms) + " ms"
             : "connection failed before an answer: " + ec.message());
    if (ec == beast::error::timeout) co_return Status::DeadlineExceeded(why);
    co_return Status::Unavailable(why);
  }
}

asio::awaitable<Result<std::string_view>> UpstreamCall::Read() {
  const connectors::UpstreamTimeouts timeouts = pool_->timeouts();
  while (true) {
    if (aborted_) co_return Status::Cancelled("the client went away");
    Connection& c = *connection_;
    if (!c.parser || c.parser->is_done()) co_return std::string_view();
    c.parser->get().body().data = c.chunk.data();
    c.parser->get().body().size = c.chunk.size();
    beast::error_code ec;
    c.stream.expires_after(std::chrono::milliseconds(timeouts.first_byte_ms));
    co_await http::async_read_some(c.stream, c.buffer, *c.parser,
                                   asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (aborted_) co_return Status::Cancelled("the client went away");
    if (ec) {
      const std::string why =
          "engine '" + base_url_ + "': " +
          (ec == beast::error::timeout
               ? "paused longer than " + std::to_string(timeouts.first_byte_ms) + " ms"
               : "the answer broke off: " + ec.message());
      aborted_ = true;  // a connection in an unknown state is not kept
      if (ec == beast::error::timeout) co_return Status::DeadlineExceeded(why);
      co_return Status::Unavailable(why);
    }
    const size_t n = c.chunk.size() - c.parser->get().body().size;
    if (n > 0 || c.parser->is_done()) co_return std::string_view(c.chunk.data(), n);
  }
}

asio::awaitable<Result<std::string>> UpstreamCall::ReadAll(size_t limit) {
  std::string body;
  while (!done()) {
    Result<std::string_view> piece = co_await Read();
    if (!piece.ok()) co_return piece.status();
    if (body.size() + piece->size() > limit) {
      Abort();
      co_return Status::ResourceExhausted(
          "engine '" + base_url_ + "': the answer is longer than " + std::to_string(limit) +
          " bytes, kvgov's limit on an answer it holds whole (ask for a stream instead)");
    }
    body.append(*piece);
  }
  co_return body;
}

}  // namespace kvgov::gateway
