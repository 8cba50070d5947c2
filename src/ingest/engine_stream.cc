#include "kvgov/ingest/engine_stream.h"

#include <chrono>

#include "kvgov/adapters/engine_wire.h"
#include "kvgov/clock/clock.h"
#include "kvgov/core/digest.h"
#include "kvgov/log/log.h"

namespace kvgov::ingest {
namespace {

size_t EventTypeSlot(const EngineEvent& event) { return event.index(); }

size_t DecodeErrorSlot(std::string_view reason) {
  for (size_t i = 0; i < StreamStats::kDecodeErrorReasons.size(); ++i) {
    if (StreamStats::kDecodeErrorReasons[i] == reason) return i;
  }
  return StreamStats::kDecodeErrorReasons.size() - 1;
}

std::string Seqs(uint64_t first, uint64_t last) {
  return first == last ? "batch " + std::to_string(first)
                       : "batches " + std::to_string(first) + ".." + std::to_string(last);
}

}  // namespace

std::string_view ToString(StaleReason reason) {
  switch (reason) {
    case StaleReason::kNone:
      return "none";
    case StaleReason::kGapLost:
      return "gap_lost";
    case StaleReason::kReplayRolledOver:
      return "replay_rolled_over";
    case StaleReason::kReplayUnanswered:
      return "replay_unanswered";
    case StaleReason::kStaleBeforeRestart:
      return "stale_before_restart";
  }
  return "none";
}

bool IsRecoverable(StaleReason reason) { return reason == StaleReason::kReplayUnanswered; }

EngineStream::EngineStream(std::string worker, EngineKind kind, index::ResidencyIndex* index,
                           ReplaySource* replay, EntrySink sink, StreamDurability* durability)
    : worker_(std::move(worker)),
      kind_(kind),
      index_(index),
      replay_(replay),
      sink_(std::move(sink)),
      durability_(durability),
      first_seq_(kind == EngineKind::kMooncake ? 1 : 0),
      now_ms_(clock::NowMillis) {
  stats_.started_ms.store(now_ms_(), std::memory_order_relaxed);
}

Result<EngineEventBatch> EngineStream::Decode(std::string_view payload) {
  return kind_ == EngineKind::kMooncake ? adapters::DecodeMooncakeEvents(payload)
                                        : adapters::DecodeEngineBatch(payload);
}

bool EngineStream::SameAsLastApplied(std::string_view payload,
                                     const Result<EngineEventBatch>& batch) const {
  if (resume_digest_.has_value()) return Sha256Hex(payload) == *resume_digest_;
  // The same process's batch there is no newer than the last applied one; a
  // restarted process stamps its batches later. An undecodable batch was
  // skipped the same way before, so it cannot tell.
  return !batch.ok() || batch->ts <= last_ts_;
}

bool EngineStream::CatchUp() {
  resume_pending_ = false;
  if (replay_ == nullptr) {
    resume_digest_.reset();
    return true;
  }
  // Failed: this catch-up found batches missing or got no answer; a worker
  // already stale for a lost gap is not a failure of this one.
  const uint64_t stale_marks = stale_marks_;
  bool restarted = false;
  bool current = CatchUpOnce(&restarted);
  resume_digest_.reset();
  if (restarted) {
    stats_.restarts.fetch_add(1, std::memory_order_relaxed);
    log::Line(log::Level::kWarn, "stream.restart")
        .Field("worker", worker_)
        .Field("after_seq", last_seq_.value_or(0))
        .Field("detail", "the engine holds another history than the one applied; clearing it");
    StartOver(first_seq_);
    restarted = false;
    current = CatchUpOnce(&restarted);  // without state: nothing to compare
  }
  (stale_marks_ == stale_marks ? stats_.catch_ups_ok : stats_.catch_ups_failed)
      .fetch_add(1, std::memory_order_relaxed);
  return current;
}

bool EngineStream::CatchUpOnce(bool* restarted) {
  const std::optional<uint64_t> last = last_seq_;
  const uint64_t first_wanted = last.has_value() ? *last + 1 : first_seq_;
  uint64_t next = first_wanted;
  bool checked = !last.has_value();
  bool answered = false;
  bool complete = true;
  // The batch at `last` is asked for too: it shows whether the engine is
  // still the process whose history was applied.
  Status status = replay_->Replay(last.value_or(first_seq_), [&](uint64_t seq,
                                                                 std::string_view payload) {
    if (*restarted) return;
    answered = true;
    Result<EngineEventBatch> batch = Decode(payload);
    if (!checked && seq == *last) {
      checked = true;
      *restarted = !SameAsLastApplied(payload, batch);
      return;
    }
    checked = true;
    if (seq < next) return;  // applied already
    if (seq > next) {
      complete = false;
      const bool rolled_over = next == first_wanted;
      MarkStale(rolled_over ? StaleReason::kReplayRolledOver : StaleReason::kGapLost,
                Seqs(next, seq - 1) +
                    (rolled_over ? " are no longer in the engine's replay buffer (its oldest is " +
                                       std::to_string(seq) + ")"
                                 : " did not come back from replay"));
      next = seq;
    }
    Apply(seq, payload, batch);
    ++next;
  });
  if (*restarted) return false;
  if (status.ok() && last.has_value() && !answered) {
    // A live engine's buffer always holds its newest batch, and kvgov
    // applied `last` from this engine: nothing at or past it means another
    // process that has published less.
    *restarted = true;
    return false;
  }
  if (!status.ok()) {
    MarkStale(StaleReason::kReplayUnanswered,
              "catching up from seq " + std::to_string(next) + ": " + status.message());
    return false;
  }
  if (complete && IsRecoverable(stale_)) MarkLive();
  return complete && stale_ == StaleReason::kNone;
}

void EngineStream::OnMessage(uint64_t seq, std::string_view payload) {
  if (resume_pending_) (void)CatchUp();
  Result<EngineEventBatch> batch = Decode(payload);
  if (last_seq_.has_value() && seq <= *last_seq_) {
    // Behind us: a redelivery, or an engine that restarted and counts from
    // 0 again. Only the batch's own timestamp tells them apart.
    if (!batch.ok() || batch->ts <= last_ts_) {
      stats_.duplicates.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    stats_.restarts.fetch_add(1, std::memory_order_relaxed);
    log::Line(log::Level::kWarn, "stream.restart")
        .Field("worker", worker_)
        .Field("after_seq", *last_seq_)
        .Field("seq", seq)
        .Field("detail", "a newer batch counts from the start again; clearing it");
    StartOver(seq);
  }
  const uint64_t expected = last_seq_.has_value() ? *last_seq_ + 1 : first_seq_;
  bool contiguous = true;
  if (seq > expected) {
    stats_.seq_gaps.fetch_add(1, std::memory_order_relaxed);
    std::string why;
    contiguous = Replay(expected, seq, &why);
    if (!contiguous) MarkStale(StaleReason::kGapLost, Seqs(expected, seq - 1) + " " + why);
  }
  Apply(seq, payload, batch);
  // Every batch up to a live one is applied: kvgov is current again.
  if (contiguous && IsRecoverable(stale_)) MarkLive();
}

uint64_t EngineStream::Reapply(uint64_t seq, std::string_view payload) {
  reapplying_ = true;
  const uint64_t blocks = Apply(seq, payload, Decode(payload));
  reapplying_ = false;
  return blocks;
}

void EngineStream::Resume(uint64_t last_seq, double last_ts, std::string last_digest) {
  last_seq_ = last_seq;
  last_ts_ = last_ts;
  if (!last_digest.empty()) resume_digest_ = std::move(last_digest);
  resume_pending_ = true;
  stats_.last_seq.store(static_cast<int64_t>(last_seq), std::memory_order_relaxed);
  std::optional<index::WorkerResidency> worker = index_->Worker(worker_);
  if (worker.has_value() && worker->state == index::WorkerState::kStale) {
    MarkStale(StaleReason::kStaleBeforeRestart,
              "the worker was stale when kvgov stopped; it turns live at the engine's next "
              "AllBlocksCleared or restart");
  }
}

void EngineStream::OnBadFraming(std::string_view detail) {
  stats_.decode_errors[DecodeErrorSlot("bad_framing")].fetch_add(1, std::memory_order_relaxed);
  log::Line(log::Level::kWarn, "stream.message_skipped")
      .Field("worker", worker_)
      .Field("reason", "bad_framing")
      .Field("error", detail);
}

bool EngineStream::Replay(uint64_t start, uint64_t stop, std::string* why) {
  if (replay_ == nullptr) {
    *why = "are lost: the engine has no replay socket";
    return false;
  }
  uint64_t next = start;
  Status status = replay_->Replay(start, [&](uint64_t seq, std::string_view payload) {
    // Apply in order; anything outside [next, stop) is either already
    // applied or will arrive live.
    if (seq != next || seq >= stop) return;
    Apply(seq, payload, Decode(payload));
    ++next;
  });
  const bool complete = next == stop;
  (complete ? stats_.replays_ok : stats_.replays_failed).fetch_add(1, std::memory_order_relaxed);
  if (!complete) {
    *why = "did not come back from replay (got up to " + std::to_string(next) + ": " +
           (status.ok() ? "the engine no longer buffers that far" : status.message()) + ")";
  }
  return complete;
}

uint64_t EngineStream::Apply(uint64_t seq, std::string_view payload,
                             const Result<EngineEventBatch>& batch) {
  last_seq_ = seq;
  stats_.last_seq.store(static_cast<int64_t>(seq), std::memory_order_relaxed);
  if (!reapplying_) stats_.last_batch_ms.store(now_ms_(), std::memory_order_relaxed);
  const uint64_t blocks = ApplyBatch(seq, batch);
  if (durability_ != nullptr && !reapplying_) {
    durability_->OnApplied(worker_, seq, last_ts_, payload, blocks);
  }
  return blocks;
}

uint64_t EngineStream::ApplyBatch(uint64_t seq, const Result<EngineEventBatch>& batch) {
  uint64_t blocks = 0;
  if (!batch.ok()) {
    std::string_view reason = adapters::DecodeErrorReason(batch.status());
    stats_.decode_errors[DecodeErrorSlot(reason)].fetch_add(1, std::memory_order_relaxed);
    log::Line(log::Level::kWarn, "stream.batch_skipped")
        .Field("worker", worker_)
        .Field("seq", seq)
        .Field("reason", reason)
        .Field("error", batch.status().message());
    return blocks;
  }
  last_ts_ = std::max(last_ts_, batch->ts);
  stats_.ignored_fields.fetch_add(batch->ignored.unknown_fields, std::memory_order_relaxed);
  stats_.ignored_event_types.fetch_add(batch->ignored.unknown_event_types,
                                       std::memory_order_relaxed);
  for (const EngineEvent& event : batch->events) {
    if (observer_.event && !reapplying_) observer_.event(worker_, seq, event);
    Result<index::ApplyResult> applied = index_->Apply(worker_, event);
    if (!applied.ok()) {
      stats_.rejected_events.fetch_add(1, std::memory_order_relaxed);
      log::Line(log::Level::kWarn, "stream.event_refused")
          .Field("worker", worker_)
          .Field("seq", seq)
          .Field("type", EngineEventTypeName(event))
          .Field("error", applied.status().ToString());
      continue;
    }
    stats_.events[EventTypeSlot(event)].fetch_add(1, std::memory_order_relaxed);
    blocks += applied->blocks_stored + applied->blocks_removed;
    stats_.orphan_blocks.fetch_add(applied->orphan_blocks, std::memory_order_relaxed);
    stats_.hash_drift_blocks.fetch_add(applied->hash_drift_blocks, std::memory_order_relaxed);
    stats_.salt_blind_blocks.fetch_add(applied->salt_blind_blocks, std::memory_order_relaxed);
    stats_.unknown_removals.fetch_add(applied->unknown_removals, std::memory_order_relaxed);
    stats_.unknown_medium_blocks.fetch_add(applied->unknown_medium, std::memory_order_relaxed);
    // The engine's cache is empty now, so the index is complete again.
    if (std::holds_alternative<AllBlocksCleared>(event)) MarkLive();
    if (sink_) LowerEngineEventEach(event, worker_, BlockSize(), sink_);
  }
  // Counted after every event of the batch went to the index (applied or
  // refused), so a reader that sees the count also sees what it did there.
  stats_.batches.fetch_add(1, std::memory_order_relaxed);
  return blocks;
}

int64_t EngineStream::BlockSize() {
  // A registration's block size never changes, so it is read once rather
  // than copied out of the index (under its lock) for every event.
  if (block_size_ == 0) {
    block_size_ = index_->Worker(worker_).value_or(index::WorkerResidency{}).block_size;
  }
  return block_size_;
}

void EngineStream::StartOver(uint64_t seq) {
  (void)index_->ClearWorker(worker_);
  if (durability_ != nullptr) durability_->OnRestart(worker_);
  if (observer_.restart && !reapplying_) observer_.restart(worker_, seq);
  last_seq_.reset();
  last_ts_ = 0;
  MarkLive();
}

void EngineStream::MarkStale(StaleReason reason, std::string detail) {
  // A reason that needs a clean point is not masked by a lesser one.
  if (stale_ != StaleReason::kNone && !IsRecoverable(stale_) && IsRecoverable(reason)) return;
  ++stale_marks_;
  log::Line(log::Level::kWarn, "stream.stale")
      .Field("worker", worker_)
      .Field("reason", ToString(reason))
      .Field("detail", detail);
  const bool was_stale = stale_ != StaleReason::kNone;
  stale_ = reason;
  stats_.set_stale_detail(std::move(detail));
  stats_.stale_reason.store(static_cast<uint8_t>(reason), std::memory_order_relaxed);
  if (was_stale) return;
  stats_.stale_since_ms.store(now_ms_(), std::memory_order_relaxed);
  (void)index_->SetState(worker_, index::WorkerState::kStale);
}

void EngineStream::MarkLive() {
  if (stale_ == StaleReason::kNone) return;
  // The gap is repaired, or the engine's cache was cleared or restarted:
  // the index is complete for this worker again.
  const int64_t since = stats_.stale_since_ms.load(std::memory_order_relaxed);
  log::Line(log::Level::kInfo, "stream.live")
      .Field("worker", worker_)
      .Field("was", ToString(stale_))
      .Field("stale_ms", since < 0 ? int64_t{0} : now_ms_() - since);
  stale_ = StaleReason::kNone;
  stats_.stale_reason.store(static_cast<uint8_t>(StaleReason::kNone), std::memory_order_relaxed);
  stats_.stale_since_ms.store(-1, std::memory_order_relaxed);
  stats_.set_stale_detail("");
  (void)index_->SetState(worker_, index::WorkerState::kLive);
}

}  // namespace kvgov::ingest
