#pragma once

// A minimal HTTP/1.1 client over POSIX sockets, just enough to POST a JSON
// body to kvgov and read its answer: plain HTTP, Content-Length request
// bodies, Content-Length, chunked or read-to-close answers, keep-alive.
// It exists so the installed SDK links no third-party library
// (docs/adr/0010-client-sdk.md). Internal to kvgov_client.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "kvgov/core/status.h"

namespace kvgov::client::internal {

/// Where requests go: from "http://HOST[:PORT][/PREFIX]".
struct HttpEndpoint {
  std::string host;         // without brackets for IPv6
  std::string port;         // decimal, for getaddrinfo
  std::string host_header;  // "HOST:PORT", IPv6 bracketed
  std::string path_prefix;  // "" or "/prefix", no trailing slash
};

/// Parses an http:// URL. Returns InvalidArgument for another scheme (https
/// included: the SDK has no TLS), user info, a query or fragment, a port
/// outside 1..65535, or bytes a request line cannot carry.
Result<HttpEndpoint> ParseHttpUrl(std::string_view url);

/// Lets one thread abandon another's blocking HttpConnection call: a
/// self-pipe that the connection polls beside its socket. Interrupt is
/// sticky until Reset. Thread-safe. Name resolution (getaddrinfo) cannot
/// be interrupted; it is bounded by the system resolver's own timeouts.
class Interrupter {
 public:
  Interrupter();
  ~Interrupter();
  Interrupter(const Interrupter&) = delete;
  Interrupter& operator=(const Interrupter&) = delete;

  void Interrupt() noexcept;
  bool interrupted() const noexcept { return interrupted_.load(std::memory_order_acquire); }
  /// The read end to poll for POLLIN; -1 if the pipe could not be made, in
  /// which case calls are bounded only by their timeouts.
  int fd() const noexcept { return read_fd_; }

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
  std::atomic<bool> interrupted_{false};
};

struct HttpResponse {
  int status = 0;
  std::string body;
};

struct HttpTimeouts {
  std::chrono::milliseconds connect{1000};
  std::chrono::milliseconds request{5000};  // first byte sent to last byte read
};

/// The largest answer body read; kvgov's answers to POST /v1/events are a
/// few hundred bytes plus one line per rejected element.
inline constexpr size_t kMaxResponseBodyBytes = size_t{4} << 20;
/// The largest status line plus headers read.
inline constexpr size_t kMaxResponseHeaderBytes = size_t{64} << 10;

/// One kept-alive connection to one endpoint, opened on first use and
/// reopened after any failure. Not thread-safe: one thread owns it.
class HttpConnection {
 public:
  /// `interrupter` may be null; it must outlive the connection.
  HttpConnection(HttpEndpoint endpoint, HttpTimeouts timeouts, const Interrupter* interrupter);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  /// POSTs `body` to path_prefix + `path` with `headers` (complete header
  /// lines, each ending in "\r\n") and returns the answer, whatever its
  /// status. A kept-alive connection the server closed while idle is
  /// reopened and the request sent once more on the new one, since the
  /// server never read it. Returns Unavailable for every transport failure
  /// (name resolution, connect, reset, timeout, interruption, an answer
  /// that is not HTTP/1.x or is over the limits above); the connection is
  /// closed then.
  Result<HttpResponse> Post(std::string_view path, std::string_view headers, std::string_view body);

  /// Closes the socket, if open.
  void Close() noexcept;

 private:
  using Deadline = std::chrono::steady_clock::time_point;
  // Why a request failed: a stale kept-alive connection is worth one more
  // try on a fresh one; anything else is the caller's to retry.
  enum class Failure { kNone, kStale, kOther };

  Status Connect(Deadline deadline);
  Status SendAll(std::string_view head, std::string_view body, Deadline deadline, Failure* failure);
  Result<HttpResponse> ReadResponse(Deadline deadline, Failure* failure);
  // Reads more bytes into buffer_; 0 at end of stream.
  Result<size_t> ReadSome(Deadline deadline);
  // Waits for `events` on the socket; Unavailable on timeout or interrupt.
  Status Wait(short events, Deadline deadline);

  const HttpEndpoint endpoint_;
  const HttpTimeouts timeouts_;
  const Interrupter* const interrupter_;
  int fd_ = -1;
  std::string buffer_;  // bytes read and not yet consumed
};

}  // namespace kvgov::client::internal
