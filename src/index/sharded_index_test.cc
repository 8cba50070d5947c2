// The index sharded by worker (docs/adr/0027): the same events give the
// same answers whatever the shard count, and workers' streams applied on
// threads of their own, with queries and registrations running beside them,
// leave the index that applying them one after another leaves.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvgov/index/residency_index.h"

namespace kvgov::index {
namespace {

constexpr int64_t kBlockSize = 4;
constexpr int kWorkers = 6;
constexpr int kSystemPrompts = 3;
constexpr size_t kSystemBlocks = 8;

std::string WorkerId(int worker) { return "w" + std::to_string(worker); }

std::vector<int64_t> RandomTokens(std::mt19937_64& rng, size_t blocks) {
  std::vector<int64_t> tokens(blocks * kBlockSize);
  for (int64_t& token : tokens) token = static_cast<int64_t>(rng() % 50000);
  return tokens;
}

std::vector<int64_t> SystemPrompt(int prompt) {
  std::mt19937_64 rng(100 + static_cast<uint64_t>(prompt));
  return RandomTokens(rng, kSystemBlocks);
}

// One worker's stream: system prompts that other workers store too (so keys
// are shared within and across shards), conversations under them, offloads
// to CPU, hashes reused, evictions, and, for some workers, an engine restart halfway.
std::vector<EngineEvent> WorkerEvents(int worker) {
  std::mt19937_64 rng(0x5eed + static_cast<uint64_t>(worker));
  std::vector<EngineEvent> events;
  std::vector<EngineHash> live;
  std::vector<EngineHash> tails;  // each stored system prompt's last block
  // System prompts are never evicted here: they stay shared.
  auto store = [&](std::vector<int64_t> tokens, std::optional<EngineHash> parent, bool evictable) {
    BlockStored stored;
    stored.block_size = kBlockSize;
    stored.medium = "GPU";
    stored.parent_block_hash = parent;
    for (size_t b = 0; b < tokens.size() / kBlockSize; ++b) stored.block_hashes.push_back(rng());
    stored.token_ids = std::move(tokens);
    if (evictable) live.insert(live.end(), stored.block_hashes.begin(), stored.block_hashes.end());
    const EngineHash tail = stored.block_hashes.back();
    events.emplace_back(std::move(stored));
    return tail;
  };
  for (int prompt = 0; prompt < kSystemPrompts; ++prompt) {
    if ((worker + prompt) % 3 != 2)
      tails.push_back(store(SystemPrompt(prompt), std::nullopt, false));
  }
  for (int step = 0; step < 400; ++step) {
    const uint64_t what = rng() % 10;
    if (what < 6) {
      std::optional<EngineHash> parent;
      if (!tails.empty() && rng() % 4 != 0) parent = tails[rng() % tails.size()];
      store(RandomTokens(rng, 1 + rng() % 6), parent, true);
    } else if (what < 8 && !live.empty()) {
      BlockRemoved removed;
      removed.medium = "GPU";
      for (int i = 0; i < 3; ++i) removed.block_hashes.push_back(live[rng() % live.size()]);
      events.emplace_back(std::move(removed));
    } else if (!live.empty()) {
      // A hash stored again, in host memory, over other tokens: the hash
      // now names another key, and the old one stays resident (loose).
      BlockStored stored;
      stored.block_size = kBlockSize;
      stored.medium = "CPU";
      stored.block_hashes.push_back(live[rng() % live.size()]);
      stored.token_ids = RandomTokens(rng, 1);
      events.emplace_back(std::move(stored));
    }
    if (step == 200 && worker % 3 == 1) {
      events.emplace_back(AllBlocksCleared{});
      live.clear();
      tails.clear();
    }
  }
  return events;
}

// Chains routes ask about: each system prompt and a stretch past it.
std::vector<std::vector<BlockKey>> Chains(const ResidencyIndex& index) {
  std::vector<std::vector<BlockKey>> chains;
  for (int prompt = 0; prompt < kSystemPrompts; ++prompt) {
    std::vector<int64_t> tokens = SystemPrompt(prompt);
    chains.push_back(index.hasher().Chain({"llama", "", 0}, tokens, kBlockSize));
    std::mt19937_64 rng(7);
    const std::vector<int64_t> more = RandomTokens(rng, 4);
    tokens.insert(tokens.end(), more.begin(), more.end());
    chains.push_back(index.hasher().Chain({"llama", "", 0}, tokens, kBlockSize));
  }
  return chains;
}

void ExpectSameAnswers(const ResidencyIndex& got, const ResidencyIndex& want) {
  EXPECT_EQ(got.ResidentPairs(), want.ResidentPairs());
  const std::vector<WorkerResidency> got_workers = got.Workers();
  const std::vector<WorkerResidency> want_workers = want.Workers();
  ASSERT_EQ(got_workers.size(), want_workers.size());
  for (size_t i = 0; i < got_workers.size(); ++i) {
    SCOPED_TRACE(want_workers[i].id);
    EXPECT_EQ(got_workers[i].id, want_workers[i].id);
    EXPECT_EQ(got_workers[i].state, want_workers[i].state);
    EXPECT_EQ(got_workers[i].blocks, want_workers[i].blocks);
    EXPECT_EQ(got_workers[i].salts, want_workers[i].salts);
    // Equal residency is equal bytes (the snapshot names no worker).
    EXPECT_EQ(got.SnapshotWorker(want_workers[i].id).value(),
              want.SnapshotWorker(want_workers[i].id).value());
  }
  for (const std::vector<BlockKey>& chain : Chains(want)) {
    const std::vector<WorkerOverlap> got_overlap = got.Overlap(chain);
    const std::vector<WorkerOverlap> want_overlap = want.Overlap(chain);
    ASSERT_EQ(got_overlap.size(), want_overlap.size());
    for (size_t i = 0; i < got_overlap.size(); ++i) {
      SCOPED_TRACE(want_overlap[i].worker);
      EXPECT_EQ(got_overlap[i].worker, want_overlap[i].worker);
      EXPECT_EQ(got_overlap[i].blocks, want_overlap[i].blocks);
      EXPECT_EQ(got_overlap[i].by_tier, want_overlap[i].by_tier);
      EXPECT_EQ(got_overlap[i].best_tier, want_overlap[i].best_tier);
    }
  }
}

// Every worker registered in id-descending order (so worker numbers, and
// with them shards, are not in id order), some with a declared pool.
void Register(ResidencyIndex& index) {
  for (int worker = kWorkers - 1; worker >= 0; --worker) {
    ASSERT_TRUE(
        index.AddWorker(WorkerId(worker), "llama", kBlockSize, worker % 2 == 0 ? 512 : 0).ok());
  }
}

// The same streams, applied one event of each worker in turn, then what
// the rest of the daemon does to an index: transports' reports by key, a
// worker gone stale, one removed and registered again, one restored from
// a snapshot.
void ApplyEverything(ResidencyIndex& index, const std::vector<std::vector<EngineEvent>>& streams) {
  for (size_t at = 0;; ++at) {
    bool any = false;
    for (int worker = 0; worker < kWorkers; ++worker) {
      if (at >= streams[worker].size()) continue;
      any = true;
      ASSERT_TRUE(index.Apply(WorkerId(worker), streams[worker][at]).ok());
    }
    if (!any) break;
  }
  const std::vector<std::vector<BlockKey>> chains = Chains(index);
  ASSERT_TRUE(index.AddBlocks("w2", chains[1], ResidencyTier::kDisk).ok());
  ASSERT_TRUE(index.AddBlocks("w5", chains[3], ResidencyTier::kDRAM).ok());
  ASSERT_TRUE(index.RemoveBlocks("w0", std::span(chains[0]).first(3), ResidencyTier::kHBM).ok());
  ASSERT_TRUE(index.SetState("w4", WorkerState::kStale).ok());
  ASSERT_TRUE(index.RemoveWorker("w3").ok());
  ASSERT_TRUE(index.AddWorker("w3", "llama", kBlockSize).ok());
  ASSERT_TRUE(index.AddBlocks("w3", chains[5], ResidencyTier::kHBM).ok());
  const std::string snapshot = index.SnapshotWorker("w1").value();
  ASSERT_TRUE(index.ClearWorker("w1").ok());
  ASSERT_TRUE(index.RestoreWorker("w1", snapshot).ok());
}

std::vector<std::vector<EngineEvent>> AllStreams() {
  std::vector<std::vector<EngineEvent>> streams;
  for (int worker = 0; worker < kWorkers; ++worker) streams.push_back(WorkerEvents(worker));
  return streams;
}

TEST(ShardedIndexTest, AnswersDoNotDependOnTheShardCount) {
  const std::vector<std::vector<EngineEvent>> streams = AllStreams();
  ResidencyIndex one_lock;
  EXPECT_EQ(one_lock.shards(), 1u);
  Register(one_lock);
  ApplyEverything(one_lock, streams);
  ASSERT_GT(one_lock.ResidentPairs(), 1000u);
  // Shared prefixes are held by several workers, so the check covers keys
  // whose holders span shards.
  size_t most_holders = 0;
  for (const std::vector<BlockKey>& chain : Chains(one_lock)) {
    most_holders = std::max(most_holders, one_lock.Overlap(chain).size());
  }
  ASSERT_GE(most_holders, 3u);
  for (size_t shards : {2, 3, 4, 7}) {
    SCOPED_TRACE("shards " + std::to_string(shards));
    ResidencyIndex sharded(BlockKeyHasher(), shards);
    EXPECT_EQ(sharded.shards(), shards);
    Register(sharded);
    ApplyEverything(sharded, streams);
    ExpectSameAnswers(sharded, one_lock);
  }
}

TEST(ShardedIndexTest, ShardCountIsClamped) {
  EXPECT_EQ(ResidencyIndex(BlockKeyHasher(), 0).shards(), 1u);
  EXPECT_EQ(ResidencyIndex(BlockKeyHasher(), 1000).shards(), ResidencyIndex::kMaxShards);
}

// Each worker's stream on a thread of its own, as ZmqIngest runs them, while
// routes query and a worker is registered and removed over and over: the
// final index is the one-after-another one, and no query sees a torn answer.
TEST(ShardedIndexTest, ConcurrentStreamsLeaveTheIndexOfOneAfterAnother) {
  const std::vector<std::vector<EngineEvent>> streams = AllStreams();
  ResidencyIndex sequential;
  Register(sequential);
  ApplyEverything(sequential, streams);

  for (size_t shards : {2, 3}) {
    SCOPED_TRACE("shards " + std::to_string(shards));
    ResidencyIndex index(BlockKeyHasher(), shards);
    Register(index);
    const std::vector<std::vector<BlockKey>> chains = Chains(index);
    std::atomic<bool> done{false};
    std::atomic<uint64_t> queries{0};
    std::atomic<uint64_t> torn{0};
    std::thread reader([&] {
      while (!done.load()) {
        for (const std::vector<BlockKey>& chain : chains) {
          const std::vector<WorkerOverlap> overlap = index.Overlap(chain);
          for (size_t i = 0; i < overlap.size(); ++i) {
            const WorkerOverlap& o = overlap[i];
            const uint64_t by_tier =
                std::accumulate(o.by_tier.begin(), o.by_tier.end(), uint64_t{0});
            if (o.blocks == 0 || o.blocks > chain.size() || o.best_tier.size() != o.blocks ||
                by_tier != o.blocks || (i > 0 && !(overlap[i - 1].worker < o.worker))) {
              torn.fetch_add(1);
            }
          }
          (void)index.Workers();
          queries.fetch_add(1);
        }
      }
    });
    std::thread registrar([&] {
      // Its number is reused each time, in whichever shard it falls.
      const std::vector<BlockKey>& chain = chains[0];
      while (!done.load()) {
        if (!index.AddWorker("transient", "llama", kBlockSize).ok() ||
            !index.AddBlocks("transient", chain, ResidencyTier::kHBM).ok() ||
            !index.RemoveWorker("transient").ok()) {
          torn.fetch_add(1);
        }
      }
    });
    std::vector<std::thread> writers;
    std::atomic<int> failed_applies{0};
    for (int worker = 0; worker < kWorkers; ++worker) {
      writers.emplace_back([&, worker] {
        for (const EngineEvent& event : streams[worker]) {
          if (!index.Apply(WorkerId(worker), event).ok()) failed_applies.fetch_add(1);
        }
      });
    }
    for (std::thread& writer : writers) writer.join();
    done.store(true);
    reader.join();
    registrar.join();
    EXPECT_EQ(failed_applies.load(), 0);
    EXPECT_EQ(torn.load(), 0u);
    EXPECT_GT(queries.load(), 0u);
    EXPECT_FALSE(index.Worker("transient").has_value());

    // Then the rest of ApplyEverything, once every stream is in.
    ApplyEverything(index, std::vector<std::vector<EngineEvent>>(kWorkers));
    ExpectSameAnswers(index, sequential);
  }
}

}  // namespace
}  // namespace kvgov::index
