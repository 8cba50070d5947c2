#pragma once

#include <chrono>
#include <functional>
#include <span>
#include <memory>
#include <string>
#include <vector>

#include "kvgov/core/status.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/ingest/engine_spec.h"
#include "kvgov/ingest/engine_stream.h"

namespace kvgov::transport {

/// Limits on one replay request (a gap repair).
struct ReplayLimits {
  std::chrono::milliseconds idle_timeout{1000};    // between two replies
  std::chrono::milliseconds total_timeout{10000};  // for the whole replay
  uint64_t max_batches = 100000;
};

/// A stream kvgov follows, as seen from outside: for /v1/workers and
/// metrics. `stats` stays valid while the ZmqIngest lives.
struct StreamView {
  std::string worker;
  ingest::EngineKind kind;
  std::string events;
  std::string replay;  // "" when the engine has no replay socket
  const ingest::StreamStats* stats;
};

/// Subscribes to engines' ZeroMQ event streams: one thread per stream with
/// a SUB socket on the engine's PUB endpoint, and a DEALER opened per gap
/// to its ROUTER replay endpoint. Each thread feeds one EngineStream. The
/// only user of ZeroMQ in kvgov.
///
/// Thread-safe: AddEngine(s), Streams and Stop may be called from any thread.
class ZmqIngest {
 public:
  /// Called for each stream before its thread starts, to bring it back to
  /// where kvgov was before a restart (the server's store recovery). The
  /// streams of one AddEngines call recover at once, on up to one thread
  /// per core, so it must be safe to call for different streams together.
  using RecoverFn = std::function<Status(ingest::EngineStream&)>;

  /// `index` must outlive this object. `sink` receives every lowered entry
  /// and is called from the stream threads concurrently. `durability` (may
  /// be null) must outlive this object; `recover` may be empty.
  ZmqIngest(index::ResidencyIndex* index, ingest::EntrySink sink, ReplayLimits limits = {},
            ingest::StreamDurability* durability = nullptr, RecoverFn recover = {},
            ingest::StreamObserver observer = {});
  ~ZmqIngest();
  ZmqIngest(const ZmqIngest&) = delete;
  ZmqIngest& operator=(const ZmqIngest&) = delete;

  /// Registers the engine's workers in the index (one per data-parallel
  /// rank), recovers each stream, and starts following them. AlreadyExists
  /// if a worker id is taken; InvalidArgument for a bad spec; whatever the
  /// recovery returns.
  Status AddEngine(const ingest::EngineSpec& engine);

  /// The same for several engines, their streams recovered in parallel (a
  /// restart then takes about as long as its largest worker's recovery,
  /// not the sum, where cores allow). Errors name the engine; on one, no
  /// stream of the call is started (the workers registered stay).
  Status AddEngines(std::span<const ingest::EngineSpec> engines);

  std::vector<StreamView> Streams() const;

  /// Stops every stream thread and waits for them. Idempotent.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgov::transport
