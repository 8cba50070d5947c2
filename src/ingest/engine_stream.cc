#include "kvgov/ingest/engine_stream.h"

#include <cstdio>

#include "kvgov/adapters/engine_wire.h"
#include "kvgov/core/digest.h"

namespace kvgov::ingest {
namespace {

size_t EventTypeSlot(const EngineEvent& event) { return event.index(); }

size_t DecodeErrorSlot(std::string_view reason) {
  for (size_t i = 0; i < StreamStats::kDecodeErrorReasons.size(); ++i) {
    if (StreamStats::kDecodeErrorReasons[i] == reason) return i;
  }
  return StreamStats::kDecodeErrorReasons.size() - 1;
}

}  // namespace

EngineStream::EngineStream(std::string worker, EngineKind kind, index::ResidencyIndex* index,
                           ReplaySource* replay, EntrySink sink, StreamDurability* durability)
    : worker_(std::move(worker)),
      kind_(kind),
      index_(index),
      replay_(replay),
      sink_(std::move(sink)),
      durability_(durability),
      first_seq_(kind == EngineKind::kMooncake ? 1 : 0) {}

Result<EngineEventBatch> EngineStream::Decode(std::string_view payload) {
  return kind_ == EngineKind::kMooncake ? adapters::DecodeMooncakeEvents(payload)
                                        : adapters::DecodeEngineBatch(payload);
}

bool EngineStream::ResumePointMatches() {
  const std::string logged = *resume_digest_;
  resume_digest_.reset();
  if (replay_ == nullptr || !last_seq_.has_value()) return true;  // nothing to ask
  std::optional<std::string> engine_copy;
  const uint64_t at = *last_seq_;
  (void)replay_->Replay(at, [&](uint64_t seq, std::string_view payload) {
    if (seq == at && !engine_copy) engine_copy = Sha256Hex(payload);
  });
  // An engine that no longer buffers that far cannot confirm or refute; the
  // gap repair that follows will find the same and mark the worker stale.
  return !engine_copy.has_value() || *engine_copy == logged;
}

void EngineStream::OnMessage(uint64_t seq, std::string_view payload) {
  if (resume_digest_.has_value() && !ResumePointMatches()) {
    stats_.restarts.fetch_add(1, std::memory_order_relaxed);
    std::fprintf(stderr,
                 "kvgov ingest: worker %s: the engine's batch at seq %llu is not the one kvgov "
                 "logged: it restarted while kvgov was down; clearing it\n",
                 worker_.c_str(), static_cast<unsigned long long>(*last_seq_));
    StartOver();
  }
  Result<EngineEventBatch> batch = Decode(payload);
  if (last_seq_.has_value() && seq <= *last_seq_) {
    // Behind us: a redelivery, or an engine that restarted and counts from
    // 0 again. Only the batch's own timestamp tells them apart.
    if (!batch.ok() || batch->ts <= last_ts_) {
      stats_.duplicates.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    stats_.restarts.fetch_add(1, std::memory_order_relaxed);
    std::fprintf(stderr, "kvgov ingest: worker %s restarted (seq %llu after %llu); clearing it\n",
                 worker_.c_str(), static_cast<unsigned long long>(seq),
                 static_cast<unsigned long long>(*last_seq_));
    StartOver();
  }
  const uint64_t expected = last_seq_.has_value() ? *last_seq_ + 1 : first_seq_;
  if (seq > expected) {
    stats_.seq_gaps.fetch_add(1, std::memory_order_relaxed);
    if (!Replay(expected, seq)) MarkStale();
  }
  Apply(seq, payload, batch);
}

void EngineStream::Reapply(uint64_t seq, std::string_view payload) {
  reapplying_ = true;
  Apply(seq, payload, Decode(payload));
  reapplying_ = false;
}

void EngineStream::Resume(uint64_t last_seq, double last_ts, std::string last_digest) {
  last_seq_ = last_seq;
  last_ts_ = last_ts;
  if (!last_digest.empty()) resume_digest_ = std::move(last_digest);
  stats_.last_seq.store(static_cast<int64_t>(last_seq), std::memory_order_relaxed);
  std::optional<index::WorkerResidency> worker = index_->Worker(worker_);
  stale_ = worker.has_value() && worker->state == index::WorkerState::kStale;
}

void EngineStream::OnBadFraming(std::string_view detail) {
  stats_.decode_errors[DecodeErrorSlot("bad_framing")].fetch_add(1, std::memory_order_relaxed);
  std::fprintf(stderr, "kvgov ingest: worker %s: message skipped, bad_framing: %.*s\n",
               worker_.c_str(), static_cast<int>(detail.size()), detail.data());
}

bool EngineStream::Replay(uint64_t start, uint64_t stop) {
  if (replay_ == nullptr) return false;
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
    std::fprintf(stderr,
                 "kvgov ingest: worker %s: replay of seq %llu..%llu got up to %llu (%s)\n",
                 worker_.c_str(), static_cast<unsigned long long>(start),
                 static_cast<unsigned long long>(stop - 1), static_cast<unsigned long long>(next),
                 status.ok() ? "engine no longer buffers that far" : status.ToString().c_str());
  }
  return complete;
}

void EngineStream::Apply(uint64_t seq, std::string_view payload,
                         const Result<EngineEventBatch>& batch) {
  last_seq_ = seq;
  stats_.last_seq.store(static_cast<int64_t>(seq), std::memory_order_relaxed);
  ApplyBatch(seq, batch);
  if (durability_ != nullptr && !reapplying_) durability_->OnApplied(worker_, seq, last_ts_, payload);
}

void EngineStream::ApplyBatch(uint64_t seq, const Result<EngineEventBatch>& batch) {
  if (!batch.ok()) {
    std::string_view reason = adapters::DecodeErrorReason(batch.status());
    stats_.decode_errors[DecodeErrorSlot(reason)].fetch_add(1, std::memory_order_relaxed);
    std::fprintf(stderr, "kvgov ingest: worker %s: seq %llu skipped, %s: %s\n", worker_.c_str(),
                 static_cast<unsigned long long>(seq), std::string(reason).c_str(),
                 batch.status().message().c_str());
    return;
  }
  last_ts_ = std::max(last_ts_, batch->ts);
  stats_.ignored_fields.fetch_add(batch->ignored.unknown_fields, std::memory_order_relaxed);
  stats_.ignored_event_types.fetch_add(batch->ignored.unknown_event_types,
                                       std::memory_order_relaxed);
  for (const EngineEvent& event : batch->events) {
    if (observer_ && !reapplying_) observer_(worker_, seq, event);
    Result<index::ApplyResult> applied = index_->Apply(worker_, event);
    if (!applied.ok()) {
      stats_.rejected_events.fetch_add(1, std::memory_order_relaxed);
      std::fprintf(stderr, "kvgov ingest: worker %s: seq %llu: %s event refused: %s\n",
                   worker_.c_str(), static_cast<unsigned long long>(seq),
                   std::string(EngineEventTypeName(event)).c_str(),
                   applied.status().ToString().c_str());
      continue;
    }
    stats_.events[EventTypeSlot(event)].fetch_add(1, std::memory_order_relaxed);
    stats_.orphan_blocks.fetch_add(applied->orphan_blocks, std::memory_order_relaxed);
    stats_.unknown_removals.fetch_add(applied->unknown_removals, std::memory_order_relaxed);
    stats_.unknown_medium_blocks.fetch_add(applied->unknown_medium, std::memory_order_relaxed);
    if (std::holds_alternative<AllBlocksCleared>(event) && stale_) {
      // The engine's cache is empty now, so the index is complete again.
      stale_ = false;
      (void)index_->SetState(worker_, index::WorkerState::kLive);
    }
    if (sink_) LowerEngineEventEach(event, worker_, BlockSize(), sink_);
  }
  // Counted after every event of the batch went to the index (applied or
  // refused), so a reader that sees the count also sees what it did there.
  stats_.batches.fetch_add(1, std::memory_order_relaxed);
}

int64_t EngineStream::BlockSize() {
  // A registration's block size never changes, so it is read once rather
  // than copied out of the index (under its lock) for every event.
  if (block_size_ == 0) {
    block_size_ = index_->Worker(worker_).value_or(index::WorkerResidency{}).block_size;
  }
  return block_size_;
}

void EngineStream::StartOver() {
  (void)index_->ClearWorker(worker_);
  if (durability_ != nullptr) durability_->OnRestart(worker_);
  last_seq_.reset();
  last_ts_ = 0;
  if (stale_) {
    stale_ = false;
    (void)index_->SetState(worker_, index::WorkerState::kLive);
  }
}

void EngineStream::MarkStale() {
  if (stale_) return;
  stale_ = true;
  (void)index_->SetState(worker_, index::WorkerState::kStale);
}

}  // namespace kvgov::ingest
