#pragma once

// Benchmark support, never linked into kvgov: the fleet the route
// benchmarks run against, the same in process (src/router/router_bench.cc) and
// over HTTP (src/server/route_http_bench.cc).
//
// 64 workers of one model, block size 16, each holding 16,384 blocks:
// 1,048,576 resident blocks in total. The prompt to route is 8,192 tokens
// (512 blocks). Shape, chosen to look like a chat fleet's prefix cache:
//  - 16 system prompts of 64 blocks. The prompt opens with system prompt 0,
//    which 48 workers hold, so 48 workers share the prompt's first block;
//    every worker also holds 3 of the other 15.
//  - Workers w00..w07 also hold the prompt beyond its system prompt, to
//    112, 160, ..., 448 of its 512 blocks: partial overlaps of every depth.
//  - The rest of each worker is 64-block conversations, three in four of
//    them under one of its system prompts, the others standalone.
// Engine hashes are random per worker (vLLM without PYTHONHASHSEED); kvgov
// keys blocks by tokens, so the same prefix gets one key on every worker.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvgov/core/engine_events.h"

namespace kvgov::bench {

struct RouteFleet {
  static constexpr int kWorkers = 64;
  static constexpr int64_t kBlockSize = 16;
  static constexpr uint64_t kBlocksPerWorker = 16384;  // x 64 = 1,048,576
  static constexpr int kPromptBlocks = 512;            // 8,192 tokens
  static constexpr int kSystemPrompts = 16;
  static constexpr int kSystemBlocks = 64;
  static constexpr int kPromptSystemHolders = 48;  // workers holding system prompt 0
  static constexpr int kDeepHolders = 8;           // of those, holding more of the prompt
  static constexpr int kDeepStep = 48;             // blocks each deep holder adds over the last
  static constexpr int kOtherSystemPrompts = 3;    // further system prompts per worker
  static constexpr int kConversationBlocks = 64;
  static constexpr int64_t kVocab = 128256;  // Llama 3's
  // The best-placed worker (w07) holds this many of the prompt's blocks.
  static constexpr int kBestOverlap = kSystemBlocks + kDeepHolders * kDeepStep;  // 448
  static_assert(kBestOverlap < kPromptBlocks);

  static std::string WorkerId(int worker) {
    return std::string(worker < 10 ? "w0" : "w") + std::to_string(worker);
  }

  static std::vector<int64_t> RandomTokens(uint64_t seed, size_t count) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> token(0, kVocab - 1);
    std::vector<int64_t> tokens(count);
    for (int64_t& t : tokens) t = token(rng);
    return tokens;
  }

  static std::vector<int64_t> SystemPrompt(int prompt) {
    return RandomTokens(1000 + static_cast<uint64_t>(prompt), kSystemBlocks * kBlockSize);
  }

  /// The 8,192 tokens to route: system prompt 0, then the conversation.
  static std::vector<int64_t> Prompt() {
    std::vector<int64_t> tokens = SystemPrompt(0);
    const std::vector<int64_t> rest =
        RandomTokens(7, static_cast<size_t>(kPromptBlocks - kSystemBlocks) * kBlockSize);
    tokens.insert(tokens.end(), rest.begin(), rest.end());
    return tokens;
  }

  /// Every BlockStored `worker` published, in order; parents always come
  /// before their children.
  static std::vector<BlockStored> WorkerEvents(int worker) {
    std::mt19937_64 rng(0x5eed0000 + static_cast<uint64_t>(worker));
    std::vector<BlockStored> events;
    uint64_t stored_blocks = 0;
    // Returns the engine hash of the chain's last block.
    auto store = [&](std::span<const int64_t> tokens, std::optional<EngineHash> parent) {
      BlockStored stored;
      stored.block_size = kBlockSize;
      stored.medium = "GPU";
      stored.parent_block_hash = parent;
      stored.token_ids.assign(tokens.begin(), tokens.end());
      const size_t blocks = tokens.size() / kBlockSize;
      for (size_t b = 0; b < blocks; ++b) stored.block_hashes.push_back(rng());
      stored_blocks += blocks;
      events.push_back(std::move(stored));
      return events.back().block_hashes.back();
    };

    std::vector<EngineHash> system_tails;  // last block of each system prompt held here
    if (worker < kPromptSystemHolders) {
      const EngineHash tail = store(SystemPrompt(0), std::nullopt);
      system_tails.push_back(tail);
      if (worker < kDeepHolders) {
        const std::vector<int64_t> prompt = Prompt();
        const auto begin = prompt.begin() + kSystemBlocks * kBlockSize;
        store(std::span<const int64_t>(begin, begin + (worker + 1) * kDeepStep * kBlockSize), tail);
      }
    }
    std::vector<int> others(kSystemPrompts - 1);
    std::iota(others.begin(), others.end(), 1);
    std::shuffle(others.begin(), others.end(), rng);
    for (int i = 0; i < kOtherSystemPrompts; ++i) {
      system_tails.push_back(store(SystemPrompt(others[i]), std::nullopt));
    }
    while (stored_blocks < kBlocksPerWorker) {
      const uint64_t blocks =
          std::min<uint64_t>(kConversationBlocks, kBlocksPerWorker - stored_blocks);
      const std::vector<int64_t> tokens =
          RandomTokens(rng(), static_cast<size_t>(blocks * kBlockSize));
      std::optional<EngineHash> parent;
      if (rng() % 4 != 0) parent = system_tails[rng() % system_tails.size()];
      store(tokens, parent);
    }
    return events;
  }
};

}  // namespace kvgov::bench
