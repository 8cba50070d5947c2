#pragma once

// The gateway's connections to the engines' OpenAI servers, on one event
// loop (docs/adr/0034). Internal to kvgov: its interface carries Asio's
// coroutine types.

#include <utility>  // before Asio: see front_door.h

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/connectors/openai_upstream.h"
#include "kvgov/core/mutex.h"
#include "kvgov/core/status.h"

namespace kvgov::gateway {

namespace asio = boost::asio;

struct UpstreamPoolStats {
  int64_t idle = 0;    // kept for the next request
  int64_t active = 0;  // carrying a request
};

class UpstreamPool;

/// One request on one engine connection: its head, then its body piece by
/// piece. Destroying it returns the connection to its pool when the body
/// was read to its end and the engine keeps connections alive; otherwise
/// the connection is closed (the engine sees its client go and aborts the
/// request).
///
/// Thread-compatible: used on its pool's loop only.
class UpstreamCall {
 public:
  UpstreamCall(UpstreamCall&&) noexcept;
  UpstreamCall& operator=(UpstreamCall&&) = delete;
  ~UpstreamCall();

  /// Sends the request and waits for the head of the answer. Unavailable
  /// when the connection failed before any answer (nothing was answered:
  /// the request may go elsewhere), DeadlineExceeded when no head came
  /// within the first-byte timeout, Cancelled after Abort. A kept
  /// connection the engine closed while idle is replaced once, silently.
  asio::awaitable<Status> Send(std::string_view path, std::string body,
                               std::string_view request_id = "");

  int status() const { return status_; }
  const std::string& content_type() const { return content_type_; }
  /// The body has been read to its end.
  bool done() const;

  /// The next piece of the body as it arrives ("" once done()). The view
  /// holds until the next call. DeadlineExceeded when the engine paused
  /// longer than the first-byte timeout, Unavailable when the connection
  /// broke off, Cancelled after Abort.
  asio::awaitable<Result<std::string_view>> Read();

  /// The rest of the body, at most `limit` bytes: ResourceExhausted (and
  /// the connection closed) past it.
  asio::awaitable<Result<std::string>> ReadAll(size_t limit);

  /// Closes the connection now; a Send or Read in progress ends Cancelled.
  void Abort();

 private:
  friend class UpstreamPool;
  struct Connection;
  UpstreamCall(UpstreamPool* pool, std::string base_url, std::unique_ptr<Connection> connection,
               bool kept);

  std::shared_ptr<bool> pool_alive_;
  UpstreamPool* pool_ = nullptr;
  std::string base_url_;
  std::unique_ptr<Connection> connection_;
  bool kept_ = false;
  bool aborted_ = false;
  int status_ = 0;
  std::string content_type_;
};

/// Keep-alive connections to the engines, per engine URL, for one loop.
/// A connection is kept at most kMaxIdle (below uvicorn's default keep-alive
/// of 5 s, so the engine rarely closes one kvgov is about to use) and at
/// most kMaxIdlePerEngine per engine.
///
/// Thread-compatible on its loop; stats() is thread-safe.
class UpstreamPool {
 public:
  static constexpr std::chrono::milliseconds kMaxIdle{2000};
  static constexpr size_t kMaxIdlePerEngine = 256;

  UpstreamPool(asio::any_io_executor executor, connectors::UpstreamTimeouts timeouts);
  ~UpstreamPool();
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  /// A call to `base_url` ("http://host:port", optionally with a path
  /// prefix), on a kept connection or a new one. InvalidArgument for a URL
  /// this pool cannot reach (not http://), Unavailable or DeadlineExceeded
  /// when the connect failed.
  asio::awaitable<Result<UpstreamCall>> Open(std::string_view base_url);

  /// Per engine URL.
  std::vector<std::pair<std::string, UpstreamPoolStats>> stats() const;

  const connectors::UpstreamTimeouts& timeouts() const { return timeouts_; }

 private:
  friend class UpstreamCall;
  struct Counters {
    std::atomic<int64_t> idle{0};
    std::atomic<int64_t> active{0};
  };
  struct Engine;
  Engine& EngineFor(std::string_view base_url);
  void Keep(const std::string& base_url, std::unique_ptr<UpstreamCall::Connection> connection);
  void Released(const std::string& base_url);

  asio::any_io_executor executor_;
  const connectors::UpstreamTimeouts timeouts_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  // Changed on the loop under stats_mu_ and read there without it (the loop
  // is its only writer); stats() reads it under stats_mu_ from any thread.
  // Not KVGOV_GUARDED_BY: the analysis has no way to let the writer's own
  // reads go unlocked.
  std::map<std::string, std::unique_ptr<Engine>, std::less<>> engines_;
  mutable Mutex stats_mu_;  // the map's shape, for stats(); the counters are atomics
};

}  // namespace kvgov::gateway
