// Residency index throughput, memory, and snapshot / restore cost.
//   cmake -B build-bench -DCMAKE_BUILD_TYPE=Release -DKVGOV_BUILD_BENCHMARKS=ON
//   cmake --build build-bench --target kvgov_index_bench
//   build-bench/src/index/kvgov_index_bench

#include <malloc.h>
#include <sys/resource.h>

#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "testing/bench_smoke.h"
#include "kvgov/index/block_key.h"
#include "kvgov/index/residency_index.h"

namespace kvgov::index {
namespace {

constexpr int64_t kBlockSize = 16;

// One engine's worth of BlockStored events: `chains` prefixes of `depth`
// blocks each, with random engine hashes as vLLM without PYTHONHASHSEED.
// Tokens count up from `first_token`: engines given the same one hold the
// same prefixes. With `tenants` > 0, chain c is salted with tenant
// c % tenants's salt on its first block, as vLLM publishes it (extra_keys),
// so the index keeps its lineage (ResidencyIndex::Residue).
std::vector<BlockStored> MakeChains(int chains, int depth, uint64_t seed, int64_t first_token = 1,
                                    int tenants = 0) {
  std::mt19937_64 rng(seed);
  std::vector<BlockStored> events;
  int64_t next_token = first_token;
  for (int c = 0; c < chains; ++c) {
    BlockStored stored;
    stored.block_size = kBlockSize;
    stored.medium = "GPU";
    for (int b = 0; b < depth; ++b) {
      stored.block_hashes.push_back(rng());
      for (int t = 0; t < kBlockSize; ++t) stored.token_ids.push_back(next_token++);
    }
    if (tenants > 0) stored.extra_keys = {"[\"salt-" + std::to_string(c % tenants) + "\"]"};
    events.push_back(std::move(stored));
  }
  return events;
}

// Heap in use, including chunks malloc served with mmap: those (anything
// above the mmap threshold, so every large table array) are in hblkhd, not
// uordblks, and leaving them out would under-count exactly the big tables.
size_t HeapInUse() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

// Arg 0: blocks a chain. Arg 1: tenants salting the chains (0: unsalted;
// a salted chain's refs also get a lineage entry).
void BM_ApplyBlockStored(benchmark::State& state) {
  const int depth = static_cast<int>(state.range(0));
  std::vector<BlockStored> events = MakeChains(1024, depth, 1, 1, static_cast<int>(state.range(1)));
  for (auto _ : state) {
    state.PauseTiming();
    ResidencyIndex index;
    (void)index.AddWorker("w1", "llama", kBlockSize);
    state.ResumeTiming();
    for (const BlockStored& event : events) benchmark::DoNotOptimize(index.Apply("w1", event));
  }
  state.SetItemsProcessed(state.iterations() * 1024 * depth);
  state.counters["blocks_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * 1024 * depth), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ApplyBlockStored)
    ->Args({1, 0})
    ->Args({16, 0})
    ->Args({1, 64})
    ->Args({16, 64})
    ->Unit(benchmark::kMillisecond);

// A revocation's residue over one worker of 1,048,576 salted blocks (64
// tenants), a sixteenth of them offloaded to DRAM too: the count a
// directive re-reads every tick (Arg 0), and the by-tier walk GET
// /v1/invalidations/{id} makes (Arg 1; blocks all in one tier skip it).
void BM_Residue(benchmark::State& state) {
  const bool by_tier = state.range(0) != 0;
  const std::vector<BlockStored> events = MakeChains(bench::Sized(1 << 16, 1 << 8), 16, 5, 1, 64);
  ResidencyIndex index;
  (void)index.AddWorker("w1", "llama", kBlockSize, uint64_t{1} << 20);
  for (const BlockStored& event : events) (void)index.Apply("w1", event);
  for (size_t c = 0; c < events.size(); c += 16) {
    BlockStored offloaded = events[c];
    offloaded.medium = "CPU";
    (void)index.Apply("w1", offloaded);
  }
  uint64_t matched = 0;
  for (auto _ : state) {
    const std::vector<LineageResidue> residue =
        index.Residue([](std::string_view root) { return root == "[\"salt-7\"]"; }, by_tier);
    matched = residue.empty() ? 0 : residue.front().matched_refs;
    benchmark::DoNotOptimize(residue);
  }
  state.counters["matched_blocks"] = static_cast<double>(matched);
}
BENCHMARK(BM_Residue)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// Ingest of two engines' streams on two threads (as ZmqIngest runs them,
// a thread a stream), into one lock and into two shards (docs/adr/0027),
// beside one stream on one thread, in the same iteration: 524,288 blocks a
// stream, events of one 16-block chain with token ids, distinct tokens per
// engine, pools declared. Blocks per second count every stream's blocks
// over the wall time until the last thread is done. The ceiling beside
// them: the two streams into two separate indexes, which share nothing but
// the machine.
double SecondsToApply(size_t shards, const std::vector<std::vector<BlockStored>>& streams,
                      uint64_t pool, bool separate_indexes = false) {
  std::vector<std::unique_ptr<ResidencyIndex>> indexes;
  for (size_t s = 0; s < streams.size(); ++s) {
    if (s == 0 || separate_indexes) {
      indexes.push_back(std::make_unique<ResidencyIndex>(BlockKeyHasher(), shards));
    }
    (void)indexes.back()->AddWorker("w" + std::to_string(s), "llama", kBlockSize, pool);
  }
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (size_t s = 0; s < streams.size(); ++s) {
    threads.emplace_back([&, s] {
      ResidencyIndex& index = *indexes[separate_indexes ? s : 0];
      const std::string id = "w" + std::to_string(s);
      while (!go.load(std::memory_order_acquire)) {
      }
      for (const BlockStored& event : streams[s]) benchmark::DoNotOptimize(index.Apply(id, event));
    });
  }
  const auto started = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (std::thread& thread : threads) thread.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

void BM_IngestTwoStreams(benchmark::State& state) {
  const int chains = bench::Sized(1 << 15, 1 << 12);  // x 16 blocks = 524,288 a stream
  const uint64_t stream_blocks = static_cast<uint64_t>(chains) * 16;
  const std::vector<std::vector<BlockStored>> two = {
      MakeChains(chains, 16, 21, 1),
      MakeChains(chains, 16, 22, 1 + static_cast<int64_t>(chains) * 16 * 16)};
  const std::vector<std::vector<BlockStored>> one = {two[0]};
  double one_s = 0;
  double two_one_lock_s = 0;
  double two_sharded_s = 0;
  double two_apart_s = 0;
  for (auto _ : state) {
    one_s += SecondsToApply(1, one, stream_blocks);
    two_one_lock_s += SecondsToApply(1, two, stream_blocks);
    two_sharded_s += SecondsToApply(2, two, stream_blocks);
    two_apart_s += SecondsToApply(1, two, stream_blocks, /*separate_indexes=*/true);
  }
  const double iterations = static_cast<double>(state.iterations());
  const double one_rate = iterations * stream_blocks / one_s;
  const double one_lock_rate = iterations * 2 * stream_blocks / two_one_lock_s;
  const double sharded_rate = iterations * 2 * stream_blocks / two_sharded_s;
  state.counters["one_stream_blocks_per_s"] = one_rate;
  state.counters["two_streams_one_lock_blocks_per_s"] = one_lock_rate;
  const double apart_rate = iterations * 2 * stream_blocks / two_apart_s;
  state.counters["two_streams_two_shards_blocks_per_s"] = sharded_rate;
  state.counters["two_streams_two_indexes_blocks_per_s"] = apart_rate;
  state.counters["ratio_two_indexes_vs_one_stream"] = apart_rate / one_rate;
  state.counters["ratio_two_shards_vs_one_stream"] = sharded_rate / one_rate;
  state.counters["ratio_one_lock_vs_one_stream"] = one_lock_rate / one_rate;
}
BENCHMARK(BM_IngestTwoStreams)->Iterations(bench::Sized(5, 1))->Unit(benchmark::kMillisecond);

// Overlap lookup of a 64-block chain against 8 workers holding it.
void BM_Overlap(benchmark::State& state) {
  const int workers = static_cast<int>(state.range(0));
  ResidencyIndex index;
  std::vector<BlockStored> chain = MakeChains(1, 64, 7);
  for (int w = 0; w < workers; ++w) {
    std::string id = "w" + std::to_string(w);
    (void)index.AddWorker(id, "llama", kBlockSize);
    (void)index.Apply(id, chain[0]);
  }
  std::vector<BlockKey> keys =
      index.hasher().Chain({"llama", "", 0}, chain[0].token_ids, kBlockSize);
  for (auto _ : state) benchmark::DoNotOptimize(index.Overlap(keys));
}
BENCHMARK(BM_Overlap)->Arg(1)->Arg(8)->Arg(64);

// Chain key computation for a 4k-token prompt (what a route request costs).
void BM_ChainKeys(benchmark::State& state) {
  BlockKeyHasher hasher;
  std::vector<int64_t> tokens(4096);
  std::iota(tokens.begin(), tokens.end(), 1);
  for (auto _ : state) benchmark::DoNotOptimize(hasher.Chain({"llama", "", 0}, tokens, kBlockSize));
  state.SetItemsProcessed(state.iterations() * 4096);
}
BENCHMARK(BM_ChainKeys);

// A route's keys (RequestChain) for an 8k-token prompt: 512 chained XXH3
// calls over 152 bytes each, whose floor alone is about 17 ns a block here.
void BM_RequestChain(benchmark::State& state) {
  BlockKeyHasher hasher;
  std::vector<int64_t> tokens(8192);
  std::iota(tokens.begin(), tokens.end(), 1);
  for (auto _ : state) {
    benchmark::DoNotOptimize(RequestChain(hasher, {"llama", "", 0}, "", tokens, kBlockSize));
  }
  state.SetItemsProcessed(state.iterations() * 8192);
}
BENCHMARK(BM_RequestChain);

// Heap bytes per resident (block, worker) pair, measured with mallinfo2
// around `workers` workers each storing the same `blocks` blocks (the same
// prefixes, so every key has `workers` holders). With `declare_pool`, each
// worker is registered with a KV pool of `blocks` blocks, as an operator's
// `pool_blocks=` does, and the pool is full; without, the tables grow as
// the blocks come. With `shards` > 1 the workers alternate between shards,
// each of which keeps its own slot for every key (docs/adr/0027).
void MeasureBytesPerPair(benchmark::State& state, int workers, int blocks, bool declare_pool,
                         size_t shards, int tenants = 0) {
  const std::vector<BlockStored> events = MakeChains(blocks / 16, 16, 3, 1, tenants);
  for (auto _ : state) {
    const size_t before = HeapInUse();
    auto index = std::make_unique<ResidencyIndex>(BlockKeyHasher(), shards);
    for (int w = 0; w < workers; ++w) {
      std::string id = "w" + std::to_string(w);
      (void)index->AddWorker(id, "llama", kBlockSize,
                             declare_pool ? static_cast<uint64_t>(blocks) : 0);
      for (const BlockStored& event : events) (void)index->Apply(id, event);
    }
    const size_t after = HeapInUse();
    state.counters["bytes_per_pair"] =
        static_cast<double>(after - before) / static_cast<double>(index->ResidentPairs());
    state.counters["pairs"] = static_cast<double>(index->ResidentPairs());
  }
}

// 1,048,576 blocks on each of Arg workers (4,096 in the smoke).
// Arg 1: 1 = the pool declared. Arg 2: the index's shards. Arg 3: tenants
// salting the chains (0: unsalted), whose refs carry a lineage entry.
void BM_MemoryPerResidentPair(benchmark::State& state) {
  MeasureBytesPerPair(state, static_cast<int>(state.range(0)), bench::Sized(1 << 20, 1 << 12),
                      state.range(1) != 0, static_cast<size_t>(state.range(2)),
                      static_cast<int>(state.range(3)));
}
BENCHMARK(BM_MemoryPerResidentPair)
    ->Args({1, 0, 1, 0})
    ->Args({2, 0, 1, 0})
    ->Args({1, 1, 1, 0})
    ->Args({2, 1, 1, 0})
    ->Args({2, 1, 2, 0})
    ->Args({1, 1, 1, 64})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// 10,485,760 pairs: on one worker (Arg 1), or the same 1,310,720-block
// prefixes on each of 8 workers (Arg 8). About 2 GiB of events and 1-2 GiB
// of index at its peak, so run them on purpose:
//   kvgov_index_bench --benchmark_filter=MemoryTenMillion
// Arg 1: 1 = the pool declared. Arg 2: the index's shards.
void BM_MemoryTenMillionPairs(benchmark::State& state) {
  const int workers = static_cast<int>(state.range(0));
  MeasureBytesPerPair(state, workers, bench::Sized(10 << 20, 1 << 14) / workers,
                      state.range(1) != 0, static_cast<size_t>(state.range(2)));
}
BENCHMARK(BM_MemoryTenMillionPairs)
    ->Args({1, 0, 1})
    ->Args({8, 0, 1})
    ->Args({1, 1, 1})
    ->Args({8, 1, 1})
    ->Args({8, 1, 2})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// One worker holding 1,048,576 blocks in hbm (4,096 in the smoke), each
// named by one engine hash: the state a periodic checkpoint writes and a
// restart reads back.
const uint64_t kSnapshotBlocks = bench::Sized<uint64_t>(uint64_t{1} << 20, uint64_t{1} << 12);
const int kSnapshotChains = static_cast<int>(kSnapshotBlocks / 16);

std::unique_ptr<ResidencyIndex> OneWorkerIndex(const std::vector<BlockStored>& events) {
  auto index = std::make_unique<ResidencyIndex>();
  (void)index->AddWorker("w0", "llama", kBlockSize);
  for (const BlockStored& event : events) (void)index->Apply("w0", event);
  return index;
}

void BM_SnapshotWorker(benchmark::State& state) {
  const std::vector<BlockStored> events = MakeChains(kSnapshotChains, 16, 3);
  std::unique_ptr<ResidencyIndex> index = OneWorkerIndex(events);
  size_t bytes = 0;
  for (auto _ : state) {
    Result<std::string> snapshot = index->SnapshotWorker("w0");
    bytes = snapshot.ok() ? snapshot->size() : 0;
    benchmark::DoNotOptimize(snapshot);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["blocks"] = static_cast<double>(index->ResidentPairs());
  state.counters["bytes_per_block"] =
      static_cast<double>(bytes) / static_cast<double>(kSnapshotBlocks);
  state.counters["snapshot_MiB"] = static_cast<double>(bytes) / (1 << 20);
}
BENCHMARK(BM_SnapshotWorker)->Unit(benchmark::kMillisecond);

// Arg 0: into a registered, empty worker (a restart). Arg 1: over the same
// state already resident (every key leaves and re-enters the holder lists).
void BM_RestoreWorker(benchmark::State& state) {
  const bool over_existing = state.range(0) != 0;
  const std::vector<BlockStored> events = MakeChains(kSnapshotChains, 16, 3);
  std::string snapshot = OneWorkerIndex(events)->SnapshotWorker("w0").value();
  double heap_per_block = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::unique_ptr<ResidencyIndex> index;
    if (over_existing) {
      index = OneWorkerIndex(events);
    } else {
      index = std::make_unique<ResidencyIndex>();
      (void)index->AddWorker("w0", "llama", kBlockSize);
    }
    const size_t before = HeapInUse();
    state.ResumeTiming();
    Status status = index->RestoreWorker("w0", snapshot);
    state.PauseTiming();
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
    if (index->ResidentPairs() != kSnapshotBlocks) {
      state.SkipWithError("the restored worker does not hold the snapshot's blocks");
      break;
    }
    heap_per_block = (static_cast<double>(HeapInUse()) - static_cast<double>(before)) /
                     static_cast<double>(kSnapshotBlocks);
    index.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kSnapshotBlocks));
  state.counters["bytes_per_block"] =
      static_cast<double>(snapshot.size()) / static_cast<double>(kSnapshotBlocks);
  // Heap the restore left in use, per block: the restored tables (and, over
  // existing state, nothing: the old tables were freed).
  state.counters["heap_delta_per_block"] = heap_per_block;
}
BENCHMARK(BM_RestoreWorker)
    ->Arg(0)
    ->Arg(1)
    ->Iterations(bench::Sized(5, 1))
    ->Unit(benchmark::kMillisecond);

// Recovery at scale: 10,485,760 resident blocks on one worker (Arg 1), or
// 1,310,720 blocks on each of 8, none shared (Arg 8, registered with their pools
// declared, as an operator's pool-blocks= does), snapshotted and restored
// into a fresh index one worker after another (what a restart does before
// replaying the log). Peak RSS is the process's high-water mark, so run
// this one alone:
//   kvgov_index_bench --benchmark_filter=RecoverTenMillion
void BM_RecoverTenMillion(benchmark::State& state) {
  const int workers = static_cast<int>(state.range(0));
  // x 16 blocks x workers = 10,485,760 (16,384 in the smoke)
  const int chains = bench::Sized(10 << 16, 1 << 10) / workers;
  const bool declare_pool = workers > 1;
  const uint64_t pool = declare_pool ? static_cast<uint64_t>(chains) * 16 : 0;
  std::vector<std::string> snapshots;
  uint64_t blocks = 0;
  size_t snapshot_bytes = 0;
  {
    ResidencyIndex live;
    for (int w = 0; w < workers; ++w) {
      const std::string id = "w" + std::to_string(w);
      // Distinct tokens on each worker: no block is shared.
      const std::vector<BlockStored> events = MakeChains(
          chains, 16, 11 + static_cast<uint64_t>(w), int64_t{1} + int64_t{w} * chains * 16 * 16);
      (void)live.AddWorker(id, "llama", kBlockSize, pool);
      for (const BlockStored& event : events) (void)live.Apply(id, event);
      snapshots.push_back(live.SnapshotWorker(id).value());
      snapshot_bytes += snapshots.back().size();
    }
    blocks = live.ResidentPairs();
  }
  for (auto _ : state) {
    ResidencyIndex restored;
    Status status = Status::Ok();
    for (int w = 0; w < workers && status.ok(); ++w) {
      const std::string id = "w" + std::to_string(w);
      (void)restored.AddWorker(id, "llama", kBlockSize, pool);
      status = restored.RestoreWorker(id, snapshots[static_cast<size_t>(w)]);
    }
    if (!status.ok() || restored.ResidentPairs() != blocks) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
  }
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  state.counters["blocks"] = static_cast<double>(blocks);
  state.counters["snapshot_MiB"] = static_cast<double>(snapshot_bytes) / (1 << 20);
  state.counters["peak_rss_MiB"] = static_cast<double>(usage.ru_maxrss) / 1024;
}
BENCHMARK(BM_RecoverTenMillion)->Arg(1)->Arg(8)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvgov::index
