#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "kvgov/client/sink.h"

namespace kvgov::client {

/// How an HttpSink reaches kvgov and how it batches and retries.
struct HttpSinkOptions {
  /// kvgov's base URL, "http://HOST[:PORT][/PREFIX]"; events go to
  /// PREFIX/v1/events. Plain HTTP only: the SDK carries no TLS library
  /// (docs/adr/0010-client-sdk.md). For a kvgov that serves HTTPS, put a
  /// local TLS proxy in between or use a SpoolSink.
  std::string url;
  /// Sent as "Authorization: Bearer <token>" when set (a token with the
  /// ingest role; docs/formats/tokens.md).
  std::string bearer_token;

  /// A batch is posted once it holds this many events or bytes of events,
  /// or once its oldest event has waited max_batch_age, whichever is first.
  size_t max_batch_events = 512;
  size_t max_batch_bytes = size_t{1} << 20;  // also the largest event accepted
  std::chrono::milliseconds max_batch_age{50};

  /// The queue between Emit and the sender. When either bound is reached,
  /// Emit drops the new event (counted in `dropped`) rather than wait.
  size_t max_queue_events = 65536;
  size_t max_queue_bytes = size_t{64} << 20;

  /// Tries per batch, the first included, for 5xx answers and connection
  /// errors; a 4xx is never retried. Between tries the sender waits an
  /// exponentially growing, jittered backoff.
  int max_attempts = 5;
  std::chrono::milliseconds initial_backoff{50};
  std::chrono::milliseconds max_backoff{2000};

  std::chrono::milliseconds connect_timeout{1000};
  /// Limit on one request, from the first byte sent to the last byte read.
  std::chrono::milliseconds request_timeout{5000};
  /// How long the destructor keeps delivering what is queued before it
  /// gives the rest up (counted in `failed`).
  std::chrono::milliseconds close_timeout{5000};
};

/// A Sink that posts events to kvgov's POST /v1/events in batches from one
/// background thread, over a kept-alive HTTP/1.1 connection.
///
/// Emit encodes the event on the caller's thread and appends it to a
/// bounded queue; it takes one mutex that the sender holds only to move a
/// batch out or to count, never across I/O, so it does not wait on the
/// network or on a slow kvgov. Delivery is at least once: a batch whose
/// answer is lost (a timeout, a 5xx after kvgov applied part of it) is sent
/// again, and kvgov applies repeated placements idempotently.
///
/// Thread-safe: Emit, Flush, Close and stats may be called from any thread.
/// The destructor calls Close(options.close_timeout).
class HttpSink final : public Sink {
 public:
  /// Validates the options and starts the sender thread. Nothing is sent
  /// and no connection is made until the first batch, so a kvgov that is
  /// down at start costs nothing but retries. Returns InvalidArgument for a
  /// URL that is not http://HOST[:PORT][/PREFIX], a token holding bytes a
  /// header cannot carry, or a zero bound or attempt count.
  static Result<std::unique_ptr<HttpSink>> Create(HttpSinkOptions options);

  ~HttpSink() override;
  HttpSink(const HttpSink&) = delete;
  HttpSink& operator=(const HttpSink&) = delete;

  Status Emit(const Event& event) noexcept override;
  Status Flush(std::chrono::milliseconds timeout) noexcept override;
  SinkStats stats() const noexcept override;

  /// Stops accepting events, delivers what is queued for up to `timeout`
  /// (a request in flight at the deadline is abandoned), counts the rest as
  /// failed and joins the sender. Idempotent; later Emits return
  /// FailedPrecondition. Returns OK when nothing was given up, else
  /// Unavailable naming how many events were.
  Status Close(std::chrono::milliseconds timeout) noexcept;

 private:
  struct Impl;
  explicit HttpSink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgov::client
