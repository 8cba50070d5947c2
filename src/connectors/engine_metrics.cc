#include "kvgov/connectors/engine_metrics.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kvgov::connectors {
namespace {

// The gauges kvgov reads, in the order of kGaugeNames.
enum Gauge : size_t {
  kVllmRunning,
  kVllmWaiting,
  kVllmKvUsage,
  kVllmGpuUsage,
  kSglangRunning,
  kSglangWaiting,
  kSglangTokenUsage,
  kGaugeCount,
};

constexpr std::array<std::string_view, kGaugeCount> kGaugeNames = {
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc", "sglang:num_running_reqs",   "sglang:num_queue_reqs",
    "sglang:token_usage",
};

std::optional<Gauge> KnownGauge(std::string_view name) {
  for (size_t i = 0; i < kGaugeCount; ++i) {
    if (kGaugeNames[i] == name) return static_cast<Gauge>(i);
  }
  return std::nullopt;
}

// Every series of one gauge seen so far.
struct Series {
  double sum = 0;
  size_t count = 0;
};

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

bool IsLabelNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool IsLabelNameChar(char c) { return IsLabelNameStart(c) || (c >= '0' && c <= '9'); }

// Offending text for an error message, cut short so one bad line cannot
// blow up the message.
std::string Quote(std::string_view text) {
  constexpr size_t kMax = 64;
  if (text.size() <= kMax) return "'" + std::string(text) + "'";
  return "'" + std::string(text.substr(0, kMax)) + "...'";
}

// A sorted, length-prefixed rendering of a label set: equal sets render
// equally whatever their order, and no label value can forge a separator.
std::string CanonicalLabels(std::vector<std::pair<std::string, std::string>> labels) {
  std::sort(labels.begin(), labels.end());
  std::string out;
  for (const auto& [name, value] : labels) {
    out.append(std::to_string(name.size())).append(":").append(name);
    out.append(std::to_string(value.size())).append(":").append(value);
  }
  return out;
}

// Prometheus values are Go floats: "1", "0.5", "1e3", "NaN", "+Inf", "-Inf".
std::optional<double> ParseFloat(std::string_view token) {
  if (token.starts_with('+')) {
    token.remove_prefix(1);
    if (token.starts_with('+') || token.starts_with('-')) return std::nullopt;
  }
  if (token.empty()) return std::nullopt;
  double value = 0;
  auto [end, error] = std::from_chars(token.data(), token.data() + token.size(), value);
  if (error != std::errc() || end != token.data() + token.size()) return std::nullopt;
  return value;
}

bool IsInteger(std::string_view token) {
  int64_t value = 0;
  auto [end, error] = std::from_chars(token.data(), token.data() + token.size(), value);
  return !token.empty() && error == std::errc() && end == token.data() + token.size();
}

// One sample line of a known gauge. The line holds no '\n'.
class SampleLine {
 public:
  SampleLine(std::string_view line, size_t pos, size_t line_number, std::string_view name)
      : line_(line),
        pos_(pos),
        where_("line " + std::to_string(line_number) + ": " + std::string(name) + ": ") {}

  // Parses from just after the metric name to the end of the line.
  Status Parse() {
    SkipBlanks();  // the exposition format allows blanks before the label set
    if (pos_ < line_.size() && line_[pos_] == '{') KVGOV_RETURN_IF_ERROR(ParseLabels());
    SkipBlanks();
    std::string_view value_token = Token();
    if (value_token.empty()) return Error("missing value");
    std::optional<double> value = ParseFloat(value_token);
    if (!value) return Error("value " + Quote(value_token) + " is not a number");
    if (!std::isfinite(*value)) return Error("value " + Quote(value_token) + " is not finite");
    if (*value < 0) return Error("value " + Quote(value_token) + " is negative");
    value_ = *value;
    SkipBlanks();
    std::string_view timestamp = Token();
    if (!timestamp.empty() && !IsInteger(timestamp)) {
      return Error("timestamp " + Quote(timestamp) + " is not an integer");
    }
    SkipBlanks();
    if (pos_ < line_.size()) return Error("unexpected text " + Quote(line_.substr(pos_)));
    return Status::Ok();
  }

  double value() const { return value_; }
  std::string canonical_labels() const { return CanonicalLabels(labels_); }
  // The data-parallel rank the series is for: vLLM's `engine` label or
  // SGLang's `dp_rank`, a decimal below `ranks`; none for any other series.
  std::optional<size_t> Rank(size_t ranks) const {
    for (const auto& [label, value] : labels_) {
      if (label != "engine" && label != "dp_rank") continue;
      size_t rank = 0;
      const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), rank);
      if (error == std::errc() && end == value.data() + value.size() && !value.empty() &&
          rank < ranks) {
        return rank;
      }
    }
    return std::nullopt;
  }
  Status Error(const std::string& what) const { return Status::InvalidArgument(where_ + what); }

 private:
  // `{name="value",...}` with an optional trailing comma. Values keep any
  // byte; only \\, \" and \n are escapes.
  Status ParseLabels() {
    ++pos_;  // '{'
    while (true) {
      SkipBlanks();
      if (pos_ >= line_.size()) return Error("label set is not closed");
      if (line_[pos_] == '}') {
        ++pos_;
        return Status::Ok();
      }
      if (!IsLabelNameStart(line_[pos_])) {
        return Error("want a label name at " + Quote(line_.substr(pos_)));
      }
      const size_t start = pos_;
      while (pos_ < line_.size() && IsLabelNameChar(line_[pos_])) ++pos_;
      std::string name(line_.substr(start, pos_ - start));
      const std::string label = "label '" + name + "': ";
      SkipBlanks();
      if (pos_ >= line_.size() || line_[pos_] != '=') return Error(label + "want '='");
      ++pos_;
      SkipBlanks();
      if (pos_ >= line_.size() || line_[pos_] != '"') return Error(label + "want a quoted value");
      ++pos_;
      std::string value;
      bool closed = false;
      while (pos_ < line_.size()) {
        const char c = line_[pos_++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c != '\\') {
          value += c;
          continue;
        }
        if (pos_ >= line_.size()) break;
        const char escaped = line_[pos_++];
        if (escaped == '\\' || escaped == '"') {
          value += escaped;
        } else if (escaped == 'n') {
          value += '\n';
        } else {
          return Error(label + "unknown escape '\\" + std::string(1, escaped) + "'");
        }
      }
      if (!closed) return Error(label + "value is not closed");
      for (const auto& seen : labels_) {
        if (seen.first == name) return Error(label + "given twice");
      }
      labels_.emplace_back(std::move(name), std::move(value));
      SkipBlanks();
      if (pos_ < line_.size() && line_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < line_.size() && line_[pos_] == '}') {
        ++pos_;
        return Status::Ok();
      }
      return Error(label + "want ',' or '}' after the value");
    }
  }

  void SkipBlanks() {
    while (pos_ < line_.size() && IsBlank(line_[pos_])) ++pos_;
  }

  std::string_view Token() {
    const size_t start = pos_;
    while (pos_ < line_.size() && !IsBlank(line_[pos_])) ++pos_;
    return line_.substr(start, pos_ - start);
  }

  std::string_view line_;
  size_t pos_;
  std::string where_;
  std::vector<std::pair<std::string, std::string>> labels_;
  double value_ = 0;
};

}  // namespace

Result<std::vector<router::ScrapedLoad>> ParseEngineMetricsByRank(std::string_view prometheus_text,
                                                                  int64_t now_ms, size_t ranks,
                                                                  size_t max_bytes) {
  if (prometheus_text.size() > max_bytes) {
    return Status::ResourceExhausted("metrics: " + std::to_string(prometheus_text.size()) +
                                     " bytes, over the " + std::to_string(max_bytes) +
                                     "-byte limit");
  }
  if (ranks == 0) return Status::InvalidArgument("metrics: want at least one rank");
  // Series of each gauge by rank, then those that name no rank (the last).
  std::vector<std::array<Series, kGaugeCount>> by_rank(ranks + 1);
  std::array<std::set<std::string>, kGaugeCount> label_sets;  // to refuse a repeated series
  size_t line_number = 0;
  size_t start = 0;
  while (start < prometheus_text.size()) {
    const size_t newline = prometheus_text.find('\n', start);
    const size_t end = newline == std::string_view::npos ? prometheus_text.size() : newline;
    std::string_view line = prometheus_text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (line.ends_with('\r')) line.remove_suffix(1);

    size_t pos = 0;
    while (pos < line.size() && IsBlank(line[pos])) ++pos;
    if (pos == line.size() || line[pos] == '#') continue;
    // The name runs to the label set or the first blank. Only lines whose
    // name is a known gauge are parsed at all.
    const size_t name_start = pos;
    while (pos < line.size() && line[pos] != '{' && !IsBlank(line[pos])) ++pos;
    const std::string_view name = line.substr(name_start, pos - name_start);
    const std::optional<Gauge> gauge = KnownGauge(name);
    if (!gauge) continue;

    SampleLine sample(line, pos, line_number, name);
    KVGOV_RETURN_IF_ERROR(sample.Parse());
    if (!label_sets[*gauge].insert(sample.canonical_labels()).second) {
      return sample.Error("repeats an earlier series with the same labels");
    }
    // With one rank every series is that rank's, whatever its labels.
    Series& into = by_rank[ranks == 1 ? 0 : sample.Rank(ranks).value_or(ranks)][*gauge];
    into.sum += sample.value();
    ++into.count;
    if (!std::isfinite(into.sum)) return sample.Error("the sum over its series is not finite");
  }

  const std::array<Series, kGaugeCount>& unranked = by_rank[ranks];
  auto present = [&](Gauge gauge) {
    for (const auto& rank : by_rank) {
      if (rank[gauge].count > 0) return true;
    }
    return false;
  };
  auto first_present = [&](std::initializer_list<Gauge> gauges) -> std::optional<Gauge> {
    for (Gauge gauge : gauges) {
      if (present(gauge)) return gauge;
    }
    return std::nullopt;
  };
  const std::optional<Gauge> running = first_present({kVllmRunning, kSglangRunning});
  const std::optional<Gauge> waiting = first_present({kVllmWaiting, kSglangWaiting});
  const std::optional<Gauge> kv_usage =
      first_present({kVllmKvUsage, kVllmGpuUsage, kSglangTokenUsage});
  if (!running && !waiting && !kv_usage) {
    return Status::NotFound(
        "metrics: none of the load gauges (vllm:num_requests_running, "
        "vllm:num_requests_waiting, vllm:kv_cache_usage_perc, vllm:gpu_cache_usage_perc, "
        "sglang:num_running_reqs, sglang:num_queue_reqs, sglang:token_usage) is present");
  }
  const auto share = static_cast<double>(ranks);
  // A count a rank's own series report, plus its even share of the series
  // that name no rank (an engine that does not label them per rank).
  auto count_of = [&](const std::array<Series, kGaugeCount>& rank, std::optional<Gauge> gauge) {
    return gauge ? rank[*gauge].sum + unranked[*gauge].sum / share : 0.0;
  };
  // A fraction of one rank's cache: its own series' mean, else the mean of
  // the unlabelled ones.
  auto fraction_of = [&](const std::array<Series, kGaugeCount>& rank, std::optional<Gauge> gauge) {
    if (!gauge) return 0.0;
    const Series& series = rank[*gauge].count > 0 ? rank[*gauge] : unranked[*gauge];
    return series.count > 0 ? series.sum / static_cast<double>(series.count) : 0.0;
  };
  std::vector<router::ScrapedLoad> loads(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    loads[r].running = count_of(by_rank[r], running);
    loads[r].waiting = count_of(by_rank[r], waiting);
    loads[r].kv_usage = fraction_of(by_rank[r], kv_usage);
    loads[r].scraped_at_ms = now_ms;
  }
  return loads;
}

Result<router::ScrapedLoad> ParseEngineMetrics(std::string_view prometheus_text, int64_t now_ms,
                                               size_t max_bytes) {
  KVGOV_ASSIGN_OR_RETURN(std::vector<router::ScrapedLoad> loads,
                         ParseEngineMetricsByRank(prometheus_text, now_ms, 1, max_bytes));
  return loads.front();
}

}  // namespace kvgov::connectors
