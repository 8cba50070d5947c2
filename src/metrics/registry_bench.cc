#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "kvgov/metrics/registry.h"

namespace kvgov::metrics {
namespace {

// The hot path: a handle cached at start-up, bumped per event.
void BM_CounterIncCached(benchmark::State& state) {
  Registry registry;
  auto family = *registry.AddCounter(
      {.name = "bench_events_total", .help = "Events.", .label_names = {"worker", "tier"}});
  auto child = family->WithLabels({"w1", "hbm"});
  for (auto _ : state) child->Inc();
  benchmark::DoNotOptimize(child->integer_part());
}
BENCHMARK(BM_CounterIncCached)->Threads(1)->Threads(4);

void BM_GaugeAddCached(benchmark::State& state) {
  Registry registry;
  auto family =
      *registry.AddGauge({.name = "bench_inflight", .help = "In flight.", .label_names = {"w"}});
  auto child = family->WithLabels({"w1"});
  for (auto _ : state) child->Add(1.0);
  benchmark::DoNotOptimize(child->Value());
}
BENCHMARK(BM_GaugeAddCached);

void BM_HistogramObserveCached(benchmark::State& state) {
  Registry registry;
  auto family = *registry.AddHistogram(
      {.name = "bench_latency_seconds", .help = "Latency.", .label_names = {"op"}},
      ExponentialBuckets(1e-6, 2, 24));
  auto child = family->WithLabels({"get"});
  double v = 1e-6;
  for (auto _ : state) {
    child->Observe(v);
    v = v < 10 ? v * 1.7 : 1e-6;
  }
  benchmark::DoNotOptimize(child->Count());
}
BENCHMARK(BM_HistogramObserveCached);

// The uncached path: mutex plus map lookup of an existing child among
// state.range(0) children.
void BM_WithLabelsLookup(benchmark::State& state) {
  Registry registry;
  auto family = *registry.AddCounter(
      {.name = "bench_events_total", .help = "Events.", .label_names = {"worker", "tier"}});
  auto n = static_cast<int>(state.range(0));
  for (int i = 0; i < n; ++i) family->WithLabels({"worker-" + std::to_string(i), "hbm"});
  std::string worker = "worker-" + std::to_string(n / 2);
  for (auto _ : state) benchmark::DoNotOptimize(family->WithLabels({worker, "hbm"}));
}
BENCHMARK(BM_WithLabelsLookup)->Arg(10)->Arg(1000)->Arg(10000);

// One scrape of a registry holding state.range(0) children per family kind.
void BM_Render(benchmark::State& state) {
  Registry registry;
  auto counters = *registry.AddCounter(
      {.name = "bench_events_total", .help = "Events.", .label_names = {"worker", "tier"}});
  auto n = static_cast<int>(state.range(0));
  for (int i = 0; i < n; ++i) {
    counters->WithLabels({"worker-" + std::to_string(i), "hbm"})->Add(static_cast<unsigned>(i));
  }
  std::size_t bytes = 0;
  for (auto _ : state) {
    std::string text = registry.Render();
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.counters["bytes"] = static_cast<double>(bytes);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_Render)->Arg(1000);

void BM_RenderHistograms(benchmark::State& state) {
  Registry registry;
  auto family = *registry.AddHistogram(
      {.name = "bench_latency_seconds", .help = "Latency.", .label_names = {"worker"}},
      ExponentialBuckets(1e-4, 10, 6));
  auto n = static_cast<int>(state.range(0));
  for (int i = 0; i < n; ++i) family->WithLabels({"worker-" + std::to_string(i)})->Observe(0.01);
  for (auto _ : state) benchmark::DoNotOptimize(registry.Render());
}
BENCHMARK(BM_RenderHistograms)->Arg(1000);

}  // namespace
}  // namespace kvgov::metrics
