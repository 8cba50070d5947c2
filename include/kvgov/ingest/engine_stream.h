#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "kvgov/core/engine_events.h"
#include "kvgov/core/mutex.h"
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
  virtual Status Replay(
      uint64_t start_seq,
      const std::function<void(uint64_t seq, std::string_view payload)>& on_batch) = 0;
};

/// Why a worker's residency cannot be believed. Recoverable reasons clear
/// once kvgov sees that it has every batch up to a live one; the others only
/// at a point where the engine's cache is known (AllBlocksCleared, restart).
enum class StaleReason : uint8_t {
  kNone,
  kGapLost,             // batches between two kvgov saw are lost for good
  kReplayRolledOver,    // the engine's replay buffer no longer reaches back
  kReplayUnanswered,    // recoverable: the replay socket did not answer
  kStaleBeforeRestart,  // kvgov restarted with the worker already stale
};
std::string_view ToString(StaleReason reason);
bool IsRecoverable(StaleReason reason);

/// Counters of one stream, readable from any thread while the stream runs.
/// catch_ups_failed counts the catch-ups that found batches missing or got
/// no answer (each marked the worker stale); the rest are ok.
struct StreamStats {
  static constexpr std::array<std::string_view, 3> kEventTypes = {"BlockStored", "BlockRemoved",
                                                                  "AllBlocksCleared"};
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
  std::atomic<uint64_t> catch_ups_ok{0};
  std::atomic<uint64_t> catch_ups_failed{0};
  std::atomic<uint64_t> orphan_blocks{0};
  std::atomic<uint64_t> hash_drift_blocks{0};
  std::atomic<uint64_t> salt_blind_blocks{0};  // a salted request's, salt dropped: not indexed
  std::atomic<uint64_t> unknown_removals{0};
  std::atomic<uint64_t> unknown_medium_blocks{0};
  std::atomic<uint64_t> ignored_fields{0};
  std::atomic<uint64_t> ignored_event_types{0};
  std::atomic<int64_t> last_seq{-1};  // -1 before the first applied batch
  // kvgov's clock (ms since the epoch) when the stream was created and when
  // its last batch was applied (-1: none yet): how long an engine has been
  // silent.
  std::atomic<int64_t> started_ms{-1};
  std::atomic<int64_t> last_batch_ms{-1};
  std::atomic<uint8_t> stale_reason{0};  // a StaleReason
  std::atomic<int64_t> stale_since_ms{-1};

  StaleReason stale() const { return static_cast<StaleReason>(stale_reason.load()); }
  /// What exactly is missing, for operators ("batches 4..9 are lost ...").
  std::string stale_detail() const {
    MutexLock lock(detail_mu_);
    return stale_detail_;
  }
  void set_stale_detail(std::string detail) {
    MutexLock lock(detail_mu_);
    stale_detail_ = std::move(detail);
  }
  /// Why kvgov could not subscribe to the stream at all ("" while it
  /// could): the worker then waits for nothing, and says so.
  std::string stream_error() const {
    MutexLock lock(detail_mu_);
    return stream_error_;
  }
  void set_stream_error(std::string error) {
    MutexLock lock(detail_mu_);
    stream_error_ = std::move(error);
  }

 private:
  mutable Mutex detail_mu_;
  std::string stale_detail_ KVGOV_GUARDED_BY(detail_mu_);
  std::string stream_error_ KVGOV_GUARDED_BY(detail_mu_);
};

/// Receives the envelope entry every applied engine event lowers to.
using EntrySink = std::function<void(const Entry&)>;

/// What governance watches a stream for, to witness removals by it. Both
/// are called from the stream's thread, never while recovery re-applies
/// logged batches, and must be quick; either may be empty.
struct StreamObserver {
  /// Every engine event just before the index applies it, with the seq of
  /// its batch (a block's key is still resolvable from its engine hash).
  std::function<void(std::string_view worker, uint64_t seq, const EngineEvent& event)> event;
  /// The engine restarted and the worker was just cleared: `seq` is the
  /// new process's batch that showed it (its first seq when a catch-up
  /// found another history). The new process numbers from the start again.
  std::function<void(std::string_view worker, uint64_t seq)> restart;
};

/// Makes a stream's progress durable (implemented over the store by the
/// server). Called from the stream's thread.
class StreamDurability {
 public:
  virtual ~StreamDurability() = default;
  /// Batch `seq` (its raw payload, timestamp `ts`) was just applied to the
  /// index, changing `blocks` blocks (stored or removed), or was counted as
  /// undecodable (0 blocks).
  virtual void OnApplied(std::string_view worker, uint64_t seq, double ts, std::string_view payload,
                         uint64_t blocks) = 0;
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
///  - CatchUp (on every connection to the engine, and on resume) asks the
///    replay socket for everything after the last applied batch without
///    waiting for a live batch to reveal a gap: an idle engine's last batch
///    is not lost across a restart of kvgov. See CatchUp.
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
  void set_observer(StreamObserver observer) { observer_ = std::move(observer); }

  /// Replaces the clock (ms since the epoch) stats are stamped with; tests.
  void set_clock(std::function<int64_t()> now_ms) { now_ms_ = std::move(now_ms); }

  /// Recovery after a restart of kvgov: re-applies a batch the durability
  /// layer logged (without logging it again and without sequence checks).
  /// Returns the blocks it stored or removed.
  uint64_t Reapply(uint64_t seq, std::string_view payload);

  /// Recovery: continue as if batch `last_seq` (timestamp `last_ts`, payload
  /// digest `last_digest` = Sha256Hex of its bytes) was the last one
  /// applied. The worker's stale flag is taken from the index. The next
  /// CatchUp (at the latest, before the first live batch is applied) fetches
  /// the engine's own batch `last_seq` and compares it with `last_digest`: a
  /// different batch there means the engine restarted while kvgov was down
  /// (sequence numbers alone cannot show it), and the worker starts over.
  /// An empty digest compares by timestamp instead.
  void Resume(uint64_t last_seq, double last_ts, std::string last_digest);

  /// Asks the replay socket for every batch after the last applied one
  /// (from the publisher's first seq without state) and applies them, so
  /// kvgov is current even when the engine publishes nothing more. The
  /// batch at the last applied seq is asked for too and compared with the
  /// one applied: a different batch there, or none at or past it, means the
  /// engine restarted, and the worker starts over from the engine's first
  /// seq. When the answer starts past the next seq (the buffer rolled over)
  /// the worker goes stale for good; when the socket does not answer it goes
  /// stale until kvgov is shown current again. Returns true when the stream
  /// is known to be current. No-op (true) without a replay socket.
  bool CatchUp();

  /// Handles one live message.
  void OnMessage(uint64_t seq, std::string_view payload);

  /// Counts a message whose framing was wrong (no usable seq), so it could
  /// not be ordered at all.
  void OnBadFraming(std::string_view detail);

  /// The transport could not subscribe to the stream at all; kept in the
  /// stats for operators.
  void OnSubscribeFailed(std::string error) { stats_.set_stream_error(std::move(error)); }

  const std::string& worker() const { return worker_; }
  const StreamStats& stats() const { return stats_; }

 private:
  // A decoded batch, or the reason it did not decode.
  Result<EngineEventBatch> Decode(std::string_view payload);
  // Both return the blocks the batch stored or removed.
  uint64_t Apply(uint64_t seq, std::string_view payload, const Result<EngineEventBatch>& batch);
  uint64_t ApplyBatch(uint64_t seq, const Result<EngineEventBatch>& batch);
  // Replays [start, stop) and reports whether every seq arrived; if not,
  // *why says what became of them.
  bool Replay(uint64_t start, uint64_t stop, std::string* why);
  // One catch-up round; sets *restarted when the engine holds another
  // history than the one applied.
  bool CatchUpOnce(bool* restarted);
  // Whether the engine's copy of the last applied batch is that batch.
  bool SameAsLastApplied(std::string_view payload, const Result<EngineEventBatch>& batch) const;
  // The engine restarted (batch `seq` of the new process showed it): clear
  // the worker and count from the start.
  void StartOver(uint64_t seq);
  void MarkStale(StaleReason reason, std::string detail);
  void MarkLive();
  // The worker's block size in the index (0 while it is not registered).
  int64_t BlockSize();

  const std::string worker_;
  const EngineKind kind_;
  index::ResidencyIndex* const index_;
  ReplaySource* const replay_;
  const EntrySink sink_;
  StreamDurability* const durability_;
  StreamObserver observer_;
  const uint64_t first_seq_;     // what the publisher counts from
  bool reapplying_ = false;      // recovery: apply without logging again
  bool resume_pending_ = false;  // Resume ran and no CatchUp since
  // Recovery: the digest of the last logged batch, to check against the
  // engine's copy (by CatchUp) before going on. Cleared once checked.
  std::optional<std::string> resume_digest_;
  std::function<int64_t()> now_ms_;
  StreamStats stats_;
  std::optional<uint64_t> last_seq_;
  double last_ts_ = 0;
  StaleReason stale_ = StaleReason::kNone;
  uint64_t stale_marks_ = 0;  // MarkStale calls that took effect
  int64_t block_size_ = 0;    // cached by BlockSize()
};

}  // namespace kvgov::ingest
