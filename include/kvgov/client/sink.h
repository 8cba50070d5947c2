#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "kvgov/client/event.h"
#include "kvgov/core/status.h"

namespace kvgov::client {

/// What a sink did with the events handed to it. Every event Emit accepted
/// (`queued`) ends in exactly one of `sent`, `rejected` or `failed`, or is
/// still `pending`:  queued == sent + rejected + failed + pending.
/// Events Emit refused are counted in `dropped` or `invalid` and nowhere
/// else.
struct SinkStats {
  uint64_t queued = 0;    // accepted by Emit
  uint64_t sent = 0;      // accepted by kvgov (HttpSink) or written to the file (SpoolSink)
  uint64_t rejected = 0;  // refused by kvgov: a 4xx for their batch, or their own element error
  uint64_t failed = 0;    // given up: retries exhausted, a write error, or pending at close
  uint64_t pending = 0;   // accepted by Emit and not yet settled
  uint64_t dropped = 0;   // refused by Emit: the queue was full, or the sink was closed
  uint64_t invalid = 0;   // refused by Emit: EncodeEvent refused the event, or it is too large
  uint64_t retries = 0;   // batch re-sends after a 5xx or a connection error (HttpSink)
  uint64_t batches = 0;   // request bodies kvgov answered (HttpSink) or files published (SpoolSink)
  std::string last_error;  // the most recent failure or rejection, for logs; empty if none
};

/// Where a transport's reports go. Implementations are thread-safe: any
/// thread may Emit, Flush and read stats at once. Destroying a sink closes
/// it (see each implementation); no call may race with the destructor.
class Sink {
 public:
  virtual ~Sink() = default;

  /// Hands one event to the sink. Never throws and never waits on the
  /// network; a delivery problem later shows in stats(), never here.
  /// Returns OK when the event was accepted for delivery;
  /// ResourceExhausted when it was dropped because the sink is full;
  /// InvalidArgument when it cannot be encoded (see EncodeEvent) or is too
  /// large for the sink; FailedPrecondition after Close; IOError for a
  /// sink that writes synchronously (SpoolSink) and failed to.
  virtual Status Emit(const Event& event) noexcept = 0;

  /// Waits until every event accepted before the call is settled (sent,
  /// rejected or failed), pushing out partial batches at once. Returns OK,
  /// or Unavailable naming how many are still pending when `timeout`
  /// passes first. Events stay queued after a timeout.
  virtual Status Flush(std::chrono::milliseconds timeout) noexcept = 0;

  /// A consistent snapshot of the counters.
  virtual SinkStats stats() const noexcept = 0;
};

}  // namespace kvgov::client
