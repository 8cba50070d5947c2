#pragma once

// The gateway's listener (docs/adr/0034): HTTP/1.1, plain or TLS, on a
// fixed number of event loops. Internal to kvgov: the handler interface
// carries Asio's coroutine types, so this header lives beside the code and
// is included by kvgov_server as "gateway/front_door.h".

// g++ 12 in C++20 mode: Boost 1.74's awaitable.hpp uses std::exchange
// without including <utility> (docs/reference debian-dependencies).
#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gateway/upstream_pool.h"
#include "kvgov/core/status.h"

namespace kvgov::gateway {

namespace asio = boost::asio;

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct FrontDoorOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: a free port
  int loops = 0;      // event-loop threads; 0: one per core
  size_t max_body_bytes = size_t{8} << 20;
  size_t max_header_bytes = size_t{64} << 10;
  // Between requests on a kept connection, and before a new connection's
  // first byte.
  std::chrono::milliseconds idle_timeout{75'000};
  // From a request's first byte to its last header: a client that trickles
  // its head (slow-loris) is dropped here, whatever its pace.
  std::chrono::milliseconds head_timeout{10'000};
  // For the body, once the head is read.
  std::chrono::milliseconds body_timeout{60'000};
  // A client that takes no byte of an answer for this long is dropped.
  std::chrono::milliseconds send_timeout{60'000};
  // Connections past this are closed as they are accepted.
  size_t max_connections = 200'000;
  // Both, or neither.
  std::string tls_cert_file;
  std::string tls_key_file;
  connectors::UpstreamTimeouts upstream_timeouts;
  // The body of an answer the listener makes itself (a malformed request,
  // one over a limit): status and what was wrong, in words. Called on a
  // loop thread.
  std::function<std::string(int status, std::string_view message)> error_body;
};

/// One request and its answer, on the event loop of its connection. The
/// handler answers exactly once: Respond, or StartStream then Send... then
/// EndStream. A handler that returns without answering is answered 500.
///
/// Thread-compatible: used from its loop only (the handler's coroutine).
class Exchange {
 public:
  virtual ~Exchange() = default;

  virtual const Request& request() const = 0;

  /// The whole answer. False when it did not reach the client.
  virtual asio::awaitable<bool> Respond(int status, std::string_view content_type, std::string body,
                                        const HeaderList& headers = {}) = 0;
  /// A chunked answer's head; false when the client is gone.
  virtual asio::awaitable<bool> StartStream(int status, std::string_view content_type) = 0;
  /// One chunk, written before this returns (a slow client slows the
  /// caller down): false when the client is gone.
  virtual asio::awaitable<bool> Send(std::string_view bytes) = 0;
  virtual asio::awaitable<void> EndStream() = 0;

  /// True once the client closed its connection, or a write to it failed.
  virtual bool client_gone() const = 0;
  /// Runs `on_gone` (on this loop) if the client goes away before the
  /// handler returns; replaces an earlier one.
  virtual void OnClientGone(std::function<void()> on_gone) = 0;

  /// The connection's loop's pool of engine connections.
  virtual UpstreamPool& upstreams() = 0;
};

using Handler = std::function<asio::awaitable<void>(Exchange&)>;

/// What the listener holds now. Counters since start.
struct FrontDoorStats {
  int64_t connections = 0;           // open
  int64_t exchanges = 0;             // requests a handler is serving
  uint64_t connections_refused = 0;  // past max_connections
  uint64_t requests = 0;
  uint64_t dropped_slow = 0;  // head, body or send past its timeout
};

/// The listener and its loops. Every timeout runs on the loops' timers: no
/// thread waits for a client or an engine.
///
/// Thread-safe: Start, Stop and stats from any thread; the handler runs on
/// the loops.
class FrontDoor {
 public:
  /// Binds (SO_REUSEADDR, no SO_REUSEPORT, backlog SOMAXCONN) and starts the
  /// loops. IOError when the address is taken, InvalidArgument when the TLS
  /// files do not load.
  static Result<std::unique_ptr<FrontDoor>> Start(FrontDoorOptions options, Handler handler);
  ~FrontDoor();
  FrontDoor(const FrontDoor&) = delete;
  FrontDoor& operator=(const FrontDoor&) = delete;

  uint16_t port() const;
  int loops() const;
  FrontDoorStats stats() const;
  /// Idle plus in-use engine connections, by engine URL, over the loops.
  std::vector<std::pair<std::string, UpstreamPoolStats>> upstream_stats() const;

  /// Stops accepting, closes every connection and joins the loops. The
  /// handlers' coroutines are destroyed, not resumed.
  void Stop();

  struct Impl;

 private:
  explicit FrontDoor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgov::gateway
