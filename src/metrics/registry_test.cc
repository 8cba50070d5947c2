#include "kvgov/metrics/registry.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "metrics/exposition.h"

namespace kvgov::metrics {
namespace {

using internal::FormatDouble;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The text of one family in a rendering: its HELP line up to the next HELP.
std::string Section(const std::string& text, const std::string& family) {
  std::size_t begin = text.find("# HELP " + family + " ");
  if (begin == std::string::npos) return "<no family " + family + ">";
  std::size_t end = text.find("# HELP ", begin + 1);
  return text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

// Registers or fails the test; keeps the tests about behaviour, not plumbing.
template <typename T>
T* Must(Result<T*> result) {
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  return result.ok() ? *result : nullptr;
}

FamilyOptions Opts(std::string name, std::vector<std::string> labels = {},
                   std::size_t max_children = kDefaultMaxChildren) {
  return {.name = std::move(name),
          .help = "Help.",
          .label_names = std::move(labels),
          .max_children = max_children};
}

// ---- exposition helpers ----------------------------------------------------

TEST(ExpositionTest, DoublesUseShortestRoundTripSpelling) {
  EXPECT_EQ(FormatDouble(0), "0");
  EXPECT_EQ(FormatDouble(3), "3");
  EXPECT_EQ(FormatDouble(-42), "-42");
  EXPECT_EQ(FormatDouble(0.1), "0.1");
  EXPECT_EQ(FormatDouble(-3.25), "-3.25");
  EXPECT_EQ(FormatDouble(-0.0), "-0");
  // Go's layout: plain notation for decimal exponents in [-4, 21).
  EXPECT_EQ(FormatDouble(0.0001), "0.0001");
  EXPECT_EQ(FormatDouble(0.00012), "0.00012");
  EXPECT_EQ(FormatDouble(1e-5), "1e-05");
  EXPECT_EQ(FormatDouble(-1.5e-7), "-1.5e-07");
  EXPECT_EQ(FormatDouble(123.456), "123.456");
  EXPECT_EQ(FormatDouble(9007199254740992.0), "9007199254740992");
  EXPECT_EQ(FormatDouble(123456789012345678.0), "123456789012345680");
  EXPECT_EQ(FormatDouble(1e20), "100000000000000000000");
  EXPECT_EQ(FormatDouble(1e21), "1e+21");
  EXPECT_EQ(FormatDouble(-2.5e300), "-2.5e+300");
  EXPECT_EQ(FormatDouble(kInf), "+Inf");
  EXPECT_EQ(FormatDouble(-kInf), "-Inf");
  EXPECT_EQ(FormatDouble(kNaN), "NaN");
}

TEST(ExpositionTest, DoublesRoundTrip) {
  std::mt19937_64 rng(20240607);
  std::vector<double> values = {0.1 + 0.2,
                                1.0 / 3,
                                std::numeric_limits<double>::min(),
                                std::numeric_limits<double>::max(),
                                std::numeric_limits<double>::denorm_min(),
                                4.35,
                                1e300};
  for (int i = 0; i < 10000; ++i) {
    std::uint64_t bits = rng();
    double v;
    std::memcpy(&v, &bits, sizeof(v));
    if (std::isfinite(v)) values.push_back(v);
  }
  for (double v : values) {
    std::string text = FormatDouble(v);
    double back = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), back);
    ASSERT_EQ(ec, std::errc()) << text;
    ASSERT_EQ(ptr, text.data() + text.size()) << text;
    ASSERT_EQ(back, v) << text;
  }
}

TEST(ExpositionTest, EscapesHelpAndLabelValues) {
  std::string help;
  internal::AppendEscapedHelp(help, "a\\b\nc\"d");
  EXPECT_EQ(help, "a\\\\b\\nc\"d");  // quotes stay as they are in HELP
  std::string value;
  internal::AppendEscapedLabelValue(value, "a\\b\nc\"d");
  EXPECT_EQ(value, "a\\\\b\\nc\\\"d");
}

// kvgov_core's IsValidUtf8 is tested there; here what the exposition
// makes of what fails it.
TEST(ExpositionTest, InvalidUtf8IsSanitized) {
  EXPECT_FALSE(internal::IsValidUtf8("\xED\xA0\x80"));  // surrogate
  EXPECT_EQ(internal::SanitizeUtf8("a\xFF"
                                   "b\xE2\x82"),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(ExpositionTest, NameRules) {
  EXPECT_TRUE(internal::IsValidMetricName("kvgov_blocks"));
  EXPECT_TRUE(internal::IsValidMetricName("_x9"));
  EXPECT_FALSE(internal::IsValidMetricName(""));
  EXPECT_FALSE(internal::IsValidMetricName("9x"));
  EXPECT_FALSE(internal::IsValidMetricName("a-b"));
  EXPECT_FALSE(internal::IsValidMetricName("a:b"));
  EXPECT_TRUE(internal::IsValidLabelName("worker"));
  EXPECT_TRUE(internal::IsValidLabelName("_w"));
  EXPECT_FALSE(internal::IsValidLabelName("__name__"));
  EXPECT_FALSE(internal::IsValidLabelName("a b"));
  EXPECT_FALSE(internal::IsValidLabelName("a:b"));
}

// ---- golden exposition -----------------------------------------------------

TEST(RegistryTest, GoldenExposition) {
  Registry registry;
  CounterFamily* requests =
      Must(registry.AddCounter({.name = "app_requests_total",
                                .help = "Requests served.\nSecond line with a \\ backslash.",
                                .label_names = {"worker", "tier"}}));
  GaugeFamily* temperature = Must(registry.AddGauge(
      {.name = "app_temperature_celsius", .help = "Temperature.", .label_names = {}}));
  HistogramFamily* latency = Must(registry.AddHistogram(
      {.name = "app_latency_seconds", .help = "Latency.", .label_names = {"op"}}, {0.25, 1, 4}));
  Must(registry.AddGauge({.name = "app_queue_depth", .help = "Empty.", .label_names = {"queue"}}));

  requests->WithLabels({"w1", "hbm"})->Add(3);
  requests->WithLabels({"w\"2\\", "line\nbreak"})->Add(2.5);
  temperature->WithLabels({})->Set(-3.25);
  auto get = latency->WithLabels({"get"});
  for (double v : {0.25, 0.5, 2.0, 8.0}) get->Observe(v);

  EXPECT_EQ(registry.Render(),
            "# HELP app_latency_seconds Latency.\n"
            "# TYPE app_latency_seconds histogram\n"
            "app_latency_seconds_bucket{op=\"get\",le=\"0.25\"} 1\n"
            "app_latency_seconds_bucket{op=\"get\",le=\"1\"} 2\n"
            "app_latency_seconds_bucket{op=\"get\",le=\"4\"} 3\n"
            "app_latency_seconds_bucket{op=\"get\",le=\"+Inf\"} 4\n"
            "app_latency_seconds_sum{op=\"get\"} 10.75\n"
            "app_latency_seconds_count{op=\"get\"} 4\n"
            "# HELP app_queue_depth Empty.\n"
            "# TYPE app_queue_depth gauge\n"
            "# HELP app_requests_total Requests served.\\nSecond line with a \\\\ backslash.\n"
            "# TYPE app_requests_total counter\n"
            "app_requests_total{worker=\"w\\\"2\\\\\",tier=\"line\\nbreak\"} 2.5\n"
            "app_requests_total{worker=\"w1\",tier=\"hbm\"} 3\n"
            "# HELP app_temperature_celsius Temperature.\n"
            "# TYPE app_temperature_celsius gauge\n"
            "app_temperature_celsius -3.25\n"
            "# HELP kvgov_metrics_collector_errors_total Metric collector callbacks that threw "
            "during a scrape.\n"
            "# TYPE kvgov_metrics_collector_errors_total counter\n"
            "kvgov_metrics_collector_errors_total 0\n"
            "# HELP kvgov_metrics_label_errors_total Metric operations dropped because they gave "
            "the wrong number of label values.\n"
            "# TYPE kvgov_metrics_label_errors_total counter\n"
            "# HELP kvgov_metrics_overflow_total Operations on metric children past a family's "
            "cardinality cap, folded into its __overflow__ child.\n"
            "# TYPE kvgov_metrics_overflow_total counter\n");
}

TEST(RegistryTest, LabelFreeFamiliesRenderZeroBeforeFirstUse) {
  Registry registry;
  Must(registry.AddCounter(Opts("a_total")));
  Must(registry.AddGauge(Opts("b")));
  Must(registry.AddHistogram(Opts("c_seconds"), {1}));
  std::string text = registry.Render();
  EXPECT_EQ(Section(text, "a_total"), "# HELP a_total Help.\n# TYPE a_total counter\na_total 0\n");
  EXPECT_EQ(Section(text, "b"), "# HELP b Help.\n# TYPE b gauge\nb 0\n");
  EXPECT_EQ(Section(text, "c_seconds"),
            "# HELP c_seconds Help.\n# TYPE c_seconds histogram\n"
            "c_seconds_bucket{le=\"1\"} 0\nc_seconds_bucket{le=\"+Inf\"} 0\n"
            "c_seconds_sum 0\nc_seconds_count 0\n");
}

TEST(RegistryTest, SamplesSortByLabelValues) {
  Registry registry;
  GaugeFamily* g = Must(registry.AddGauge(Opts("g", {"a", "b"})));
  g->WithLabels({"y", "1"})->Set(1);
  g->WithLabels({"x", "2"})->Set(2);
  g->WithLabels({"x", "10"})->Set(3);
  EXPECT_EQ(Section(registry.Render(), "g"),
            "# HELP g Help.\n# TYPE g gauge\n"
            "g{a=\"x\",b=\"10\"} 3\ng{a=\"x\",b=\"2\"} 2\ng{a=\"y\",b=\"1\"} 1\n");
}

// ---- children --------------------------------------------------------------

TEST(CounterTest, IntegersStayExactAndFractionsAdd) {
  Registry registry;
  CounterFamily* c = Must(registry.AddCounter(Opts("c_total")));
  auto child = c->WithLabels({});
  child->Add(std::uint64_t{1} << 60);
  child->Inc();
  EXPECT_EQ(Section(registry.Render(), "c_total"),
            "# HELP c_total Help.\n# TYPE c_total counter\nc_total 1152921504606846977\n");
  child->Add(0.5);
  EXPECT_EQ(child->Value(), static_cast<double>((std::uint64_t{1} << 60) + 1) + 0.5);
}

TEST(CounterTest, IgnoresDecreasesAndNonFiniteIncrements) {
  Counter c;
  c.Add(-1);
  c.Add(-0.5);
  c.Add(kNaN);
  c.Add(kInf);
  c.Add(2);
  c.Add(0.25);
  EXPECT_EQ(c.Value(), 2.25);
}

TEST(GaugeTest, SetAddIncDecWithIntegersAndDoubles) {
  Gauge g;
  g.Set(10);
  g.Add(std::int64_t{-3});
  g.Add(0.5);
  g.Inc();
  g.Dec();
  g.Dec();
  EXPECT_EQ(g.Value(), 6.5);
  g.Set(kNaN);
  EXPECT_TRUE(std::isnan(g.Value()));
}

TEST(HistogramTest, BucketsAreInclusiveAndNaNGoesToInf) {
  auto bounds = std::make_shared<const std::vector<double>>(std::vector<double>{1, 2});
  Histogram h(bounds);
  h.Observe(1);    // le=1
  h.Observe(1.5);  // le=2
  h.Observe(2);    // le=2
  h.Observe(-5);   // le=1
  h.Observe(3);    // +Inf
  h.Observe(kNaN);
  EXPECT_EQ(h.BucketCount(0), 2u);
  EXPECT_EQ(h.BucketCount(1), 2u);
  EXPECT_EQ(h.BucketCount(2), 2u);
  EXPECT_EQ(h.Count(), 6u);
  EXPECT_TRUE(std::isnan(h.Sum()));
}

TEST(HistogramTest, BucketHelpers) {
  EXPECT_EQ(LinearBuckets(1, 2, 3), (std::vector<double>{1, 3, 5}));
  EXPECT_EQ(ExponentialBuckets(1, 4, 3), (std::vector<double>{1, 4, 16}));
  EXPECT_TRUE(LinearBuckets(1, 0, 3).empty());
  EXPECT_TRUE(ExponentialBuckets(0, 2, 3).empty());
  EXPECT_TRUE(ExponentialBuckets(1, 1, 3).empty());
}

TEST(HistogramTest, TrailingInfBoundIsImplied) {
  Registry registry;
  HistogramFamily* h = Must(registry.AddHistogram(Opts("h"), {1, kInf}));
  h->WithLabels({})->Observe(5);
  EXPECT_EQ(Section(registry.Render(), "h"),
            "# HELP h Help.\n# TYPE h histogram\n"
            "h_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 1\nh_sum 5\nh_count 1\n");
}

// ---- validation ------------------------------------------------------------

TEST(RegistryValidationTest, RejectsBadFamilies) {
  struct Case {
    const char* why;
    std::string type;
    FamilyOptions options;
    std::vector<double> bounds = {};
  };
  std::vector<Case> cases = {
      {"empty name", "counter", Opts("")},
      {"leading digit", "gauge", Opts("1x")},
      {"dash", "gauge", Opts("a-b")},
      {"colon", "gauge", Opts("a:b")},
      {"counter without _total", "counter", Opts("requests")},
      {"gauge with _total", "gauge", Opts("a_total")},
      {"gauge with _sum", "gauge", Opts("a_sum")},
      {"gauge with _count", "gauge", Opts("a_count")},
      {"callback gauge with _bucket", "callback", Opts("a_bucket")},
      {"histogram with _count", "histogram", Opts("a_count")},
      {"reserved label", "gauge", Opts("g", {"__x"})},
      {"bad label", "gauge", Opts("g", {"a-b"})},
      {"empty label", "gauge", Opts("g", {""})},
      {"repeated label", "gauge", Opts("g", {"a", "a"})},
      {"le on histogram", "histogram", Opts("h", {"le"})},
      {"zero max_children", "gauge", Opts("g", {"a"}, 0)},
      {"empty help", "gauge", {.name = "g", .help = ""}},
      {"help not UTF-8", "gauge", {.name = "g", .help = "bad \xFF"}},
      {"decreasing bounds", "histogram", Opts("h"), {2, 1}},
      {"repeated bound", "histogram", Opts("h"), {1, 1}},
      {"NaN bound", "histogram", Opts("h"), {kNaN}},
      {"-Inf bound", "histogram", Opts("h"), {-kInf, 1}},
      {"inner +Inf bound", "histogram", Opts("h"), {1, kInf, kInf}},
  };
  for (Case& c : cases) {
    Registry registry;
    Status status;
    if (c.type == "counter") {
      status = registry.AddCounter(c.options).status();
    } else if (c.type == "gauge") {
      status = registry.AddGauge(c.options).status();
    } else if (c.type == "callback") {
      status = registry.AddCallbackGauge(c.options).status();
    } else {
      status = registry.AddHistogram(c.options, c.bounds).status();
    }
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << c.why << ": " << status.ToString();
  }
}

TEST(RegistryValidationTest, LeIsAnOrdinaryLabelOutsideHistograms) {
  Registry registry;
  EXPECT_TRUE(registry.AddGauge(Opts("g", {"le"})).ok());
}

TEST(RegistryValidationTest, RejectsDuplicateNamesAcrossTypes) {
  Registry registry;
  ASSERT_TRUE(registry.AddGauge(Opts("blocks")).ok());
  EXPECT_EQ(registry.AddGauge(Opts("blocks")).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddHistogram(Opts("blocks"), {1}).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddCallbackGauge(Opts("blocks")).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddCounter(Opts("kvgov_metrics_overflow_total")).status().code(),
            StatusCode::kAlreadyExists);
}

// Decision: a wrong number of label values is a programming error that must
// not crash the daemon or turn every call site into error handling; it gets
// a never-rendered discard child and is counted per family.
TEST(RegistryValidationTest, WrongLabelCountGetsDiscardChildAndIsCounted) {
  Registry registry;
  CounterFamily* c = Must(registry.AddCounter(Opts("c_total", {"a", "b"})));
  auto discard = c->WithLabels({"only_one"});
  ASSERT_NE(discard, nullptr);
  EXPECT_EQ(c->WithLabels({"x", "y", "z"}), discard);  // one shared discard child
  discard->Inc();
  discard->Add(5);
  discard->Add(0.5);
  EXPECT_EQ(c->child_count(), 0u);
  std::string text = registry.Render();
  EXPECT_EQ(Section(text, "c_total"), "# HELP c_total Help.\n# TYPE c_total counter\n");
  EXPECT_NE(Section(text, "kvgov_metrics_label_errors_total")
                .find("kvgov_metrics_label_errors_total{family=\"c_total\"} 3\n"),
            std::string::npos)
      << text;
}

TEST(RegistryValidationTest, RemoveReportsWrongCountAndUnknownChild) {
  Registry registry;
  GaugeFamily* g = Must(registry.AddGauge(Opts("g", {"worker"})));
  g->WithLabels({"w1"})->Set(1);
  EXPECT_EQ(g->Remove({"w1", "extra"}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g->Remove({"w2"}).code(), StatusCode::kNotFound);
  EXPECT_TRUE(g->Remove({"w1"}).ok());
  EXPECT_EQ(g->Remove({"w1"}).code(), StatusCode::kNotFound);
}

// ---- children lifecycle ----------------------------------------------------

TEST(FamilyTest, WithLabelsReturnsTheSameChildForTheSameValues) {
  Registry registry;
  CounterFamily* c = Must(registry.AddCounter(Opts("c_total", {"worker", "tier"})));
  std::vector<std::string> owned = {"w1", "hbm"};
  std::vector<std::string_view> views = {"w1", "hbm"};
  auto a = c->WithLabels({"w1", "hbm"});
  EXPECT_EQ(c->WithLabels(owned), a);
  EXPECT_EQ(c->WithLabels(views), a);
  EXPECT_NE(c->WithLabels({"w1", "dram"}), a);
  EXPECT_EQ(c->child_count(), 2u);
}

TEST(FamilyTest, RemovedChildIsNotRenderedButCachedHandleStaysSafe) {
  Registry registry;
  CounterFamily* c = Must(registry.AddCounter(Opts("c_total", {"worker"})));
  auto cached = c->WithLabels({"w1"});
  cached->Add(7);
  ASSERT_TRUE(c->Remove({"w1"}).ok());
  cached->Inc();  // a hot path that has not noticed yet: harmless
  EXPECT_EQ(cached->Value(), 8);
  EXPECT_EQ(Section(registry.Render(), "c_total"),
            "# HELP c_total Help.\n# TYPE c_total counter\n");
  auto fresh = c->WithLabels({"w1"});
  EXPECT_NE(fresh, cached);
  EXPECT_EQ(fresh->Value(), 0);
}

TEST(FamilyTest, HandlesOutliveTheRegistry) {
  std::shared_ptr<Counter> handle;
  {
    Registry registry;
    handle = Must(registry.AddCounter(Opts("c_total", {"a"})))->WithLabels({"x"});
  }
  handle->Inc();
  EXPECT_EQ(handle->Value(), 1);
}

TEST(FamilyTest, InvalidUtf8LabelValuesAreReplaced) {
  Registry registry;
  GaugeFamily* g = Must(registry.AddGauge(Opts("g", {"worker"})));
  auto a = g->WithLabels({"w\xFF"});
  EXPECT_EQ(g->WithLabels({"w\xFE"}), a);  // both spell w<U+FFFD>
  a->Set(1);
  EXPECT_EQ(Section(registry.Render(), "g"),
            "# HELP g Help.\n# TYPE g gauge\ng{worker=\"w\xEF\xBF\xBD\"} 1\n");
  EXPECT_TRUE(g->Remove({"w\xFD"}).ok());
}

// ---- cardinality guard -----------------------------------------------------

TEST(OverflowTest, NewLabelSetsPastTheCapFoldIntoOneChild) {
  Registry registry;
  CounterFamily* c = Must(registry.AddCounter(Opts("c_total", {"worker", "tier"}, 2)));
  auto w1 = c->WithLabels({"w1", "hbm"});
  auto w2 = c->WithLabels({"w2", "hbm"});
  auto w3 = c->WithLabels({"w3", "hbm"});
  auto w4 = c->WithLabels({"w4", "dram"});
  EXPECT_NE(w1, w2);
  EXPECT_EQ(w3, w4);
  EXPECT_EQ(c->WithLabels({"__overflow__", "__overflow__"}), w3);
  EXPECT_EQ(c->WithLabels({"w1", "hbm"}), w1);  // existing children still resolve
  w1->Inc();
  w3->Add(10);  // one folded operation
  w4->Inc();    // another
  w4->Add(0.5);
  std::string text = registry.Render();
  EXPECT_EQ(Section(text, "c_total"),
            "# HELP c_total Help.\n# TYPE c_total counter\n"
            "c_total{worker=\"__overflow__\",tier=\"__overflow__\"} 11.5\n"
            "c_total{worker=\"w1\",tier=\"hbm\"} 1\n"
            "c_total{worker=\"w2\",tier=\"hbm\"} 0\n");
  EXPECT_EQ(Section(text, "kvgov_metrics_overflow_total"),
            "# HELP kvgov_metrics_overflow_total Operations on metric children past a family's "
            "cardinality cap, folded into its __overflow__ child.\n"
            "# TYPE kvgov_metrics_overflow_total counter\n"
            "kvgov_metrics_overflow_total{family=\"c_total\"} 3\n");
  EXPECT_EQ(c->child_count(), 3u);
}

TEST(OverflowTest, RemovingAChildMakesRoomAgain) {
  Registry registry;
  GaugeFamily* g = Must(registry.AddGauge(Opts("g", {"worker"}, 1)));
  auto w1 = g->WithLabels({"w1"});
  auto folded = g->WithLabels({"w2"});
  ASSERT_TRUE(g->Remove({"w1"}).ok());
  auto w3 = g->WithLabels({"w3"});
  EXPECT_NE(w3, folded);
  w3->Set(3);
  folded->Set(9);
  EXPECT_EQ(Section(registry.Render(), "g"),
            "# HELP g Help.\n# TYPE g gauge\n"
            "g{worker=\"__overflow__\"} 9\ng{worker=\"w3\"} 3\n");
}

TEST(OverflowTest, HistogramsFoldToo) {
  Registry registry;
  HistogramFamily* h = Must(registry.AddHistogram(Opts("h_seconds", {"op"}, 1), {1}));
  h->WithLabels({"get"})->Observe(0.5);
  h->WithLabels({"put"})->Observe(2);
  h->WithLabels({"del"})->Observe(3);
  std::string text = registry.Render();
  EXPECT_NE(text.find("h_seconds_count{op=\"__overflow__\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kvgov_metrics_overflow_total{family=\"h_seconds\"} 2\n"), std::string::npos)
      << text;
}

// ---- collectors ------------------------------------------------------------

TEST(CollectorTest, EmitsScrapeTimeGauges) {
  Registry registry;
  CallbackFamily* blocks = Must(registry.AddCallbackGauge(Opts("blocks", {"worker", "tier"})));
  int scrapes = 0;
  auto id = registry.RegisterCollector([&](CollectorSink& sink) {
    ++scrapes;
    sink.Emit(blocks, {"w2", "hbm"}, 5);
    sink.Emit(blocks, {"w1", "hbm"}, 3);
    std::vector<std::string> owned = {"w1", "hbm"};
    sink.Emit(blocks, owned, 4);  // a second shard's part: summed
  });
  ASSERT_TRUE(id.ok());
  std::string expected =
      "# HELP blocks Help.\n# TYPE blocks gauge\n"
      "blocks{worker=\"w1\",tier=\"hbm\"} 7\nblocks{worker=\"w2\",tier=\"hbm\"} 5\n";
  EXPECT_EQ(Section(registry.Render(), "blocks"), expected);
  // Each scrape starts empty rather than accumulating.
  EXPECT_EQ(Section(registry.Render(), "blocks"), expected);
  EXPECT_EQ(scrapes, 2);

  ASSERT_TRUE(registry.RemoveCollector(*id).ok());
  EXPECT_EQ(registry.RemoveCollector(*id).code(), StatusCode::kNotFound);
  EXPECT_EQ(Section(registry.Render(), "blocks"), "# HELP blocks Help.\n# TYPE blocks gauge\n");
  EXPECT_EQ(scrapes, 2);
}

TEST(CollectorTest, EmitsScrapeTimeCounters) {
  Registry registry;
  EXPECT_EQ(registry.AddCallbackCounter(Opts("events")).status().code(),
            StatusCode::kInvalidArgument);  // counters end in _total
  CallbackFamily* events = Must(registry.AddCallbackCounter(Opts("events_total", {"worker"})));
  uint64_t seen = 41;
  ASSERT_TRUE(registry
                  .RegisterCollector([&](CollectorSink& sink) {
                    sink.Emit(events, {"w1"}, static_cast<double>(++seen));
                  })
                  .ok());
  EXPECT_EQ(Section(registry.Render(), "events_total"),
            "# HELP events_total Help.\n# TYPE events_total counter\n"
            "events_total{worker=\"w1\"} 42\n");
}

TEST(CollectorTest, BadEmissionsAreDroppedAndCounted) {
  Registry registry;
  Registry other;
  CallbackFamily* mine = Must(registry.AddCallbackGauge(Opts("mine", {"a"})));
  CallbackFamily* theirs = Must(other.AddCallbackGauge(Opts("theirs", {"a"})));
  ASSERT_TRUE(registry
                  .RegisterCollector([&](CollectorSink& sink) {
                    sink.Emit(mine, {"x", "y"}, 1);  // wrong count
                    sink.Emit(theirs, {"x"}, 1);     // another registry's family
                    sink.Emit(nullptr, {"x"}, 1);
                  })
                  .ok());
  std::string text = registry.Render();
  EXPECT_EQ(Section(text, "mine"), "# HELP mine Help.\n# TYPE mine gauge\n");
  EXPECT_NE(text.find("kvgov_metrics_label_errors_total{family=\"mine\"} 1\n"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("theirs"), std::string::npos);
}

TEST(CollectorTest, SamplesPastTheCapAreSummedIntoOverflow) {
  Registry registry;
  CallbackFamily* blocks = Must(registry.AddCallbackGauge(Opts("blocks", {"worker"}, 2)));
  ASSERT_TRUE(registry
                  .RegisterCollector([&](CollectorSink& sink) {
                    for (int w = 1; w <= 5; ++w) {
                      sink.Emit(blocks, {"w" + std::to_string(w)}, w);
                    }
                  })
                  .ok());
  std::string text = registry.Render();
  EXPECT_EQ(
      Section(text, "blocks"),
      "# HELP blocks Help.\n# TYPE blocks gauge\n"
      "blocks{worker=\"__overflow__\"} 12\nblocks{worker=\"w1\"} 1\nblocks{worker=\"w2\"} 2\n");
  EXPECT_NE(text.find("kvgov_metrics_overflow_total{family=\"blocks\"} 3\n"), std::string::npos);
}

TEST(CollectorTest, ThrowingCollectorIsCountedAndOthersStillRun) {
  Registry registry;
  CallbackFamily* g = Must(registry.AddCallbackGauge(Opts("g", {"a"})));
  ASSERT_TRUE(registry
                  .RegisterCollector([&](CollectorSink& sink) {
                    sink.Emit(g, {"before"}, 1);
                    throw std::runtime_error("index gone");
                  })
                  .ok());
  ASSERT_TRUE(
      registry.RegisterCollector([&](CollectorSink& sink) { sink.Emit(g, {"other"}, 2); }).ok());
  std::string text = registry.Render();
  EXPECT_EQ(Section(text, "g"),
            "# HELP g Help.\n# TYPE g gauge\ng{a=\"before\"} 1\ng{a=\"other\"} 2\n");
  EXPECT_NE(text.find("kvgov_metrics_collector_errors_total 1\n"), std::string::npos);
}

TEST(CollectorTest, RejectsEmptyFunction) {
  Registry registry;
  EXPECT_EQ(registry.RegisterCollector(nullptr).status().code(), StatusCode::kInvalidArgument);
}

// ---- concurrency -----------------------------------------------------------

constexpr int kThreads = 4;
constexpr int kIterations = 100'000;

template <typename Body>
void RunConcurrently(Body body) {
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      body(t);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(ConcurrencyTest, SameChildFromFourThreadsIsExact) {
  Registry registry;
  auto counter = Must(registry.AddCounter(Opts("c_total", {"w"})))->WithLabels({"x"});
  auto gauge = Must(registry.AddGauge(Opts("g", {"w"})))->WithLabels({"x"});
  auto histogram = Must(registry.AddHistogram(Opts("h", {"w"}), {0.5}))->WithLabels({"x"});
  RunConcurrently([&](int t) {
    for (int i = 0; i < kIterations; ++i) {
      counter->Inc();
      gauge->Add(1);
      histogram->Observe(t % 2 == 0 ? 0.25 : 1.0);
    }
  });
  EXPECT_EQ(counter->integer_part(), std::uint64_t{kThreads} * kIterations);
  EXPECT_EQ(gauge->Value(), double{kThreads} * kIterations);
  EXPECT_EQ(histogram->Count(), std::uint64_t{kThreads} * kIterations);
  EXPECT_EQ(histogram->BucketCount(0), std::uint64_t{kThreads / 2} * kIterations);
  // 0.25 and 1.0 sums stay exact in a double at this size.
  EXPECT_EQ(histogram->Sum(), (0.25 + 1.0) * (kThreads / 2) * kIterations);
}

TEST(ConcurrencyTest, DifferentChildrenFromFourThreadsAreExact) {
  Registry registry;
  CounterFamily* c = Must(registry.AddCounter(Opts("c_total", {"w"})));
  RunConcurrently([&](int t) {
    auto mine = c->WithLabels({"w" + std::to_string(t)});
    for (int i = 0; i < kIterations; ++i) mine->Inc();
  });
  std::string text = registry.Render();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_NE(text.find("c_total{w=\"w" + std::to_string(t) + "\"} " + std::to_string(kIterations) +
                        "\n"),
              std::string::npos)
        << text;
  }
}

// Lookups, removals, collectors and scrapes racing with hot-path updates:
// totals must stay exact and nothing may deadlock (run under TSan in CI).
TEST(ConcurrencyTest, LookupsAndScrapesRaceWithUpdates) {
  Registry registry;
  CounterFamily* c = Must(registry.AddCounter(Opts("c_total", {"w"}, 64)));
  CallbackFamily* g = Must(registry.AddCallbackGauge(Opts("g", {"w"})));
  std::atomic<std::uint64_t> seen{0};
  ASSERT_TRUE(registry
                  .RegisterCollector([&](CollectorSink& sink) {
                    sink.Emit(g, {"all"}, static_cast<double>(seen.load()));
                  })
                  .ok());
  auto shared = c->WithLabels({"shared"});
  RunConcurrently([&](int t) {
    for (int i = 0; i < kIterations / 10; ++i) {
      shared->Inc();
      seen.fetch_add(1);
      if (t == 0 && i % 1000 == 0) (void)registry.Render();
      if (t == 1) c->WithLabels({"churn" + std::to_string(i % 100)})->Inc();
      if (t == 2 && i % 7 == 0) (void)c->Remove({"churn" + std::to_string(i % 100)});
    }
  });
  EXPECT_EQ(shared->integer_part(), std::uint64_t{kThreads} * (kIterations / 10));
  EXPECT_NE(registry.Render().find("g{w=\"all\"} 40000\n"), std::string::npos);
}

// ---- promtool --------------------------------------------------------------

constexpr const char* kPromtool = "/usr/bin/promtool";

struct PromtoolRun {
  int exit_status = -1;
  std::string output;  // stdout and stderr together
};

// Feeds `text` to `promtool check metrics` on stdin.
PromtoolRun RunPromtool(const std::string& text) {
  PromtoolRun run;
  char path[] = "/tmp/kvgov_metrics_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    run.output = "mkstemp failed";
    return run;
  }
  std::size_t written = 0;
  while (written < text.size()) {
    ssize_t n = write(fd, text.data() + written, text.size() - written);
    if (n <= 0) break;
    written += static_cast<std::size_t>(n);
  }
  close(fd);
  std::string command = std::string(kPromtool) + " check metrics < " + path + " 2>&1";
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) run.output.append(buf, n);
    int status = pclose(pipe);
    run.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  unlink(path);
  return run;
}

bool HasErrorLine(const std::string& output) {
  std::size_t pos = 0;
  while (pos < output.size()) {
    std::size_t end = output.find('\n', pos);
    std::string line = output.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (line.find("error") != std::string::npos) return true;
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return false;
}

// promtool exits 1 on a parse error and 3 on lint problems (missing help,
// counter without _total, reserved suffixes, abbreviated units…). Our
// rendering must be clean of both, so the test wants 0 and no error line.
TEST(PromtoolTest, EveryFamilyTypePassesCheckMetrics) {
  if (access(kPromtool, X_OK) != 0) {
    GTEST_SKIP() << kPromtool << " is missing; install Debian package 'prometheus' "
                 << "(scripts/install-deps.sh does) to run this check";
  }
  Registry registry;
  CounterFamily* requests =
      Must(registry.AddCounter({.name = "kvgov_requests_total",
                                .help = "Requests, with \"quotes\", a \\ and\na newline in help.",
                                .label_names = {"worker", "tier"},
                                .max_children = 3}));
  CounterFamily* plain = Must(registry.AddCounter(Opts("kvgov_plain_total")));
  GaugeFamily* gauge = Must(registry.AddGauge(Opts("kvgov_resident_blocks", {"worker"})));
  HistogramFamily* latency = Must(registry.AddHistogram(
      Opts("kvgov_lookup_duration_seconds", {"op"}), ExponentialBuckets(0.0001, 10, 5)));
  HistogramFamily* unlabeled = Must(registry.AddHistogram(Opts("kvgov_batch_size_tokens"), {}));
  CallbackFamily* scraped = Must(registry.AddCallbackGauge(Opts("kvgov_index_blocks", {"tier"})));
  Must(registry.AddGauge(Opts("kvgov_never_set", {"worker"})));
  ASSERT_TRUE(registry
                  .RegisterCollector([&](CollectorSink& sink) {
                    sink.Emit(scraped, {"hbm"}, 128);
                    sink.Emit(scraped, {"dr\"am\\\n"}, 1e300);
                  })
                  .ok());
  requests->WithLabels({"w1", "hbm"})->Inc();
  requests->WithLabels({"w\"2\\\nx", "dram"})->Add(0.1);
  requests->WithLabels({"w3\xFF", "ssd"})->Add(7);
  requests->WithLabels({"w4", "ssd"})->Inc();    // overflow
  requests->WithLabels({"w5", "ssd"})->Inc();    // overflow
  requests->WithLabels({"a", "b", "c"})->Inc();  // label error
  plain->WithLabels({})->Add(std::uint64_t{1} << 62);
  gauge->WithLabels({"w1"})->Set(kNaN);
  gauge->WithLabels({"w2"})->Set(kInf);
  gauge->WithLabels({"w3"})->Set(-kInf);
  gauge->WithLabels({"w4"})->Set(-1.5e-300);
  for (double v : {0.00005, 0.002, 0.5, 20.0}) latency->WithLabels({"get"})->Observe(v);
  latency->WithLabels({"put"});
  unlabeled->WithLabels({})->Observe(3);

  std::string text = registry.Render();
  PromtoolRun run = RunPromtool(text);
  EXPECT_EQ(run.exit_status, 0) << "promtool output:\n" << run.output << "\ninput:\n" << text;
  EXPECT_FALSE(HasErrorLine(run.output)) << run.output;
}

// The harness itself must notice a bad exposition, or the test above proves
// nothing.
TEST(PromtoolTest, HarnessSeesErrorsAndLints) {
  if (access(kPromtool, X_OK) != 0) {
    GTEST_SKIP() << kPromtool << " is missing; install Debian package 'prometheus'";
  }
  PromtoolRun broken = RunPromtool("# TYPE x gauge\nx{le=\"1\" 1\n");
  EXPECT_NE(broken.exit_status, 0);
  EXPECT_TRUE(HasErrorLine(broken.output)) << broken.output;
  PromtoolRun linted = RunPromtool("# HELP x_sum h\n# TYPE x_sum gauge\nx_sum 1\n");
  EXPECT_NE(linted.exit_status, 0) << linted.output;
}

}  // namespace
}  // namespace kvgov::metrics
