#include "kvgov/ingest/engine_stream.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "kvgov/core/digest.h"
#include "ingest/vllm_batch_builder.h"

namespace kvgov::ingest {
namespace {

constexpr int64_t kBlockSize = 4;

using VllmBatch = VllmBatchBuilder<kBlockSize>;

// Serves replay from a fixed history, optionally missing some seqs.
class FakeReplay : public ReplaySource {
 public:
  Status Replay(uint64_t start_seq,
                const std::function<void(uint64_t, std::string_view)>& on_batch) override {
    ++requests;
    last_start = start_seq;
    for (const auto& [seq, payload] : history) {
      if (seq >= start_seq) on_batch(seq, payload);
    }
    return answer;
  }
  std::map<uint64_t, std::string> history;
  Status answer;
  int requests = 0;
  uint64_t last_start = 0;
};

class EngineStreamTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(index_.AddWorker("w1", "llama", kBlockSize).ok()); }

  EngineStream MakeStream(ReplaySource* replay) {
    return EngineStream("w1", EngineKind::kVllm, &index_, replay,
                        [this](const Entry& entry) { entries_.push_back(entry); });
  }
  uint64_t Hbm() const { return index_.Worker("w1")->blocks[0]; }
  index::WorkerState State() const { return index_.Worker("w1")->state; }

  index::ResidencyIndex index_;
  std::vector<Entry> entries_;
};

TEST_F(EngineStreamTest, AppliesInOrderAndLowersEveryEvent) {
  EngineStream stream = MakeStream(nullptr);
  stream.OnMessage(0, VllmBatch(1.0).Stored({1, 2}, std::nullopt, 100).Bytes());
  stream.OnMessage(1, VllmBatch(2.0).Removed({2}).Bytes());
  EXPECT_EQ(Hbm(), 1u);
  EXPECT_EQ(stream.stats().events[0].load(), 1u);
  EXPECT_EQ(stream.stats().events[1].load(), 1u);
  EXPECT_EQ(stream.stats().last_seq.load(), 1);
  ASSERT_EQ(entries_.size(), 3u);  // one per block
  EXPECT_EQ(entries_[0].labels.at("direction"), "store");
  EXPECT_EQ(entries_[2].labels.at("direction"), "evict");
  EXPECT_EQ(entries_[0].source, Source::kRideEngine);
}

TEST_F(EngineStreamTest, DuplicatesAreDropped) {
  EngineStream stream = MakeStream(nullptr);
  std::string first = VllmBatch(1.0).Stored({1}, std::nullopt, 100).Bytes();
  stream.OnMessage(0, first);
  stream.OnMessage(1, VllmBatch(2.0).Removed({1}).Bytes());
  stream.OnMessage(0, first);  // redelivered
  EXPECT_EQ(stream.stats().duplicates.load(), 1u);
  EXPECT_EQ(Hbm(), 0u);
  EXPECT_EQ(stream.stats().restarts.load(), 0u);
}

TEST_F(EngineStreamTest, GapIsRepairedByReplay) {
  FakeReplay replay;
  replay.history[0] = VllmBatch(1.0).Stored({1}, std::nullopt, 100).Bytes();
  replay.history[1] = VllmBatch(2.0).Stored({2}, uint64_t{1}, 104).Bytes();
  replay.history[2] = VllmBatch(3.0).Stored({3}, uint64_t{2}, 108).Bytes();
  EngineStream stream = MakeStream(&replay);
  stream.OnMessage(0, replay.history[0]);
  stream.OnMessage(2, replay.history[2]);  // seq 1 was lost
  EXPECT_EQ(replay.requests, 1);
  EXPECT_EQ(replay.last_start, 1u);
  EXPECT_EQ(stream.stats().seq_gaps.load(), 1u);
  EXPECT_EQ(stream.stats().replays_ok.load(), 1u);
  EXPECT_EQ(Hbm(), 3u);
  EXPECT_EQ(State(), index::WorkerState::kLive);
  // All three chain under one another: the full prefix is found.
  std::vector<int64_t> tokens(12);
  std::iota(tokens.begin(), tokens.end(), 100);
  EXPECT_EQ(index_.Overlap(index_.hasher().Chain({"llama", "", 0}, tokens, kBlockSize))[0].blocks,
            3u);
}

TEST_F(EngineStreamTest, LateJoinerReplaysFromZero) {
  FakeReplay replay;
  replay.history[0] = VllmBatch(1.0).Stored({1}, std::nullopt, 100).Bytes();
  replay.history[1] = VllmBatch(2.0).Stored({2}, std::nullopt, 200).Bytes();
  EngineStream stream = MakeStream(&replay);
  stream.OnMessage(1, replay.history[1]);
  EXPECT_EQ(replay.last_start, 0u);
  EXPECT_EQ(Hbm(), 2u);
  EXPECT_EQ(State(), index::WorkerState::kLive);
}

TEST_F(EngineStreamTest, UnfillableGapMarksStaleUntilACleanPoint) {
  FakeReplay replay;  // remembers nothing older than seq 5
  replay.answer = Status::Ok();
  EngineStream stream = MakeStream(&replay);
  stream.OnMessage(0, VllmBatch(1.0).Stored({1}, std::nullopt, 100).Bytes());
  stream.OnMessage(5, VllmBatch(2.0).Stored({2}, std::nullopt, 200).Bytes());
  EXPECT_EQ(stream.stats().replays_failed.load(), 1u);
  EXPECT_EQ(State(), index::WorkerState::kStale);
  EXPECT_EQ(Hbm(), 2u);  // still applied, but not counted for routes
  const std::vector<int64_t> first_block = {100, 101, 102, 103};
  EXPECT_TRUE(
      index_.Overlap(index_.hasher().Chain({"llama", "", 0}, first_block, kBlockSize)).empty());
  stream.OnMessage(6, VllmBatch(3.0).Cleared().Bytes());
  EXPECT_EQ(State(), index::WorkerState::kLive);
  EXPECT_EQ(Hbm(), 0u);
}

TEST_F(EngineStreamTest, NoReplaySocketMeansStaleOnGap) {
  EngineStream stream = MakeStream(nullptr);
  stream.OnMessage(0, VllmBatch(1.0).Stored({1}, std::nullopt, 100).Bytes());
  stream.OnMessage(2, VllmBatch(2.0).Stored({2}, std::nullopt, 200).Bytes());
  EXPECT_EQ(State(), index::WorkerState::kStale);
  EXPECT_EQ(stream.stats().seq_gaps.load(), 1u);
}

TEST_F(EngineStreamTest, RestartClearsTheWorkerAndStartsOver) {
  EngineStream stream = MakeStream(nullptr);
  stream.OnMessage(0, VllmBatch(1.0).Stored({1}, std::nullopt, 100).Bytes());
  stream.OnMessage(1, VllmBatch(2.0).Stored({2}, std::nullopt, 200).Bytes());
  // The engine restarted: seq 0 again, a newer timestamp.
  stream.OnMessage(0, VllmBatch(50.0).Stored({9}, std::nullopt, 900).Bytes());
  EXPECT_EQ(stream.stats().restarts.load(), 1u);
  EXPECT_EQ(Hbm(), 1u);
  EXPECT_EQ(stream.stats().last_seq.load(), 0);
  stream.OnMessage(1, VllmBatch(51.0).Removed({9}).Bytes());
  EXPECT_EQ(Hbm(), 0u);
}

TEST_F(EngineStreamTest, BadPayloadIsCountedAndTheStreamGoesOn) {
  EngineStream stream = MakeStream(nullptr);
  stream.OnMessage(0, "\xc1 not msgpack");
  stream.OnMessage(1, VllmBatch(1.0).Stored({1}, std::nullopt, 100).Bytes());
  uint64_t errors = 0;
  for (const auto& count : stream.stats().decode_errors) errors += count.load();
  EXPECT_EQ(errors, 1u);
  EXPECT_EQ(Hbm(), 1u);
  EXPECT_EQ(stream.stats().seq_gaps.load(), 0u);
}

TEST_F(EngineStreamTest, EventTheIndexRefusesIsCounted) {
  ASSERT_TRUE(index_.RemoveWorker("w1").ok());
  ASSERT_TRUE(index_.AddWorker("w1", "llama", 16).ok());  // block size differs from the events
  EngineStream stream = MakeStream(nullptr);
  stream.OnMessage(0, VllmBatch(1.0).Stored({1}, std::nullopt, 100).Bytes());
  EXPECT_EQ(stream.stats().rejected_events.load(), 1u);
  EXPECT_EQ(index_.ResidentPairs(), 0u);
}

}  // namespace
}  // namespace kvgov::ingest

namespace kvgov::ingest {
namespace {

// What vLLM publishes for a salted request must land on the keys a route
// request computes from the same tokens and salt: the adapters' canonical
// extra keys and the index's RequestChain agree.
TEST_F(EngineStreamTest, SaltedBlocksMatchTheRequestChain) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(3);
  pk.pack(1.0);
  pk.pack_array(1);
  pk.pack_map(6);
  pk.pack(std::string("type"));
  pk.pack(std::string("BlockStored"));
  pk.pack(std::string("block_hashes"));
  pk.pack(std::vector<uint64_t>{1, 2});
  pk.pack(std::string("token_ids"));
  std::vector<int64_t> tokens(2 * kBlockSize);
  std::iota(tokens.begin(), tokens.end(), 100);
  pk.pack(tokens);
  pk.pack(std::string("block_size"));
  pk.pack(kBlockSize);
  pk.pack(std::string("medium"));
  pk.pack(std::string("GPU"));
  pk.pack(std::string("extra_keys"));
  pk.pack_array(2);
  pk.pack_array(1);
  pk.pack(std::string("tenant-a"));  // the first block carries the salt
  pk.pack_nil();
  pk.pack(0);

  EngineStream stream = MakeStream(nullptr);
  stream.OnMessage(0, std::string_view(buffer.data(), buffer.size()));
  ASSERT_EQ(Hbm(), 2u);

  index::ChainNamespace ns{"llama", "", 0};
  std::vector<index::BlockKey> salted =
      index::RequestChain(index_.hasher(), ns, "tenant-a", tokens, kBlockSize);
  std::vector<index::WorkerOverlap> overlap = index_.Overlap(salted);
  ASSERT_EQ(overlap.size(), 1u);
  EXPECT_EQ(overlap[0].blocks, 2u);
  // The same tokens under another tenant's salt, or none, match nothing.
  EXPECT_TRUE(
      index_.Overlap(index::RequestChain(index_.hasher(), ns, "tenant-b", tokens, kBlockSize))
          .empty());
  EXPECT_TRUE(
      index_.Overlap(index::RequestChain(index_.hasher(), ns, "", tokens, kBlockSize)).empty());
}

}  // namespace
}  // namespace kvgov::ingest

namespace kvgov::ingest {
namespace {

// Mooncake's master counts from 1 and has no replay socket.
std::string MooncakeStored(double ts_ms, uint64_t hash) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(3);
  pk.pack(ts_ms);
  pk.pack_array(1);
  pk.pack_map(5);
  pk.pack(std::string("event_type"));
  pk.pack(std::string("stored"));
  pk.pack(std::string("seq_hashes"));
  pk.pack(std::vector<uint64_t>{hash});
  pk.pack(std::string("token_ids"));
  std::vector<int64_t> tokens(kBlockSize);
  std::iota(tokens.begin(), tokens.end(), static_cast<int64_t>(hash * 100));
  pk.pack(tokens);
  pk.pack(std::string("block_size"));
  pk.pack(kBlockSize);
  pk.pack(std::string("medium"));
  pk.pack(std::string("L2"));
  pk.pack(0);
  return std::string(buffer.data(), buffer.size());
}

TEST_F(EngineStreamTest, MooncakeStreamsStartAtOneAndLostEventsMeanStale) {
  EngineStream stream("w1", EngineKind::kMooncake, &index_, nullptr, nullptr);
  stream.OnMessage(1, MooncakeStored(1000, 1));
  EXPECT_EQ(stream.stats().seq_gaps.load(), 0u);
  EXPECT_EQ(State(), index::WorkerState::kLive);
  EXPECT_EQ(index_.Worker("w1")->blocks[1], 1u);  // L2 is dram
  stream.OnMessage(3, MooncakeStored(2000, 2));   // the master dropped seq 2
  EXPECT_EQ(stream.stats().seq_gaps.load(), 1u);
  EXPECT_EQ(State(), index::WorkerState::kStale);
}

}  // namespace
}  // namespace kvgov::ingest

namespace kvgov::ingest {
namespace {

// kvgov was down; the engine restarted meanwhile and has already published
// past kvgov's last seq. Only the batch at the resume point tells.
TEST_F(EngineStreamTest, ResumeDetectsAnEngineThatRestartedWhileKvgovWasDown) {
  const std::string logged = VllmBatch(5.0).Stored({1}, std::nullopt, 100).Bytes();
  EngineStream before("w1", EngineKind::kVllm, &index_, nullptr, nullptr);
  before.OnMessage(0, logged);
  ASSERT_EQ(Hbm(), 1u);

  FakeReplay replay;  // the new process's history: another batch at seq 0
  replay.history[0] = VllmBatch(900.0).Stored({7}, std::nullopt, 700).Bytes();
  replay.history[1] = VllmBatch(901.0).Stored({8}, std::nullopt, 800).Bytes();
  EngineStream resumed("w1", EngineKind::kVllm, &index_, &replay, nullptr);
  resumed.Resume(0, 5.0, Sha256Hex(logged));
  resumed.OnMessage(2, VllmBatch(902.0).Stored({9}, std::nullopt, 900).Bytes());
  EXPECT_EQ(resumed.stats().restarts.load(), 1u);
  // The old process's block is gone; the new process's three are in.
  EXPECT_EQ(Hbm(), 3u);
  EXPECT_EQ(State(), index::WorkerState::kLive);
}

TEST_F(EngineStreamTest, ResumeWithTheSameHistoryGoesOn) {
  const std::string logged = VllmBatch(5.0).Stored({1}, std::nullopt, 100).Bytes();
  FakeReplay replay;
  replay.history[0] = logged;
  replay.history[1] = VllmBatch(6.0).Stored({2}, std::nullopt, 200).Bytes();
  EngineStream first("w1", EngineKind::kVllm, &index_, nullptr, nullptr);
  first.OnMessage(0, logged);
  EngineStream resumed("w1", EngineKind::kVllm, &index_, &replay, nullptr);
  resumed.Resume(0, 5.0, Sha256Hex(logged));
  resumed.OnMessage(2, VllmBatch(7.0).Stored({3}, std::nullopt, 300).Bytes());
  EXPECT_EQ(resumed.stats().restarts.load(), 0u);
  EXPECT_EQ(Hbm(), 3u);
}

}  // namespace
}  // namespace kvgov::ingest

namespace kvgov::ingest {
namespace {

// The observer sees each event before the index applies it; `batches` must
// already count a batch only once its events are all applied.
TEST_F(EngineStreamTest, BatchesCountDecodedBatchesOnceApplied) {
  EngineStream stream = MakeStream(nullptr);
  std::vector<uint64_t> batches_seen;
  StreamObserver observer;
  observer.event = [&](std::string_view, uint64_t, const EngineEvent&) {
    batches_seen.push_back(stream.stats().batches.load());
  };
  stream.set_observer(std::move(observer));
  stream.OnMessage(0, VllmBatch(1.0).Stored({1}, std::nullopt, 100).Stored({2}, 1, 200).Bytes());
  EXPECT_EQ(batches_seen, (std::vector<uint64_t>{0, 0}));
  EXPECT_EQ(stream.stats().batches.load(), 1u);
  stream.OnMessage(1, "\xc1 not msgpack");  // counted as a decode error, not a batch
  EXPECT_EQ(stream.stats().batches.load(), 1u);
  stream.OnMessage(2, VllmBatch(2.0).Removed({2}).Bytes());
  EXPECT_EQ(stream.stats().batches.load(), 2u);
  EXPECT_EQ(batches_seen, (std::vector<uint64_t>{0, 0, 1}));
}

// The entries carry the worker's block size for records without their own
// (a removal), read from the index once rather than per event.
TEST_F(EngineStreamTest, LoweredRemovalsCarryTheWorkersBlockSize) {
  EngineStream stream = MakeStream(nullptr);
  stream.OnMessage(0, VllmBatch(1.0).Stored({1, 2}, std::nullopt, 100).Bytes());
  stream.OnMessage(1, VllmBatch(2.0).Removed({2}).Removed({1}).Bytes());
  ASSERT_EQ(entries_.size(), 4u);
  for (const Entry& entry : entries_) EXPECT_EQ(entry.id.length, kBlockSize);
  EXPECT_EQ(entries_[2].id.digest, "0000000000000002");
  EXPECT_EQ(entries_[3].id.digest, "0000000000000001");
}

}  // namespace
}  // namespace kvgov::ingest

namespace kvgov::ingest {
namespace {

// CatchUp: at every connection, everything after the last applied batch is
// asked for at once, with the batch at the last seq itself to check that the
// engine is still the process whose history was applied.
TEST_F(EngineStreamTest, CatchUpAppliesWhatTheEngineBuffersWithoutALiveBatch) {
  FakeReplay replay;
  replay.history[0] = VllmBatch(1.0).Stored({1}, std::nullopt, 100).Bytes();
  replay.history[1] = VllmBatch(2.0).Stored({2}, uint64_t{1}, 104).Bytes();
  EngineStream stream = MakeStream(&replay);
  EXPECT_TRUE(stream.CatchUp());
  EXPECT_EQ(replay.last_start, 0u);  // without state: from the publisher's first seq
  EXPECT_EQ(Hbm(), 2u);
  replay.history[2] = VllmBatch(3.0).Stored({3}, uint64_t{2}, 108).Bytes();
  EXPECT_TRUE(stream.CatchUp());
  EXPECT_EQ(replay.last_start, 1u);  // the last applied seq, to compare it
  EXPECT_EQ(Hbm(), 3u);
  EXPECT_EQ(stream.stats().catch_ups_ok.load(), 2u);
  EXPECT_EQ(stream.stats().seq_gaps.load(), 0u);
  EXPECT_EQ(stream.stats().restarts.load(), 0u);
  // Live batches already applied by the catch-up are redeliveries.
  stream.OnMessage(2, replay.history[2]);
  EXPECT_EQ(stream.stats().duplicates.load(), 1u);
}

TEST_F(EngineStreamTest, CatchUpSeesAnEngineThatRestartedByItsBatchAtTheLastSeq) {
  FakeReplay replay;
  EngineStream stream = MakeStream(&replay);
  stream.OnMessage(0, VllmBatch(1.0).Stored({1}, std::nullopt, 100).Bytes());
  stream.OnMessage(1, VllmBatch(2.0).Stored({2}, std::nullopt, 200).Bytes());
  // A new process, later clock, already past seq 1.
  replay.history[0] = VllmBatch(90.0).Stored({7}, std::nullopt, 700).Bytes();
  replay.history[1] = VllmBatch(91.0).Stored({8}, std::nullopt, 800).Bytes();
  replay.history[2] = VllmBatch(92.0).Stored({9}, std::nullopt, 900).Bytes();
  EXPECT_TRUE(stream.CatchUp());
  EXPECT_EQ(stream.stats().restarts.load(), 1u);
  EXPECT_EQ(Hbm(), 3u);  // 7, 8, 9: the old process's blocks are gone
  EXPECT_EQ(stream.stats().last_seq.load(), 2);
}

TEST_F(EngineStreamTest, CatchUpWithNothingAtTheLastSeqMeansANewShorterHistory) {
  FakeReplay replay;
  EngineStream stream = MakeStream(&replay);
  for (uint64_t seq = 0; seq < 5; ++seq) {
    stream.OnMessage(seq,
                     VllmBatch(1.0 + seq).Stored({seq + 1}, std::nullopt, 100 + 4 * seq).Bytes());
  }
  replay.history[0] = VllmBatch(90.0).Stored({7}, std::nullopt, 700).Bytes();
  EXPECT_TRUE(stream.CatchUp());
  EXPECT_EQ(stream.stats().restarts.load(), 1u);
  EXPECT_EQ(Hbm(), 1u);
  EXPECT_EQ(State(), index::WorkerState::kLive);
}

TEST_F(EngineStreamTest, CatchUpPastARolledOverBufferIsStaleUntilACleanPoint) {
  FakeReplay replay;
  EngineStream stream = MakeStream(&replay);
  stream.OnMessage(0, VllmBatch(1.0).Stored({1}, std::nullopt, 100).Bytes());
  replay.history[4] = VllmBatch(5.0).Stored({5}, std::nullopt, 500).Bytes();
  EXPECT_FALSE(stream.CatchUp());
  EXPECT_EQ(State(), index::WorkerState::kStale);
  EXPECT_EQ(stream.stats().stale(), StaleReason::kReplayRolledOver);
  EXPECT_EQ(stream.stats().stale_detail(),
            "batches 1..3 are no longer in the engine's replay buffer (its oldest is 4)");
  EXPECT_GE(stream.stats().stale_since_ms.load(), 0);
  EXPECT_EQ(stream.stats().last_seq.load(), 4);
  // A contiguous live batch does not bring the lost batches back.
  stream.OnMessage(5, VllmBatch(6.0).Stored({6}, std::nullopt, 600).Bytes());
  EXPECT_EQ(State(), index::WorkerState::kStale);
  stream.OnMessage(6, VllmBatch(7.0).Cleared().Bytes());
  EXPECT_EQ(State(), index::WorkerState::kLive);
  EXPECT_EQ(stream.stats().stale(), StaleReason::kNone);
  EXPECT_EQ(stream.stats().stale_since_ms.load(), -1);
  EXPECT_EQ(stream.stats().stale_detail(), "");
}

TEST_F(EngineStreamTest, AnUnansweredCatchUpIsStaleUntilALiveBatchShowsKvgovCurrent) {
  FakeReplay replay;
  EngineStream stream = MakeStream(&replay);
  stream.OnMessage(0, VllmBatch(1.0).Stored({1}, std::nullopt, 100).Bytes());
  replay.answer = Status::Unavailable("replay tcp://e:1: no reply within 1000 ms");
  replay.history.clear();
  EXPECT_FALSE(stream.CatchUp());
  EXPECT_EQ(stream.stats().stale(), StaleReason::kReplayUnanswered);
  EXPECT_EQ(stream.stats().stale_detail(),
            "catching up from seq 1: replay tcp://e:1: no reply within 1000 ms");
  EXPECT_EQ(stream.stats().catch_ups_failed.load(), 1u);
  // The next live batch follows the last applied one: nothing is missing.
  stream.OnMessage(1, VllmBatch(2.0).Stored({2}, std::nullopt, 200).Bytes());
  EXPECT_EQ(State(), index::WorkerState::kLive);
  EXPECT_EQ(stream.stats().stale(), StaleReason::kNone);
}

TEST_F(EngineStreamTest, ALostGapIsNotMaskedByALaterUnansweredCatchUp) {
  EngineStream stream = MakeStream(nullptr);
  stream.OnMessage(0, VllmBatch(1.0).Stored({1}, std::nullopt, 100).Bytes());
  stream.OnMessage(3, VllmBatch(2.0).Stored({2}, std::nullopt, 200).Bytes());
  EXPECT_EQ(stream.stats().stale(), StaleReason::kGapLost);
  EXPECT_EQ(stream.stats().stale_detail(),
            "batches 1..2 are lost: the engine has no replay socket");
  EXPECT_TRUE(stream.CatchUp());  // no replay socket: nothing to ask
  stream.OnMessage(4, VllmBatch(3.0).Stored({3}, std::nullopt, 300).Bytes());
  EXPECT_EQ(stream.stats().stale(), StaleReason::kGapLost);
  EXPECT_EQ(State(), index::WorkerState::kStale);
}

}  // namespace
}  // namespace kvgov::ingest
