#include "kvgov/ingest/stream_store.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>

#include "ingest/stream_store_test_history.h"
#include "ingest/vllm_batch_builder.h"
#include "kvgov/core/digest.h"

#include "testing/scratch_dir.h"

namespace kvgov::ingest {
namespace {

namespace fs = std::filesystem;
using stream_store_test::Batch;
using stream_store_test::kBlockSize;

// The checksum of what an index holds for "w1": the SHA-256 of its
// snapshot, whose bytes are equal for equal residency.
std::string Checksum(const index::ResidencyIndex& index) {
  return Sha256Hex(index.SnapshotWorker("w1").value());
}

// The checksum of the index batches [0, last] give alone, with no store.
std::string Uninterrupted(int64_t last) {
  index::ResidencyIndex index;
  EXPECT_TRUE(index.AddWorker("w1", "llama", kBlockSize).ok());
  EngineStream stream("w1", EngineKind::kVllm, &index, nullptr, {});
  for (int64_t seq = 0; seq <= last; ++seq) {
    stream.OnMessage(static_cast<uint64_t>(seq), Batch(static_cast<uint64_t>(seq)));
  }
  return Checksum(index);
}

class StreamStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<store::Store> OpenStore() {
    Result<std::unique_ptr<store::Store>> store = store::Store::Open(dir_.string());
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // A fresh index recovered from the store: its checksum, the last
  // seq it resumed at (-1: none), and what came from where.
  struct Recovered {
    std::string checksum;
    int64_t last_seq = -1;
    StreamStore::RecoveryStats stats;
  };
  Recovered Recover(store::Store* store) {
    index::ResidencyIndex index;
    EXPECT_TRUE(index.AddWorker("w1", "llama", kBlockSize).ok());
    StreamStore durable(store, &index, StreamStore::Options{});
    EngineStream stream("w1", EngineKind::kVllm, &index, nullptr, {}, &durable);
    Recovered recovered;
    Status status = durable.Recover(stream, &recovered.stats);
    EXPECT_TRUE(status.ok()) << status.ToString();
    recovered.checksum = Checksum(index);
    recovered.last_seq = stream.stats().last_seq.load();
    return recovered;
  }

  // Applies batches [0, batches) of `history` to a fresh index through a
  // stream store over `store`. In step: the stream waits for the writer
  // after each batch, so it never puts a snapshot off (the cadence is
  // exact); otherwise it runs ahead, and the destructor writes the rest.
  enum class Pace { kInStep, kAhead };
  void Ingest(store::Store* store, uint64_t batches, StreamStore::Options options, Pace pace,
              const std::function<std::string(uint64_t)>& history = Batch) {
    index::ResidencyIndex index;
    ASSERT_TRUE(index.AddWorker("w1", "llama", kBlockSize).ok());
    StreamStore durable(store, &index, options);
    EngineStream stream("w1", EngineKind::kVllm, &index, nullptr, {}, &durable);
    for (uint64_t seq = 0; seq < batches; ++seq) {
      stream.OnMessage(seq, history(seq));
      if (pace == Pace::kInStep) durable.Flush();
    }
  }

  test_support::ScratchDir dir_{"kvgov_stream_store_test"};
};

TEST_F(StreamStoreTest, RecoveryRebuildsExactlyTheIndexTheStreamApplied) {
  constexpr uint64_t kBatches = 500;
  constexpr uint64_t kSnapshotEvery = 37;
  std::unique_ptr<store::Store> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Ingest(store.get(), kBatches, {.snapshot_every = kSnapshotEvery, .snapshot_log_ratio = 0},
         Pace::kInStep);
  const Recovered recovered = Recover(store.get());
  EXPECT_EQ(recovered.last_seq, static_cast<int64_t>(kBatches - 1));
  EXPECT_EQ(recovered.checksum, Uninterrupted(kBatches - 1));
  // The 13th snapshot is after seq 480; the 19 batches after it come from the log.
  EXPECT_EQ(recovered.stats.logged_batches, kBatches % kSnapshotEvery);
  EXPECT_GT(recovered.stats.snapshot_blocks, 0u);
}

// The stream runs ahead of the writer: a worker's next snapshot waits until
// the one before is written, and whatever the timing the store recovers
// exactly what was applied.
TEST_F(StreamStoreTest, AStreamAheadOfTheWriterStillRecoversExactly) {
  constexpr uint64_t kBatches = 2000;
  std::unique_ptr<store::Store> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Ingest(store.get(), kBatches, {.snapshot_every = 3, .snapshot_log_ratio = 0}, Pace::kAhead);
  const Recovered recovered = Recover(store.get());
  EXPECT_EQ(recovered.last_seq, static_cast<int64_t>(kBatches - 1));
  EXPECT_EQ(recovered.checksum, Uninterrupted(kBatches - 1));
  // Snapshots were written (when, depends on the writer's pace).
  EXPECT_LT(recovered.stats.logged_batches, kBatches);
}

// With room for one log record only, every record waits for the writer
// to write the one before: the order of log records and snapshots is
// still the order they were handed over in.
TEST_F(StreamStoreTest, ABoundOfOneJobKeepsEveryRecordInOrder) {
  constexpr uint64_t kBatches = 300;
  std::unique_ptr<store::Store> store = OpenStore();
  ASSERT_NE(store, nullptr);
  Ingest(store.get(), kBatches,
         {.snapshot_every = 5, .snapshot_log_ratio = 0, .max_queued_bytes = 1}, Pace::kAhead);
  const Recovered recovered = Recover(store.get());
  EXPECT_EQ(recovered.last_seq, static_cast<int64_t>(kBatches - 1));
  EXPECT_EQ(recovered.checksum, Uninterrupted(kBatches - 1));
  EXPECT_EQ(recovered.stats.logged_batches, 0u);  // the 60th snapshot is at the last batch
}

TEST_F(StreamStoreTest, SnapshotAllLeavesNothingToReplay) {
  std::unique_ptr<store::Store> store = OpenStore();
  ASSERT_NE(store, nullptr);
  {
    index::ResidencyIndex index;
    ASSERT_TRUE(index.AddWorker("w1", "llama", kBlockSize).ok());
    StreamStore durable(store.get(), &index, {.snapshot_every = 1000});
    EngineStream stream("w1", EngineKind::kVllm, &index, nullptr, {}, &durable);
    for (uint64_t seq = 0; seq < 150; ++seq) stream.OnMessage(seq, Batch(seq));
    ASSERT_TRUE(durable.SnapshotAll().ok());
  }
  const Recovered recovered = Recover(store.get());
  EXPECT_EQ(recovered.last_seq, 149);
  EXPECT_EQ(recovered.checksum, Uninterrupted(149));
  EXPECT_EQ(recovered.stats.logged_batches, 0u);
}

// A worker that only grows: three new blocks a batch, none evicted. With
// a snapshot allowed after every batch, the ratio alone decides: a snapshot
// once the blocks changed since the last one reach what it held. Its held
// 3, 6, 12, 24, ... blocks, so snapshots follow seqs 0, 1, 3, 7, 15, 31 and
// 63, and the 36 batches after 63 are what a recovery replays.
TEST_F(StreamStoreTest, TheLogRatioSpacesSnapshotsByWhatTheyWouldRewrite) {
  auto growing = [](uint64_t seq) {
    VllmBatchBuilder<kBlockSize> batch(1.0 + static_cast<double>(seq));
    batch.Stored({seq * 8 + 1, seq * 8 + 2, seq * 8 + 3}, std::nullopt,
                 static_cast<int64_t>(seq) * 100);
    return batch.Bytes();
  };
  for (const double ratio : {1.0, 0.0}) {
    SCOPED_TRACE("ratio " + std::to_string(ratio));
    fs::remove_all(dir_.path());
    std::unique_ptr<store::Store> store = OpenStore();
    ASSERT_NE(store, nullptr);
    Ingest(store.get(), 100, {.snapshot_every = 1, .snapshot_log_ratio = ratio}, Pace::kInStep,
           growing);
    const Recovered recovered = Recover(store.get());
    EXPECT_EQ(recovered.last_seq, 99);
    EXPECT_EQ(recovered.stats.snapshot_blocks, ratio > 0 ? 64u * 3 : 100u * 3);
    EXPECT_EQ(recovered.stats.logged_batches, ratio > 0 ? 36u : 0u);
  }
}

// kill -9 of a process ingesting into the store (stream_store_test_child:
// it recovers, then applies the history from the batch after the recovered
// one, as the engine's replay would, and syncs the WAL every 5 ms, as the
// daemon's group commit does every 100), at random moments, five times over
// one store. Before each start, and at the end, this process recovers the
// store and checks that it is exactly what the batches up to the recovered
// seq give without any store.
// A real store that refuses the log deletions that follow snapshots while
// told to, as a failed write would: the snapshot itself is then stored
// (PutFlushed) and the log it covers is not deleted.
class RefusesLogDeletions final : public store::Store {
 public:
  explicit RefusesLogDeletions(store::Store* real) : real_(real) {}
  bool refuse = false;

  Status Write(std::span<const store::WriteOp> ops, bool sync) override {
    for (const store::WriteOp& op : ops) {
      if (refuse && !op.range_end.empty()) return Status::IOError("refused for the test");
    }
    return real_->Write(ops, sync);
  }
  Status PutFlushed(store::Column column, std::string_view key, std::string_view value) override {
    return real_->PutFlushed(column, key, value);
  }
  Result<std::optional<std::string>> Get(store::Column column,
                                         std::string_view key) const override {
    return real_->Get(column, key);
  }
  Result<bool> ReadPinned(
      store::Column column, std::string_view key,
      const std::function<Status(std::string_view value)>& read) const override {
    return real_->ReadPinned(column, key, read);
  }
  Status Scan(store::Column column, std::string_view begin, std::string_view end,
              const std::function<bool(std::string_view, std::string_view)>& visit) const override {
    return real_->Scan(column, begin, end, visit);
  }
  Result<std::optional<std::string>> LastKey(store::Column column) const override {
    return real_->LastKey(column);
  }
  Status SyncWal() override { return real_->SyncWal(); }
  Status ResumeCompactions() override { return real_->ResumeCompactions(); }
  Status FlushForTest() override { return real_->FlushForTest(); }
  const std::string& dir() const override { return real_->dir(); }

 private:
  store::Store* const real_;
};

TEST_F(StreamStoreTest, LogAFailedDeletionLeftIsDeletedByTheNextSnapshotEvenOfAnOldEpoch) {
  std::unique_ptr<store::Store> real = OpenStore();
  ASSERT_NE(real, nullptr);
  RefusesLogDeletions store(real.get());
  // Batches logged in an epoch: the keys under "w1\0" and its u64 epoch.
  auto logged_in_epoch = [&](uint64_t epoch) {
    std::string prefix = "w1";
    prefix.push_back('\0');
    prefix += store::KeyU64(epoch);
    std::string end = "w1";
    end.push_back('\0');
    end += store::KeyU64(epoch + 1);
    int count = 0;
    EXPECT_TRUE(store
                    .Scan(store::Column::kEventLog, prefix, end,
                          [&](std::string_view, std::string_view) {
                            ++count;
                            return true;
                          })
                    .ok());
    return count;
  };
  index::ResidencyIndex index;
  ASSERT_TRUE(index.AddWorker("w1", "llama", kBlockSize).ok());
  StreamStore durable(&store, &index,
                      StreamStore::Options{.snapshot_every = 4, .snapshot_log_ratio = 0});
  EngineStream stream("w1", EngineKind::kVllm, &index, nullptr, {}, &durable);
  // Epoch 0: a snapshot after seq 3 deletes seqs 0-3; 4 and 5 stay logged.
  for (uint64_t seq = 0; seq < 6; ++seq) {
    stream.OnMessage(seq, Batch(seq));
    durable.Flush();
  }
  ASSERT_EQ(logged_in_epoch(0), 2);
  // The engine restarts (seq 0 again, a newer time): the new epoch's first
  // snapshot is stored, but the deletion of epoch 0's log fails.
  store.refuse = true;
  stream.OnMessage(0, VllmBatchBuilder<kBlockSize>(1000.0).Stored({9001}, std::nullopt, 1).Bytes());
  durable.Flush();
  ASSERT_EQ(stream.stats().restarts.load(), 1u);
  ASSERT_EQ(logged_in_epoch(0), 2);
  // The next snapshot of epoch 1 takes them: its deletion starts at epoch 0.
  store.refuse = false;
  for (uint64_t seq = 1; seq < 8; ++seq) {
    stream.OnMessage(seq, VllmBatchBuilder<kBlockSize>(1000.0 + static_cast<double>(seq))
                              .Stored({9001 + seq}, std::nullopt, 1)
                              .Bytes());
    durable.Flush();
  }
  EXPECT_EQ(logged_in_epoch(0), 0);
  EXPECT_EQ(logged_in_epoch(1), 0);  // and its own, up to the snapshot at seq 7
}

TEST_F(StreamStoreTest, KillNineAtRandomMomentsRecoversAnExactPrefix) {
  std::mt19937_64 rng(::testing::UnitTest::GetInstance()->random_seed());
  int64_t applied_before = -1;
  uint64_t snapshot_rounds = 0;
  for (int round = 0; round < 5; ++round) {
    {
      std::unique_ptr<store::Store> store = OpenStore();
      ASSERT_NE(store, nullptr);
      const Recovered recovered = Recover(store.get());
      ASSERT_EQ(recovered.checksum, Uninterrupted(recovered.last_seq)) << "round " << round;
      // Nothing synced is lost: at least what an earlier round saw recovered.
      EXPECT_GE(recovered.last_seq, applied_before) << "round " << round;
      applied_before = recovered.last_seq;
      if (recovered.stats.snapshot_blocks > 0) ++snapshot_rounds;
    }
    // A process of its own (fork, then exec), so its RocksDB and threads
    // start fresh; it says when it is ingesting on the pipe.
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const std::string store_dir = dir_.string();
    const std::string ready_fd = std::to_string(ready[1]);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(ready[0]);
      ::execl(KVGOV_STREAM_STORE_TEST_CHILD, KVGOV_STREAM_STORE_TEST_CHILD, store_dir.c_str(),
              ready_fd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(ready[1]);
    pollfd started{ready[0], POLLIN, 0};
    char go = 0;
    const bool ingesting = ::poll(&started, 1, 20'000) == 1 && ::read(ready[0], &go, 1) == 1;
    ::close(ready[0]);
    if (!ingesting) {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
      FAIL() << "the child did not start ingesting within 20 s";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 180));
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child ended by itself: " << status;
  }
  std::unique_ptr<store::Store> store = OpenStore();
  ASSERT_NE(store, nullptr);
  const Recovered recovered = Recover(store.get());
  EXPECT_EQ(recovered.checksum, Uninterrupted(recovered.last_seq));
  EXPECT_GT(recovered.last_seq, applied_before);
  EXPECT_GT(snapshot_rounds, 0u);
}

}  // namespace
}  // namespace kvgov::ingest
