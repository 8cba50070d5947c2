#include "kvgov/sim/pareto.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace kvgov::sim {
namespace {

// Exactly 1 when the two are equal to within the rounding of the virtual
// clock's sums (a TTFT is a difference of arrival and finish times, so one
// queue's wait can come out 1e-15 s apart in two runs), or both zero.
double Ratio(double mine, double theirs) {
  if (std::abs(mine - theirs) <= 1e-9 * std::max(std::abs(mine), std::abs(theirs))) return 1.0;
  if (theirs == 0) return std::numeric_limits<double>::infinity();
  return mine / theirs;
}

// "prefill by 1.2%" for a ratio of 1.012.
std::string Excess(std::string_view axis, double ratio) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*s by %.1f%%", static_cast<int>(axis.size()), axis.data(),
                100.0 * (ratio - 1.0));
  return text;
}

}  // namespace

size_t ParetoSummary::no_worse_than() const {
  return static_cast<size_t>(std::count_if(against.begin(), against.end(),
                                           [](const ParetoComparison& c) { return c.no_worse(); }));
}

Result<ParetoSummary> Pareto(std::span<const PolicyReport> reports, std::string_view policy) {
  const auto mine = std::find_if(reports.begin(), reports.end(),
                                 [&](const PolicyReport& r) { return r.policy == policy; });
  if (mine == reports.end()) {
    return Status::NotFound("pareto: no report of policy '" + std::string(policy) + "'");
  }
  ParetoSummary summary;
  summary.policy = std::string(policy);
  for (const PolicyReport& peer : reports) {
    if (peer.policy == "oracle") {
      summary.hit_rate_points_behind_oracle = 100.0 * (peer.hit_rate() - mine->hit_rate());
      continue;
    }
    if (peer.policy == policy) continue;
    summary.against.push_back({.policy = summary.policy,
                               .peer = peer.policy,
                               .prefill_ratio = Ratio(static_cast<double>(mine->computed_tokens),
                                                      static_cast<double>(peer.computed_tokens)),
                               .ttft_p90_ratio = Ratio(mine->ttft_p90_s, peer.ttft_p90_s)});
  }
  return summary;
}

std::string FormatPareto(const ParetoSummary& summary) {
  std::string out = summary.policy + " against each policy (" + summary.policy +
                    "'s figure over the peer's; below 1 is " + summary.policy + " ahead):\n";
  char line[256];
  for (const ParetoComparison& c : summary.against) {
    std::string verdict;
    if (c.dominates()) {
      verdict = "dominates";
    } else if (c.no_worse()) {
      verdict = "equal";
    } else if (c.dominated()) {
      verdict = "dominated: loses on " + Excess("prefill", c.prefill_ratio) + " and " +
                Excess("TTFT p90", c.ttft_p90_ratio);
    } else if (c.prefill_ratio > 1) {
      verdict = "loses on " + Excess("prefill", c.prefill_ratio);
    } else {
      verdict = "loses on " + Excess("TTFT p90", c.ttft_p90_ratio);
    }
    std::snprintf(line, sizeof(line), "  %-14s prefill %6.3f  TTFT p90 %6.3f  %s\n", c.peer.c_str(),
                  c.prefill_ratio, c.ttft_p90_ratio, verdict.c_str());
    out += line;
  }
  if (summary.hit_rate_points_behind_oracle.has_value()) {
    std::snprintf(line, sizeof(line), "  hit rate: %.1f points %s the oracle's\n",
                  std::abs(*summary.hit_rate_points_behind_oracle),
                  *summary.hit_rate_points_behind_oracle > 0 ? "behind" : "at or above");
    out += line;
  }
  std::snprintf(line, sizeof(line), "  no worse on both axes than %zu of %zu\n",
                summary.no_worse_than(), summary.against.size());
  out += line;
  return out;
}

}  // namespace kvgov::sim
