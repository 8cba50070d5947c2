#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "kvgov/core/engine_events.h"
#include "kvgov/core/status.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/ingest/engine_spec.h"

namespace kvgov::ingest {

/// Fetches batches an engine already published, from its replay socket.
/// Implemented over ZeroMQ in src/transport/zmq; a fake in tests.
class ReplaySource {
 public:
  virtual ~ReplaySource() = default;

  /// Asks for every buffered batch with seq >= start_seq and hands each to
  /// `on_batch` in the order received, until the engine's end marker.
  /// Bounded in time and count by the implementation. Returns Unavailable
  /// when the engine does not answer in time; batches already handed over
  /// stay handed over.
  virtual Status Replay(uint64_t start_seq,
                        const std::function<void(uint64_t seq, std::string_view payload)>&
                            on_batch) = 0;
};

/// Counters of one stream, readable from any thread while the stream runs.
struct StreamStats {
  static constexpr std::array<std::string_view, 3> kEventTypes = {
      "BlockStored", "BlockRemoved", "AllBlocksCleared"};
  // The adapters' three reasons, and bad_framing for a message that is not
  // [topic, 8-byte seq, payload].
  static constexpr std::array<std::string_view, 4> kDecodeErrorReasons = {
      "malformed_msgpack", "limit_exceeded", "bad_schema", "bad_framing"};

  std::array<std::atomic<uint64_t>, kEventTypes.size()> events{};
  std::array<std::atomic<uint64_t>, kDecodeErrorReasons.size()> decode_errors{};
  std::atomic<uint64_t> batches{0};  // decoded, counted once their events are applied
  std::atomic<uint64_t> duplicates{0};
  std::atomic<uint64_t> seq_gaps{0};
  std::atomic<uint64_t> replays_ok{0};
  std::atomic<uint64_t> replays_failed{0};
  std::atomic<uint64_t> restarts{0};
  std::atomic<uint64_t> rejected_events{0};  // decoded but refused by the index
  std::atomic<uint64_t> orphan_blocks{0};
  std::atomic<uint64_t> unknown_removals{0};
  std::atomic<uint64_t> unknown_medium_blocks{0};
  std::atomic<uint64_t> ignored_fields{0};
  std::atomic<uint64_t> ignored_event_types{0};
  std::atomic<int64_t> last_seq{-1};  // -1 before the first applied batch
};

/// Receives the envelope entry every applied engine event lowers to.
using EntrySink = std::function<void(const Entry&)>;

/// Sees every engine event just before the index applies it, with the seq
/// of its batch: governance witnesses removals through it (a block's key is
/// still resolvable from its engine hash at that point). Called from the
/// stream's thread; must be quick.
using EventObserver =
    std::function<void(std::string_view worker, uint64_t seq, const EngineEvent& event)>;

/// Makes a stream's progress durable (implemented over the store by the
/// server). Called from the stream's thread.
class StreamDurability {
 public:
  virtual ~StreamDurability() = default;
  /// Batch `seq` (its raw payload, timestamp `ts`) was just applied to the
  /// index, or counted as undecodable.
  virtual void OnApplied(std::string_view worker, uint64_t seq, double ts,
                         std::string_view payload) = 0;
  /// The engine restarted: the worker was cleared and its seq starts over.
  virtual void OnRestart(std::string_view worker) = 0;
};

/// Follows one engine stream (one worker, one data-parallel rank): orders
/// its batches by sequence number, repairs gaps through the replay socket,
/// detects restarts, and applies the events to the residency index.
///
/// Sequence rules (docs/formats/engine-events.md):
///  - seq == last + 1 is applied. A stream's first batch must be its
///    publisher's first seq (0 for vLLM and SGLang, 1 for Mooncake's
///    master); anything later is a gap from there.
///  - seq > last + 1 is a gap: replay from last + 1 up to seq - 1, apply what
///    came back in order, then this batch. A gap replay cannot fill marks
///    the worker stale; it turns live again at the next AllBlocksCleared or
///    restart (points from which the index is known to be complete).
///  - seq <= last is a duplicate when its batch timestamp is not newer than
///    the last applied one, and a restart otherwise: the worker is cleared
///    and the stream starts over at this batch.
///  - A payload that does not decode is counted by reason, logged, and
///    skipped (its seq counts as consumed: replay would return the same
///    bytes). The stream never stops for bad input.
///
/// Not thread-safe: one thread calls OnMessage. stats() may be read from
/// any thread.
class EngineStream {
 public:
  /// `index` must outlive the stream and already have `worker` registered.
  /// `replay` may be null (no replay socket): gaps then mark the worker
  /// stale. `sink` may be empty; `durability` may be null (nothing
  /// persisted).
  EngineStream(std::string worker, EngineKind kind, index::ResidencyIndex* index,
               ReplaySource* replay, EntrySink sink, StreamDurability* durability = nullptr);

  /// Installs the observer (before the stream's thread starts).
  void set_observer(EventObserver observer) { observer_ = std::move(observer); }

  /// Recovery after a restart of kvgov: re-applies a batch the durability
  /// layer logged (without logging it again and without sequence checks).
  void Reapply(uint64_t seq, std::string_view payload);

  /// Recovery: continue as if batch `last_seq` (timestamp `last_ts`, payload
  /// digest `last_digest` = Sha256Hex of its bytes) was the last one
  /// applied, so the next live batch past it is a gap repaired by replay.
  /// The worker's stale flag is taken from the index. Before the first live
  /// batch is applied, the engine's own batch `last_seq` is fetched from its
  /// replay socket and compared with `last_digest`: a different batch there
  /// means the engine restarted while kvgov was down (sequence numbers alone
  /// cannot show it), and the worker starts over. An empty digest skips the
  /// check.
  void Resume(uint64_t last_seq, double last_ts, std::string last_digest);

  /// Handles one live message.
  void OnMessage(uint64_t seq, std::string_view payload);

  /// Counts a message whose framing was wrong (no usable seq), so it could
  /// not be ordered at all.
  void OnBadFraming(std::string_view detail);

  const std::string& worker() const { return worker_; }
  const StreamStats& stats() const { return stats_; }

 private:
  // A decoded batch, or the reason it did not decode.
  Result<EngineEventBatch> Decode(std::string_view payload);
  void Apply(uint64_t seq, std::string_view payload, const Result<EngineEventBatch>& batch);
  void ApplyBatch(uint64_t seq, const Result<EngineEventBatch>& batch);
  // Replays [start, stop) and reports whether every seq arrived.
  bool Replay(uint64_t start, uint64_t stop);
  void StartOver();
  // Compares the engine's batch at the resume point with the logged one;
  // false when the engine holds a different batch there.
  bool ResumePointMatches();
  void MarkStale();
  // The worker's block size in the index (0 while it is not registered).
  int64_t BlockSize();

  const std::string worker_;
  const EngineKind kind_;
  index::ResidencyIndex* const index_;
  ReplaySource* const replay_;
  const EntrySink sink_;
  StreamDurability* const durability_;
  EventObserver observer_;
  const uint64_t first_seq_;  // what the publisher counts from
  bool reapplying_ = false;   // recovery: apply without logging again
  // Recovery: the digest of the last logged batch, to check against the
  // engine's copy before going on. Cleared once checked.
  std::optional<std::string> resume_digest_;
  StreamStats stats_;
  std::optional<uint64_t> last_seq_;
  double last_ts_ = 0;
  bool stale_ = false;
  int64_t block_size_ = 0;  // cached by BlockSize()
};

}  // namespace kvgov::ingest
