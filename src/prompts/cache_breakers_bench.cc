// What cache-breaker detection costs per request, beside what every routed
// request already pays: hashing the prompt's block keys (the router's
// floor). A 4,000-token prompt, 16-token granules and blocks:
//   - breaker: the family's prompts differ at token 40 (a timestamp), the
//     case the detector exists for;
//   - clean: same system prompt, a different question at the end;
//   - unrelated: every prompt starts a family, so each also pays the
//     search at every offset (the detector's worst case);
//   - block keys: index::RequestChain over the same prompt.
//   cmake --build build-bench --target kvgov_prompts_bench
//   build-bench/src/prompts/kvgov_prompts_bench

#include <benchmark/benchmark.h>

#include <numeric>
#include <vector>

#include "kvgov/index/block_key.h"
#include "kvgov/prompts/cache_breakers.h"

namespace kvgov::prompts {
namespace {

constexpr size_t kPromptTokens = 4000;

std::vector<int64_t> Prompt(int64_t first) {
  std::vector<int64_t> tokens(kPromptTokens);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

DetectorOptions Options() {
  DetectorOptions options;
  options.key = 0x5eed;
  return options;
}

void BM_ObserveBreaker(benchmark::State& state) {
  CacheBreakerDetector detector(Options());
  std::vector<int64_t> tokens = Prompt(1000);
  int64_t now = 0;
  for (auto _ : state) {
    tokens[40] = ++now;  // a timestamp
    benchmark::DoNotOptimize(detector.Observe("llama", "acme", tokens, now));
  }
  state.counters["findings"] = static_cast<double>(detector.Findings().size());
}
BENCHMARK(BM_ObserveBreaker);

void BM_ObserveClean(benchmark::State& state) {
  CacheBreakerDetector detector(Options());
  std::vector<int64_t> tokens = Prompt(1000);
  int64_t now = 0;
  for (auto _ : state) {
    ++now;
    for (size_t i = kPromptTokens - 64; i < kPromptTokens; ++i) tokens[i] = now * 100 + i;
    benchmark::DoNotOptimize(detector.Observe("llama", "acme", tokens, now));
  }
  state.counters["findings"] = static_cast<double>(detector.Findings().size());
}
BENCHMARK(BM_ObserveClean);

void BM_ObserveUnrelated(benchmark::State& state) {
  CacheBreakerDetector detector(Options());
  int64_t now = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const std::vector<int64_t> tokens = Prompt(++now * 10000000);
    state.ResumeTiming();
    benchmark::DoNotOptimize(detector.Observe("llama", "acme", tokens, now));
  }
  state.counters["families"] = static_cast<double>(detector.families());
}
BENCHMARK(BM_ObserveUnrelated);

void BM_BlockKeys(benchmark::State& state) {
  const index::BlockKeyHasher hasher;
  const std::vector<int64_t> tokens = Prompt(1000);
  for (auto _ : state) {
    benchmark::DoNotOptimize(index::RequestChain(hasher, {"llama", "", 0}, "salt", tokens, 16));
  }
}
BENCHMARK(BM_BlockKeys);

}  // namespace
}  // namespace kvgov::prompts
