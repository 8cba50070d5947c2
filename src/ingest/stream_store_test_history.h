#pragma once

// Test support for stream_store_test.cc and its crash child: one engine's
// deterministic history of vLLM batches.

#include <cstdint>
#include <optional>
#include <string>

#include "ingest/vllm_batch_builder.h"

namespace kvgov::ingest::stream_store_test {

constexpr int64_t kBlockSize = 4;
constexpr uint64_t kClearEvery = 97;  // batch 96, 193, ... ends with AllBlocksCleared
constexpr uint64_t kRemoveLag = 10;   // even batches evict the chain stored this many before

// Engine batch `seq` of one deterministic history: each batch stores a
// three-block chain (most continuing the previous batch's), even batches
// evict an older chain, and every kClearEvery-th batch clears the pool.
inline std::string Batch(uint64_t seq) {
  VllmBatchBuilder<kBlockSize> batch(1.0 + static_cast<double>(seq));
  const bool after_clear = seq > 0 && (seq - 1) % kClearEvery == kClearEvery - 1;
  std::optional<uint64_t> parent;
  if (seq % 3 != 0 && !after_clear) parent = (seq - 1) * 8 + 3;
  batch.Stored({seq * 8 + 1, seq * 8 + 2, seq * 8 + 3}, parent, static_cast<int64_t>(seq) * 100);
  // Only chains stored since the last clear are still there to evict.
  if (seq >= kRemoveLag && seq % 2 == 0 && seq % kClearEvery >= kRemoveLag) {
    const uint64_t old = seq - kRemoveLag;
    batch.Removed({old * 8 + 1, old * 8 + 2, old * 8 + 3});
  }
  if (seq % kClearEvery == kClearEvery - 1) batch.Cleared();
  return batch.Bytes();
}

}  // namespace kvgov::ingest::stream_store_test
