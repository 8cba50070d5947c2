#pragma once

#include <chrono>
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
  std::chrono::milliseconds idle_timeout{1000};   // between two replies
  std::chrono::milliseconds total_timeout{10000};  // for the whole replay
  uint64_t max_batches = 100000;
};

/// A stream kvgov follows, as seen from outside: for /v1/workers and
/// metrics. `stats` stays valid while the ZmqIngest lives.
struct StreamView {
  std::string worker;
  ingest::EngineKind kind;
  std::string events;
  const ingest::StreamStats* stats;
};

/// Subscribes to engines' ZeroMQ event streams: one thread per stream with
/// a SUB socket on the engine's PUB endpoint, and a DEALER opened per gap
/// to its ROUTER replay endpoint. Each thread feeds one EngineStream. The
/// only user of ZeroMQ in kvgov.
///
/// Thread-safe: AddEngine, Streams and Stop may be called from any thread.
class ZmqIngest {
 public:
  /// `index` must outlive this object. `sink` receives every lowered entry
  /// and is called from the stream threads concurrently.
  ZmqIngest(index::ResidencyIndex* index, ingest::EntrySink sink, ReplayLimits limits = {});
  ~ZmqIngest();
  ZmqIngest(const ZmqIngest&) = delete;
  ZmqIngest& operator=(const ZmqIngest&) = delete;

  /// Registers the engine's workers in the index (one per data-parallel
  /// rank) and starts following their streams. AlreadyExists if a worker
  /// id is taken; InvalidArgument for a bad spec.
  Status AddEngine(const ingest::EngineSpec& engine);

  std::vector<StreamView> Streams() const;

  /// Stops every stream thread and waits for them. Idempotent.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgov::transport
