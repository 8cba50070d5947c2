#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/sim/fleet.h"

namespace kvgov::sim {

/// One policy set against another on the two axes a fleet pays for:
/// prefill tokens computed (GPU time) and TTFT p90 (what users wait).
struct ParetoComparison {
  std::string policy;  // the one judged, e.g. kvgov
  std::string peer;
  // The policy's figure over the peer's: below 1 the policy is ahead.
  double prefill_ratio = 0;
  double ttft_p90_ratio = 0;
  // No worse on either axis (equal counts as no worse).
  bool no_worse() const { return prefill_ratio <= 1 && ttft_p90_ratio <= 1; }
  // No worse on either and better on one: the peer is dominated.
  bool dominates() const { return no_worse() && (prefill_ratio < 1 || ttft_p90_ratio < 1); }
  // Worse on both: the peer dominates the policy.
  bool dominated() const { return prefill_ratio > 1 && ttft_p90_ratio > 1; }
};

/// Where a policy stands against every other report of the same run, and
/// its hit rate against the oracle's.
struct ParetoSummary {
  std::string policy;
  std::vector<ParetoComparison> against;  // in the reports' order, the policy and oracle left out
  // Points of hit rate the policy is behind the oracle (negative: ahead);
  // empty when the run has no oracle.
  std::optional<double> hit_rate_points_behind_oracle;
  // Peers the policy is no worse than on both axes, of `against`.
  size_t no_worse_than() const;
};

/// NotFound when `policy` has no report. Peers whose figures are zero on an
/// axis (an empty trace) compare as equal on it. Disaggregated reports are
/// compared as they are: pass one fleet's reports at a time.
Result<ParetoSummary> Pareto(std::span<const PolicyReport> reports, std::string_view policy);

/// The summary for people: one line a peer with both ratios and what they
/// mean ("dominates", "loses on prefill by 1.2%"), then the oracle's gap.
std::string FormatPareto(const ParetoSummary& summary);

}  // namespace kvgov::sim
