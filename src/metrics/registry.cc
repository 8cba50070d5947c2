#include "kvgov/metrics/registry.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <utility>

#include "metrics/exposition.h"

namespace kvgov::metrics {
namespace {

constexpr std::string_view kOverflowFamily = "kvgov_metrics_overflow_total";
constexpr std::string_view kLabelErrorFamily = "kvgov_metrics_label_errors_total";
constexpr std::string_view kCollectorErrorFamily = "kvgov_metrics_collector_errors_total";

// Label values as string_views that are valid UTF-8: they point into the
// caller's strings when those already are (the common case, no copy), into
// sanitized copies otherwise. Built before the registry lock is taken so
// the lock is held only for the map work. Not copyable: views_ may point
// into the object itself.
class LabelKey {
 public:
  explicit LabelKey(std::span<const std::string_view> values) { Init(values); }
  explicit LabelKey(std::span<const std::string> values) {
    // Families rarely have more than a handful of labels; avoid the heap.
    if (values.size() <= inline_.size()) {
      std::copy(values.begin(), values.end(), inline_.begin());
      Init(std::span<const std::string_view>(inline_.data(), values.size()));
    } else {
      heap_.assign(values.begin(), values.end());
      Init(heap_);
    }
  }
  LabelKey(const LabelKey&) = delete;
  LabelKey& operator=(const LabelKey&) = delete;

  std::span<const std::string_view> views() const { return views_; }

 private:
  void Init(std::span<const std::string_view> values) {
    if (std::all_of(values.begin(), values.end(), internal::IsValidUtf8)) {
      views_ = values;
      return;
    }
    sanitized_.reserve(values.size());
    for (std::string_view v : values) sanitized_.push_back(internal::SanitizeUtf8(v));
    sanitized_views_.assign(sanitized_.begin(), sanitized_.end());
    views_ = sanitized_views_;
  }

  std::array<std::string_view, 8> inline_;
  std::vector<std::string_view> heap_;
  std::vector<std::string> sanitized_;
  std::vector<std::string_view> sanitized_views_;
  std::span<const std::string_view> views_;
};

bool IsOverflowKey(std::span<const std::string_view> values) {
  return !values.empty() && std::all_of(values.begin(), values.end(), [](std::string_view v) {
    return v == kOverflowLabelValue;
  });
}

std::vector<std::string> OverflowKey(std::size_t n) {
  return std::vector<std::string>(n, std::string(kOverflowLabelValue));
}

void AppendUint(std::string& out, std::uint64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  (void)ec;  // 24 bytes always hold a uint64
  out.append(buf, end);
}

// `name_suffix{labels} ` or `name_suffix ` when there are no labels.
void AppendSampleStart(std::string& out, std::string_view name, std::string_view suffix,
                       std::string_view labels) {
  out += name;
  out += suffix;
  if (!labels.empty()) {
    out += '{';
    out += labels;
    out += '}';
  }
  out += ' ';
}

std::string Quoted(std::string_view s) {
  std::string out = "'";
  out += s;
  out += "'";
  return out;
}

}  // namespace

// ---- children ------------------------------------------------------------

Histogram::Histogram(std::shared_ptr<const std::vector<double>> bounds,
                     std::shared_ptr<Counter> fold)
    : bounds_(std::move(bounds)),
      counts_(new std::atomic<std::uint64_t>[bounds_->size() + 1]()),
      fold_(std::move(fold)) {}

void Histogram::Observe(double v) {
  const std::vector<double>& b = *bounds_;
  // `le` is inclusive: the first bound >= v. NaN compares false with every
  // bound, so it is sent to +Inf explicitly rather than to bucket 0.
  std::size_t i =
      std::isnan(v) ? b.size()
                    : static_cast<std::size_t>(std::lower_bound(b.begin(), b.end(), v) - b.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  if (fold_ != nullptr) [[unlikely]]
    fold_->Inc();
}

std::uint64_t Histogram::Count() const {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i <= bounds_->size(); ++i) total += BucketCount(i);
  return total;
}

std::vector<double> LinearBuckets(double start, double width, std::size_t count) {
  std::vector<double> bounds;
  if (!(width > 0)) return bounds;
  bounds.reserve(count);
  for (std::size_t i = 0; i < count; ++i) bounds.push_back(start + width * static_cast<double>(i));
  return bounds;
}

std::vector<double> ExponentialBuckets(double start, double factor, std::size_t count) {
  std::vector<double> bounds;
  if (!(start > 0) || !(factor > 1)) return bounds;
  bounds.reserve(count);
  double b = start;
  for (std::size_t i = 0; i < count; ++i, b *= factor) bounds.push_back(b);
  return bounds;
}

// ---- families ------------------------------------------------------------

internal::FamilyBase::FamilyBase(Registry* registry, FamilyOptions options, std::string_view type)
    : registry_(registry),
      name_(std::move(options.name)),
      help_(std::move(options.help)),
      type_(type),
      label_names_(std::move(options.label_names)),
      max_children_(options.max_children) {}

template <typename ChildT>
Family<ChildT>::Family(Registry* registry, FamilyOptions options, std::string_view type,
                       std::shared_ptr<const std::vector<double>> bounds)
    : FamilyBase(registry, std::move(options), type), bounds_(std::move(bounds)) {
  if (bounds_ != nullptr) {
    for (double b : *bounds_) le_values_.push_back(internal::FormatDouble(b));
    le_values_.emplace_back("+Inf");
  }
}

template <typename ChildT>
std::shared_ptr<ChildT> Family<ChildT>::WithLabels(std::span<const std::string_view> values) {
  LabelKey key(values);
  MutexLock lock(registry_->mu_);
  return WithLabelsLocked(key.views());
}

template <typename ChildT>
std::shared_ptr<ChildT> Family<ChildT>::WithLabels(std::span<const std::string> values) {
  LabelKey key(values);
  MutexLock lock(registry_->mu_);
  return WithLabelsLocked(key.views());
}

template <typename ChildT>
std::shared_ptr<ChildT> Family<ChildT>::WithLabelsLocked(std::span<const std::string_view> values) {
  if (values.size() != label_names_.size()) {
    if (discard_ == nullptr) discard_ = NewChild(registry_->LabelErrorCounterLocked(name_));
    return discard_;
  }
  return GetOrCreateLocked(values);
}

template <typename ChildT>
std::shared_ptr<ChildT> Family<ChildT>::GetOrCreateLocked(
    std::span<const std::string_view> values) {
  if (auto it = children_.find(values); it != children_.end()) return it->second.child;

  bool overflow = IsOverflowKey(values);
  std::size_t ordinary = children_.size() - (overflow_ != nullptr ? 1 : 0);
  if (!overflow && ordinary >= max_children_) {
    if (overflow_ != nullptr) return overflow_;
    overflow = true;
  }
  std::vector<std::string> key = overflow ? OverflowKey(label_names_.size())
                                          : std::vector<std::string>(values.begin(), values.end());
  std::shared_ptr<ChildT> child =
      NewChild(overflow ? registry_->OverflowCounterLocked(name_) : nullptr);
  std::string labels = internal::RenderLabelPairs(label_names_, key);
  children_.emplace(std::move(key), Entry{child, std::move(labels)});
  if (overflow) overflow_ = child;
  return child;
}

template <typename ChildT>
Status Family<ChildT>::Remove(std::span<const std::string_view> values) {
  LabelKey key(values);
  MutexLock lock(registry_->mu_);
  return RemoveLocked(key.views());
}

template <typename ChildT>
Status Family<ChildT>::Remove(std::span<const std::string> values) {
  LabelKey key(values);
  MutexLock lock(registry_->mu_);
  return RemoveLocked(key.views());
}

template <typename ChildT>
Status Family<ChildT>::RemoveLocked(std::span<const std::string_view> values) {
  if (values.size() != label_names_.size()) {
    return Status::InvalidArgument("metrics: " + Quoted(name_) + ": Remove got " +
                                   std::to_string(values.size()) + " label values, want " +
                                   std::to_string(label_names_.size()));
  }
  auto it = children_.find(values);
  if (it == children_.end()) {
    return Status::NotFound("metrics: " + Quoted(name_) + ": no child with these label values");
  }
  if (it->second.child == overflow_) overflow_.reset();
  children_.erase(it);
  return Status::Ok();
}

template <typename ChildT>
std::size_t Family<ChildT>::child_count() const {
  MutexLock lock(registry_->mu_);
  return children_.size();
}

template <typename ChildT>
std::shared_ptr<ChildT> Family<ChildT>::NewChild(std::shared_ptr<Counter> fold) const {
  if constexpr (std::is_same_v<ChildT, Histogram>) {
    return std::make_shared<Histogram>(bounds_, std::move(fold));
  } else {
    return std::make_shared<ChildT>(std::move(fold));
  }
}

template <typename ChildT>
void Family<ChildT>::RenderSamples(std::string& out) const {
  for (const auto& [key, entry] : children_) {
    const ChildT& child = *entry.child;
    if constexpr (std::is_same_v<ChildT, Counter>) {
      AppendSampleStart(out, name_, "", entry.labels);
      // Integer-only counters print exactly, even past 2^53.
      double fractional = child.fractional_part();
      if (fractional == 0) {
        AppendUint(out, child.integer_part());
      } else {
        internal::AppendDouble(out, child.Value());
      }
    } else if constexpr (std::is_same_v<ChildT, Gauge>) {
      AppendSampleStart(out, name_, "", entry.labels);
      internal::AppendDouble(out, child.Value());
    } else {
      // Read each bucket once and derive _count from the same reads, so
      // _count always equals the +Inf bucket even mid-update.
      std::uint64_t cumulative = 0;
      for (std::size_t i = 0; i < le_values_.size(); ++i) {
        cumulative += child.BucketCount(i);
        out += name_;
        out += "_bucket{";
        if (!entry.labels.empty()) {
          out += entry.labels;
          out += ',';
        }
        out += "le=\"";
        out += le_values_[i];
        out += "\"} ";
        AppendUint(out, cumulative);
        out += '\n';
      }
      AppendSampleStart(out, name_, "_sum", entry.labels);
      internal::AppendDouble(out, child.Sum());
      out += '\n';
      AppendSampleStart(out, name_, "_count", entry.labels);
      AppendUint(out, cumulative);
    }
    out += '\n';
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

CallbackFamily::CallbackFamily(Registry* registry, FamilyOptions options, std::string_view type)
    : FamilyBase(registry, std::move(options), type) {}

void CallbackFamily::RenderSamples(std::string& out) const {
  for (const auto& [key, value] : samples_) {
    AppendSampleStart(out, name_, "", internal::RenderLabelPairs(label_names_, key));
    internal::AppendDouble(out, value);
    out += '\n';
  }
}

// ---- collector sink ------------------------------------------------------

void CollectorSink::Emit(const CallbackFamily* family, std::span<const std::string_view> values,
                         double value) {
  if (family == nullptr || family->registry_ != registry_) return;
  LabelKey key(values);
  std::span<const std::string_view> views = key.views();
  if (views.size() != family->label_names_.size()) {
    registry_->LabelErrorCounterLocked(family->name_)->Inc();
    return;
  }
  auto& samples = family->samples_;
  if (auto it = samples.find(views); it != samples.end()) {
    it->second += value;
    return;
  }
  bool overflow = IsOverflowKey(views);
  std::size_t ordinary = samples.size() - (family->has_overflow_sample_ ? 1 : 0);
  if (!overflow && ordinary >= family->max_children_) {
    // Summing keeps the family total right (all blocks on all workers),
    // which is what a folded gauge can still honestly say.
    registry_->OverflowCounterLocked(family->name_)->Inc();
    samples[OverflowKey(views.size())] += value;
    family->has_overflow_sample_ = true;
    return;
  }
  samples.emplace(std::vector<std::string>(views.begin(), views.end()), value);
  if (overflow) family->has_overflow_sample_ = true;
}

void CollectorSink::Emit(const CallbackFamily* family, std::span<const std::string> values,
                         double value) {
  std::vector<std::string_view> views(values.begin(), values.end());
  Emit(family, views, value);
}

// ---- registry ------------------------------------------------------------

Registry::Registry() {
  MutexLock lock(mu_);
  // The registry's own families: their label is the family name, so their
  // cardinality is bounded by the code, and they must never fold into
  // themselves.
  constexpr std::size_t kUnbounded = std::numeric_limits<std::size_t>::max();
  overflow_family_ = InsertLocked(std::unique_ptr<CounterFamily>(new CounterFamily(
      this,
      {.name = std::string(kOverflowFamily),
       .help = "Operations on metric children past a family's cardinality cap, folded into its "
               "__overflow__ child.",
       .label_names = {"family"},
       .max_children = kUnbounded},
      "counter", nullptr)));
  label_error_family_ = InsertLocked(std::unique_ptr<CounterFamily>(new CounterFamily(
      this,
      {.name = std::string(kLabelErrorFamily),
       .help = "Metric operations dropped because they gave the wrong number of label values.",
       .label_names = {"family"},
       .max_children = kUnbounded},
      "counter", nullptr)));
  CounterFamily* collector_errors = InsertLocked(std::unique_ptr<CounterFamily>(
      new CounterFamily(this,
                        {.name = std::string(kCollectorErrorFamily),
                         .help = "Metric collector callbacks that threw during a scrape.",
                         .label_names = {},
                         .max_children = 1},
                        "counter", nullptr)));
  collector_errors_ = collector_errors->GetOrCreateLocked({});
}

Registry::~Registry() = default;

Status Registry::ValidateLocked(const FamilyOptions& options, std::string_view type) const {
  const std::string& name = options.name;
  std::string what = "metrics: " + std::string(type) + " " + Quoted(name);
  if (!internal::IsValidMetricName(name)) {
    return Status::InvalidArgument(
        what + ": name must match [a-zA-Z_][a-zA-Z0-9_]* (':' is reserved for recording rules)");
  }
  if (type == "counter") {
    if (!name.ends_with("_total")) {
      return Status::InvalidArgument(what + ": counter names must end in _total");
    }
  } else {
    // These suffixes belong to counters and to a histogram's own series; a
    // gauge `x_sum` would collide with histogram `x`, and promtool flags them.
    for (std::string_view suffix : {"_total", "_bucket", "_sum", "_count"}) {
      if (name.ends_with(suffix)) {
        return Status::InvalidArgument(what +
                                       ": only a counter name may end in _total, and no "
                                       "name in _bucket, _sum or _count");
      }
    }
  }
  if (options.help.empty()) return Status::InvalidArgument(what + ": help must not be empty");
  if (!internal::IsValidUtf8(options.help)) {
    return Status::InvalidArgument(what + ": help is not valid UTF-8");
  }
  for (std::size_t i = 0; i < options.label_names.size(); ++i) {
    const std::string& label = options.label_names[i];
    if (!internal::IsValidLabelName(label)) {
      return Status::InvalidArgument(what + ": label name " + Quoted(label) +
                                     " must match [a-zA-Z_][a-zA-Z0-9_]* without a leading __");
    }
    if (type == "histogram" && label == "le") {
      return Status::InvalidArgument(what + ": 'le' is the histogram's own bucket label");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (options.label_names[j] == label) {
        return Status::InvalidArgument(what + ": label name " + Quoted(label) + " repeats");
      }
    }
  }
  if (options.max_children == 0) {
    return Status::InvalidArgument(what + ": max_children must be at least 1");
  }
  if (families_.contains(name)) return Status::AlreadyExists(what + ": already registered");
  return Status::Ok();
}

template <typename FamilyT>
FamilyT* Registry::InsertLocked(std::unique_ptr<FamilyT> family) {
  FamilyT* raw = family.get();
  std::string name = raw->name();
  families_.emplace(std::move(name), std::move(family));
  return raw;
}

Result<CounterFamily*> Registry::AddCounter(FamilyOptions options) {
  MutexLock lock(mu_);
  KVGOV_RETURN_IF_ERROR(ValidateLocked(options, "counter"));
  CounterFamily* family = InsertLocked(std::unique_ptr<CounterFamily>(
      new CounterFamily(this, std::move(options), "counter", nullptr)));
  if (family->label_names().empty()) family->GetOrCreateLocked({});
  return family;
}

Result<GaugeFamily*> Registry::AddGauge(FamilyOptions options) {
  MutexLock lock(mu_);
  KVGOV_RETURN_IF_ERROR(ValidateLocked(options, "gauge"));
  GaugeFamily* family = InsertLocked(
      std::unique_ptr<GaugeFamily>(new GaugeFamily(this, std::move(options), "gauge", nullptr)));
  if (family->label_names().empty()) family->GetOrCreateLocked({});
  return family;
}

Result<HistogramFamily*> Registry::AddHistogram(FamilyOptions options, std::vector<double> bounds) {
  if (!bounds.empty() && bounds.back() == std::numeric_limits<double>::infinity()) {
    bounds.pop_back();
  }
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) {
      return Status::InvalidArgument("metrics: histogram " + Quoted(options.name) +
                                     ": bucket bounds must be finite (+Inf is implied)");
    }
    if (i > 0 && !(bounds[i - 1] < bounds[i])) {
      return Status::InvalidArgument("metrics: histogram " + Quoted(options.name) +
                                     ": bucket bounds must be strictly increasing");
    }
  }
  MutexLock lock(mu_);
  KVGOV_RETURN_IF_ERROR(ValidateLocked(options, "histogram"));
  auto shared_bounds = std::make_shared<const std::vector<double>>(std::move(bounds));
  HistogramFamily* family = InsertLocked(std::unique_ptr<HistogramFamily>(
      new HistogramFamily(this, std::move(options), "histogram", std::move(shared_bounds))));
  if (family->label_names().empty()) family->GetOrCreateLocked({});
  return family;
}

Result<CallbackFamily*> Registry::AddCallbackGauge(FamilyOptions options) {
  return AddCallbackFamily(std::move(options), "gauge");
}

Result<CallbackFamily*> Registry::AddCallbackCounter(FamilyOptions options) {
  return AddCallbackFamily(std::move(options), "counter");
}

Result<CallbackFamily*> Registry::AddCallbackFamily(FamilyOptions options, std::string_view type) {
  MutexLock lock(mu_);
  KVGOV_RETURN_IF_ERROR(ValidateLocked(options, type));
  CallbackFamily* family = InsertLocked(
      std::unique_ptr<CallbackFamily>(new CallbackFamily(this, std::move(options), type)));
  callback_families_.push_back(family);
  return family;
}

Result<CollectorId> Registry::RegisterCollector(std::function<void(CollectorSink&)> collect) {
  if (!collect) return Status::InvalidArgument("metrics: collector must not be empty");
  MutexLock lock(mu_);
  CollectorId id{next_collector_id_++};
  collectors_.emplace(id, std::move(collect));
  return id;
}

Status Registry::RemoveCollector(CollectorId id) {
  MutexLock lock(mu_);
  if (collectors_.erase(id) == 0) {
    return Status::NotFound("metrics: collector " + std::to_string(static_cast<std::uint64_t>(id)) +
                            " not registered");
  }
  return Status::Ok();
}

std::shared_ptr<Counter> Registry::OverflowCounterLocked(const std::string& family) const {
  std::array<std::string_view, 1> key{family};
  return overflow_family_->GetOrCreateLocked(key);
}

std::shared_ptr<Counter> Registry::LabelErrorCounterLocked(const std::string& family) const {
  std::array<std::string_view, 1> key{family};
  return label_error_family_->GetOrCreateLocked(key);
}

std::string Registry::Render() const {
  MutexLock lock(mu_);
  for (CallbackFamily* family : callback_families_) {
    family->samples_.clear();
    family->has_overflow_sample_ = false;
  }
  CollectorSink sink(this);
  for (const auto& [id, collect] : collectors_) {
    // No exception may leave the module, and one faulty component must not
    // cost the scrape of all the others.
    try {
      collect(sink);
    } catch (...) {
      collector_errors_->Inc();
    }
  }

  std::string out;
  out.reserve(last_render_size_ + last_render_size_ / 8);
  for (const auto& [name, family] : families_) {
    out += "# HELP ";
    out += name;
    out += ' ';
    internal::AppendEscapedHelp(out, family->help_);
    out += "\n# TYPE ";
    out += name;
    out += ' ';
    out += family->type_;
    out += '\n';
    family->RenderSamples(out);
  }
  last_render_size_ = out.size();
  return out;
}

}  // namespace kvgov::metrics
