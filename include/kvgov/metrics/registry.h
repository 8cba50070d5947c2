#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kvgov/core/mutex.h"
#include "kvgov/core/status.h"

namespace kvgov::metrics {

class Registry;
class CollectorSink;

/// How many label sets a family holds before new ones are folded together.
inline constexpr std::size_t kDefaultMaxChildren = 10'000;

/// The label value every label of a family's overflow child carries. The
/// all-`__overflow__` label set is reserved: asking for it by hand returns the
/// overflow child itself.
inline constexpr std::string_view kOverflowLabelValue = "__overflow__";

/// What a family is registered with. Names follow Prometheus: metric names
/// `[a-zA-Z_][a-zA-Z0-9_]*` (no ':', which Prometheus reserves for recording
/// rules), label names `[a-zA-Z_][a-zA-Z0-9_]*` without the reserved `__`
/// prefix. Help must be non-empty valid UTF-8.
struct FamilyOptions {
  std::string name;
  std::string help;
  std::vector<std::string> label_names = {};  // none: the family has one child
  /// Past this many label sets, new ones share the overflow child (which is
  /// one more, not counted here). At least 1.
  std::size_t max_children = kDefaultMaxChildren;
};

// Children are cache-line aligned so that hot paths bumping different
// children from different threads do not false-share.
inline constexpr std::size_t kChildAlignment = 64;

/// One monotonic counter: the value of one label set of a CounterFamily.
/// Thread-safe; every method is a lock-free atomic. Owned jointly by its
/// family and every handle a caller caches (see Family::WithLabels).
class alignas(kChildAlignment) Counter {
 public:
  /// Built by the registry; `fold`, when set, is bumped once per operation
  /// (this child is a family's overflow or discard child).
  explicit Counter(std::shared_ptr<Counter> fold = nullptr) : fold_(std::move(fold)) {}
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  void Inc() { AddInteger(1); }

  /// Exact integer increment. A negative signed value is ignored: counters
  /// only go up.
  template <std::integral T>
  void Add(T n) {
    if constexpr (std::is_signed_v<T>) {
      if (n < 0) return;
    }
    AddInteger(static_cast<std::uint64_t>(n));
  }

  /// Fractional increment (seconds, bytes/s·s…). Negative, NaN and infinite
  /// increments are ignored rather than breaking monotonicity.
  void Add(double v) {
    if (!(v > 0) || v == std::numeric_limits<double>::infinity()) return;
    fractional_.fetch_add(v, std::memory_order_relaxed);
    Folded();
  }

  /// Integer and fractional parts summed; exact while only integers were added.
  double Value() const { return static_cast<double>(integer_part()) + fractional_part(); }
  std::uint64_t integer_part() const { return integer_.load(std::memory_order_relaxed); }
  double fractional_part() const { return fractional_.load(std::memory_order_relaxed); }

 private:
  void AddInteger(std::uint64_t n) {
    integer_.fetch_add(n, std::memory_order_relaxed);
    Folded();
  }
  void Folded() {
    if (fold_ != nullptr) [[unlikely]]
      fold_->AddInteger(1);
  }

  // Kept apart so integer counts stay exact past 2^53 and never pay a
  // compare-and-swap loop; a double is only touched by fractional adds.
  std::atomic<std::uint64_t> integer_{0};
  std::atomic<double> fractional_{0.0};
  const std::shared_ptr<Counter> fold_;
};

/// One gauge: the value of one label set of a GaugeFamily. Stored as a
/// double, so integers are exact up to 2^53. Thread-safe; every method is a
/// lock-free atomic (Add is a compare-and-swap loop). Ownership as Counter.
class alignas(kChildAlignment) Gauge {
 public:
  explicit Gauge(std::shared_ptr<Counter> fold = nullptr) : fold_(std::move(fold)) {}
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double v) {
    value_.store(v, std::memory_order_relaxed);
    Folded();
  }
  template <std::integral T>
  void Set(T v) {
    Set(static_cast<double>(v));
  }
  void Add(double v) {
    value_.fetch_add(v, std::memory_order_relaxed);
    Folded();
  }
  template <std::integral T>
  void Add(T v) {
    Add(static_cast<double>(v));
  }
  void Inc() { Add(1.0); }
  void Dec() { Add(-1.0); }

  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  void Folded() {
    if (fold_ != nullptr) [[unlikely]]
      fold_->Inc();
  }

  std::atomic<double> value_{0.0};
  const std::shared_ptr<Counter> fold_;
};

/// One histogram: the observations of one label set of a HistogramFamily,
/// in fixed buckets. Thread-safe and lock-free. A concurrent Render may see
/// a sum that lags the bucket counts by in-flight observations; `_count`
/// always equals the `+Inf` bucket. Ownership as Counter.
class alignas(kChildAlignment) Histogram {
 public:
  /// `bounds`: strictly increasing finite upper bounds, shared with the family.
  explicit Histogram(std::shared_ptr<const std::vector<double>> bounds,
                     std::shared_ptr<Counter> fold = nullptr);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  /// NaN lands in the `+Inf` bucket and makes the sum NaN, as in the Go client.
  void Observe(double v);

  std::uint64_t Count() const;
  double Sum() const { return sum_.load(std::memory_order_relaxed); }
  /// Non-cumulative count of bucket `i`; `i == bounds().size()` is `+Inf`.
  std::uint64_t BucketCount(std::size_t i) const {
    return counts_[i].load(std::memory_order_relaxed);
  }
  const std::vector<double>& bounds() const { return *bounds_; }

 private:
  const std::shared_ptr<const std::vector<double>> bounds_;
  // bounds_->size() + 1 slots, non-cumulative, so Observe touches one slot.
  const std::unique_ptr<std::atomic<std::uint64_t>[]> counts_;
  std::atomic<double> sum_{0.0};
  const std::shared_ptr<Counter> fold_;
};

/// `count` bounds start, start+width, …; empty unless count > 0 and width > 0.
std::vector<double> LinearBuckets(double start, double width, std::size_t count);
/// `count` bounds start, start·factor, …; empty unless count > 0, start > 0
/// and factor > 1.
std::vector<double> ExponentialBuckets(double start, double factor, std::size_t count);

namespace internal {

/// What the registry keeps of every family: identity and rendering. Not
/// thread-safe on its own; the owning registry's mutex guards it.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  std::size_t max_children() const { return max_children_; }

 protected:
  FamilyBase(Registry* registry, FamilyOptions options, std::string_view type);

  /// Appends every sample line (no HELP/TYPE). REQUIRES: registry mu_ held.
  virtual void RenderSamples(std::string& out) const = 0;

  Registry* const registry_;
  const std::string name_;
  const std::string help_;
  const std::string_view type_;  // "counter", "gauge" or "histogram"
  const std::vector<std::string> label_names_;
  const std::size_t max_children_;

  friend class ::kvgov::metrics::Registry;
};

/// Orders label-value lists lexicographically, so samples render sorted and
/// lookups need not build a key.
struct LabelsLess {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    std::size_t n = a.size() < b.size() ? a.size() : b.size();
    for (std::size_t i = 0; i < n; ++i) {
      int c = std::string_view(a[i]).compare(std::string_view(b[i]));
      if (c != 0) return c < 0;
    }
    return a.size() < b.size();
  }
};

}  // namespace internal

/// A named metric with a fixed list of label names; each list of label
/// values gets one child (Counter, Gauge or Histogram).
///
/// Thread-safety: WithLabels, Remove and child_count take the registry's
/// mutex; the returned child is then updated lock-free. Owned by the
/// Registry, which hands out a pointer valid for the registry's lifetime.
template <typename ChildT>
class Family final : public internal::FamilyBase {
 public:
  /// The child for these label values, created on first use. Cache the
  /// result on hot paths: it stays valid (and keeps counting, unrendered)
  /// even after Remove or the registry's destruction. Never null:
  ///  - label values that are not valid UTF-8 have each bad byte replaced by
  ///    U+FFFD (the scrape would otherwise fail as a whole);
  ///  - past max_children new label sets get the shared overflow child (all
  ///    values `__overflow__`), and each operation on it also counts in
  ///    `kvgov_metrics_overflow_total{family}`;
  ///  - a wrong number of values is a programming error that must not take
  ///    the daemon down: the result is a discard child that is never
  ///    rendered, and each operation on it counts in
  ///    `kvgov_metrics_label_errors_total{family}`.
  /// Must not be called from a collector callback (the mutex is held there).
  std::shared_ptr<ChildT> WithLabels(std::initializer_list<std::string_view> values) {
    return WithLabels(std::span<const std::string_view>(values.begin(), values.size()));
  }
  std::shared_ptr<ChildT> WithLabels(std::span<const std::string_view> values);
  std::shared_ptr<ChildT> WithLabels(std::span<const std::string> values);

  /// Drops the child for these values from rendering (a worker left the
  /// config). Handles already cached keep working but are no longer
  /// rendered; asking again later starts a fresh child from zero.
  /// Returns InvalidArgument for the wrong number of values, NotFound when
  /// no such child exists.
  Status Remove(std::initializer_list<std::string_view> values) {
    return Remove(std::span<const std::string_view>(values.begin(), values.size()));
  }
  Status Remove(std::span<const std::string_view> values);
  Status Remove(std::span<const std::string> values);

  /// Rendered children, the overflow child included.
  std::size_t child_count() const;

 private:
  friend class Registry;

  struct Entry {
    std::shared_ptr<ChildT> child;
    std::string labels;  // rendered `a="x",b="y"`, cached for Render
  };

  Family(Registry* registry, FamilyOptions options, std::string_view type,
         std::shared_ptr<const std::vector<double>> bounds);

  // REQUIRES: registry mu_ held; values.size() == label_names_.size().
  std::shared_ptr<ChildT> GetOrCreateLocked(std::span<const std::string_view> values);
  std::shared_ptr<ChildT> WithLabelsLocked(std::span<const std::string_view> values);
  Status RemoveLocked(std::span<const std::string_view> values);
  std::shared_ptr<ChildT> NewChild(std::shared_ptr<Counter> fold) const;
  void RenderSamples(std::string& out) const override;

  // Histograms only; null for counters and gauges.
  const std::shared_ptr<const std::vector<double>> bounds_;
  std::vector<std::string> le_values_;  // rendered bounds, then "+Inf"

  // Guarded by registry_->mu_; not annotated, since the registry reaches
  // them under its own mu_, which the analysis cannot tell is this one.
  std::map<std::vector<std::string>, Entry, internal::LabelsLess> children_;
  std::shared_ptr<ChildT> overflow_;  // also in children_ while set
  std::shared_ptr<ChildT> discard_;   // never in children_, never rendered
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

extern template class Family<Counter>;
extern template class Family<Gauge>;
extern template class Family<Histogram>;

/// A gauge or counter family whose samples are computed at scrape time by
/// collector callbacks (Registry::RegisterCollector) through a CollectorSink,
/// for values another component owns under its own lock or in its own
/// atomics (residency block counts read from the index, a stream's event
/// counters). A callback counter's collector must emit monotonic values. It has no children of its
/// own; each Render starts it empty. The same cardinality cap applies: samples past max_children
/// are summed into the overflow sample, and each folded sample counts in
/// `kvgov_metrics_overflow_total{family}`. Thread-safety: no public mutating
/// methods; the registry's mutex guards it. Owned by the Registry.
class CallbackFamily final : public internal::FamilyBase {
 private:
  friend class Registry;
  friend class CollectorSink;

  CallbackFamily(Registry* registry, FamilyOptions options, std::string_view type);
  void RenderSamples(std::string& out) const override;

  // Guarded by registry_->mu_ (not annotated: as Family's children_);
  // filled by collectors during Render.
  mutable std::map<std::vector<std::string>, double, internal::LabelsLess> samples_;
  mutable bool has_overflow_sample_ = false;
};

/// Handed to collector callbacks during Render; valid only for that call.
/// Not thread-safe: use it from the callback's own thread only.
class CollectorSink {
 public:
  CollectorSink(const CollectorSink&) = delete;
  CollectorSink& operator=(const CollectorSink&) = delete;

  /// Adds `value` to the sample of `family` for these label values: two
  /// emissions of one label set are summed, so sharded sources can each
  /// report their part. A family from another registry or null is ignored;
  /// a wrong number of values drops the sample and counts it in
  /// `kvgov_metrics_label_errors_total{family}`; invalid UTF-8 is replaced
  /// as in Family::WithLabels.
  void Emit(const CallbackFamily* family, std::initializer_list<std::string_view> values,
            double value) {
    Emit(family, std::span<const std::string_view>(values.begin(), values.size()), value);
  }
  void Emit(const CallbackFamily* family, std::span<const std::string_view> values, double value);
  void Emit(const CallbackFamily* family, std::span<const std::string> values, double value);

 private:
  friend class Registry;
  explicit CollectorSink(const Registry* registry) : registry_(registry) {}
  const Registry* const registry_;
};

/// Identifies a registered collector, for RemoveCollector.
enum class CollectorId : std::uint64_t {};

/// The set of metric families kvgov exposes, and their rendering in the
/// Prometheus text exposition format 0.0.4.
///
/// Thread-safety: thread-safe. One mutex (`mu_`) guards the set of
/// families, their children and the collectors; registration, WithLabels,
/// Remove, RegisterCollector, RemoveCollector and Render take it. Updates
/// through a cached child handle take no lock (relaxed atomics), so Render
/// never blocks a hot path and a hot path never blocks Render.
///
/// Collector callbacks run inside Render with `mu_` held. A callback may
/// take its own component's lock (the lock order is then: registry `mu_`,
/// then that lock), so code holding such a lock must not call a method of
/// this registry that takes `mu_` — updating a cached child is fine. A
/// callback must not call into the registry except through its sink.
///
/// Every registry carries three families of its own:
///   kvgov_metrics_overflow_total{family}      operations folded into an overflow child
///   kvgov_metrics_label_errors_total{family}  operations dropped for a wrong label count
///   kvgov_metrics_collector_errors_total      collector callbacks that threw
///
/// Ownership: owns every family; family pointers live as long as the
/// registry. Not copyable or movable.
class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  /// Counter names must end in `_total`. A family without labels gets its
  /// one child at once, so it renders 0 before the first increment.
  /// Returns InvalidArgument for a bad name, label name, help or
  /// max_children; AlreadyExists when the name is taken.
  Result<CounterFamily*> AddCounter(FamilyOptions options);

  /// Gauge names must not end in `_total`, `_bucket`, `_sum` or `_count`.
  /// Errors as AddCounter.
  Result<GaugeFamily*> AddGauge(FamilyOptions options);

  /// `bounds` must be strictly increasing and finite; a trailing +Inf is
  /// dropped (it is always implied). No `le` label. Name rules as AddGauge.
  /// Errors as AddCounter, plus InvalidArgument for bad bounds.
  Result<HistogramFamily*> AddHistogram(FamilyOptions options, std::vector<double> bounds);

  /// A gauge family filled by collectors at Render. Errors as AddGauge.
  Result<CallbackFamily*> AddCallbackGauge(FamilyOptions options);

  /// A counter family filled by collectors at Render. Errors as AddCounter.
  Result<CallbackFamily*> AddCallbackCounter(FamilyOptions options);

  /// Runs `collect` at every Render, in registration order, with `mu_` held
  /// (see the class comment). It must not throw; one that does is counted
  /// in kvgov_metrics_collector_errors_total and the samples it emitted
  /// before throwing are kept. After RemoveCollector returns the callback is
  /// not running and never runs again, so it may capture a component that
  /// is destroyed after removing it. Returns InvalidArgument for an empty
  /// function.
  Result<CollectorId> RegisterCollector(std::function<void(CollectorSink&)> collect);

  /// Returns NotFound for an unknown or already removed id.
  Status RemoveCollector(CollectorId id);

  /// The exposition text: families sorted by name, each with `# HELP` and
  /// `# TYPE` (even without samples), samples sorted by label values.
  std::string Render() const;

 private:
  template <typename ChildT>
  friend class Family;
  friend class CallbackFamily;
  friend class CollectorSink;

  Status ValidateLocked(const FamilyOptions& options, std::string_view type) const
      KVGOV_REQUIRES(mu_);
  Result<CallbackFamily*> AddCallbackFamily(FamilyOptions options, std::string_view type);
  template <typename FamilyT>
  FamilyT* InsertLocked(std::unique_ptr<FamilyT> family) KVGOV_REQUIRES(mu_);

  // REQUIRES: mu_ held. The per-family children of the registry's own
  // counters, created on first need.
  std::shared_ptr<Counter> OverflowCounterLocked(const std::string& family) const;
  std::shared_ptr<Counter> LabelErrorCounterLocked(const std::string& family) const;

  mutable Mutex mu_;
  // Families are never removed, so the pointers below and those handed out
  // stay valid.
  std::map<std::string, std::unique_ptr<internal::FamilyBase>, std::less<>> families_
      KVGOV_GUARDED_BY(mu_);
  std::vector<CallbackFamily*> callback_families_ KVGOV_GUARDED_BY(mu_);
  std::map<CollectorId, std::function<void(CollectorSink&)>> collectors_ KVGOV_GUARDED_BY(mu_);
  std::uint64_t next_collector_id_ KVGOV_GUARDED_BY(mu_) = 1;
  // Set by the constructor, never after, and read under mu_ by the
  // *CounterLocked helpers. Not annotated: those run for families and the
  // collector sink, which cannot say they hold their registry_->mu_.
  CounterFamily* overflow_family_ = nullptr;
  CounterFamily* label_error_family_ = nullptr;
  std::shared_ptr<Counter> collector_errors_ KVGOV_GUARDED_BY(mu_);
  mutable std::size_t last_render_size_ KVGOV_GUARDED_BY(mu_) = 0;  // reserve hint
};

}  // namespace kvgov::metrics
