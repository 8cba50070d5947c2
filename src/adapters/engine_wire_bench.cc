// Decoding vLLM's event batches three ways on the same payloads, side by
// side in one run: msgpack-c's object unpack alone (the floor of any decoder
// built on it, and the yardstick), kvgov's object path (a limits walk,
// that unpack, then the schema over the objects), and DecodeEngineBatch,
// which takes these payloads in one pass (docs/adr/0025); and, fourth, that
// decode with every event applied to a residency index (issue 37's decode +
// apply, against the same unpack).
//
// The payloads are what vLLM >= 0.26 publishes: map-encoded events in a
// positional batch, each batch 4 BlockStored of 16 blocks of 16 tokens with
// their token ids (Llama 3's vocabulary: most ids take 3 or 5 bytes) and, in
// every other batch, a BlockRemoved of 16 hashes.
//   cmake --build build-bench --target kvgov_adapters_bench
//   build-bench/src/adapters/kvgov_adapters_bench

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "adapters/one_pass_decoder.h"
#include "testing/bench_smoke.h"
#include "kvgov/adapters/engine_wire.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/sim/event_wire.h"

namespace kvgov::adapters {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kBatches = 512;
constexpr int kStoredPerBatch = 4;
constexpr int kChainBlocks = 16;
constexpr int64_t kBlockSize = 16;
constexpr int64_t kVocab = 128256;

struct Payloads {
  std::vector<std::string> bytes;
  uint64_t blocks = 0;  // stored and removed, what an ingester applies
  uint64_t stored = 0;  // stored alone: the pool they fill
};

const Payloads& SharedPayloads() {
  static const Payloads payloads = [] {
    Payloads out;
    std::mt19937_64 random(19);
    std::uniform_int_distribution<int64_t> token(0, kVocab - 1);
    std::vector<EngineHash> previous;
    for (int step = 0; step < kBatches; ++step) {
      EngineEventBatch batch;
      batch.ts = 1.79e9 + step * 0.01;
      batch.dp_rank = 0;
      for (int i = 0; i < kStoredPerBatch; ++i) {
        BlockStored stored;
        stored.block_size = kBlockSize;
        stored.medium = "GPU";
        if (i % 2 == 1 && !previous.empty()) stored.parent_block_hash = previous.back();
        for (int b = 0; b < kChainBlocks; ++b) {
          stored.block_hashes.push_back(random());
          for (int64_t t = 0; t < kBlockSize; ++t) stored.token_ids.push_back(token(random));
        }
        previous = stored.block_hashes;
        out.blocks += kChainBlocks;
        out.stored += kChainBlocks;
        batch.events.emplace_back(std::move(stored));
      }
      if (step % 2 == 0) {
        BlockRemoved removed;
        removed.block_hashes = previous;
        removed.medium = "GPU";
        out.blocks += removed.block_hashes.size();
        batch.events.emplace_back(std::move(removed));
      }
      // Only extra keys can fail to encode, and these events have none.
      out.bytes.push_back(sim::EncodeEventBatch(batch, sim::WireEncoding::kMap).value());
    }
    return out;
  }();
  return payloads;
}

bool StringsReferencePayload(msgpack::type::object_type, size_t, void*) { return true; }

// Each iteration decodes every payload once each way; the ratios are of
// totals within one run. Manual time is the one pass's.
void BM_DecodeThreeWays(benchmark::State& state) {
  const Payloads& payloads = SharedPayloads();
  double unpack_s = 0;
  double objects_s = 0;
  double one_pass_s = 0;
  double apply_s = 0;
  for (auto _ : state) {
    const auto started = Clock::now();
    for (const std::string& payload : payloads.bytes) {
      size_t offset = 0;
      msgpack::object_handle handle = msgpack::unpack(payload.data(), payload.size(), offset,
                                                      &StringsReferencePayload, nullptr);
      benchmark::DoNotOptimize(handle.get().type);
    }
    const auto unpacked = Clock::now();
    for (const std::string& payload : payloads.bytes) {
      Result<EngineEventBatch> batch = internal::DecodeEngineBatchByObjects(payload, {});
      if (!batch.ok()) state.SkipWithError(batch.status().ToString().c_str());
      benchmark::DoNotOptimize(batch);
    }
    const auto by_objects = Clock::now();
    for (const std::string& payload : payloads.bytes) {
      Result<EngineEventBatch> batch = DecodeEngineBatch(payload);
      if (!batch.ok()) state.SkipWithError(batch.status().ToString().c_str());
      benchmark::DoNotOptimize(batch);
    }
    const auto one_pass = Clock::now();
    {
      // A fresh index each time (the hashes would be known the second
      // time), sized for the pool as `pool-blocks=` sizes a worker's.
      index::ResidencyIndex index;
      (void)index.AddWorker("w0", "llama", kBlockSize, payloads.stored);
      const auto applying = Clock::now();
      for (const std::string& payload : payloads.bytes) {
        Result<EngineEventBatch> batch = DecodeEngineBatch(payload);
        if (!batch.ok()) state.SkipWithError(batch.status().ToString().c_str());
        for (const EngineEvent& event : batch->events) {
          benchmark::DoNotOptimize(index.Apply("w0", event));
        }
      }
      apply_s += std::chrono::duration<double>(Clock::now() - applying).count();
    }
    unpack_s += std::chrono::duration<double>(unpacked - started).count();
    objects_s += std::chrono::duration<double>(by_objects - unpacked).count();
    one_pass_s += std::chrono::duration<double>(one_pass - by_objects).count();
    state.SetIterationTime(std::chrono::duration<double>(one_pass - by_objects).count());
  }
  const double blocks =
      static_cast<double>(payloads.blocks) * static_cast<double>(state.iterations());
  state.counters["unpack_blocks_per_s"] = blocks / unpack_s;
  state.counters["objects_blocks_per_s"] = blocks / objects_s;
  state.counters["one_pass_blocks_per_s"] = blocks / one_pass_s;
  state.counters["one_pass_vs_unpack"] = unpack_s / one_pass_s;
  state.counters["objects_vs_unpack"] = unpack_s / objects_s;
  state.counters["one_pass_vs_objects"] = objects_s / one_pass_s;
  state.counters["decode_apply_blocks_per_s"] = blocks / apply_s;
  state.counters["decode_apply_vs_unpack"] = unpack_s / apply_s;
}
BENCHMARK(BM_DecodeThreeWays)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(bench::Sized(2.0, 0.01));

}  // namespace
}  // namespace kvgov::adapters
