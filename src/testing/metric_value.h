#pragma once

// Test and benchmark support, never linked into kvgov: one sample's value
// read from a Prometheus text exposition, as /metrics serves it.

#include <cstdlib>
#include <string>
#include <string_view>

namespace kvgov::test_support {

/// The value of `series` (a name with its labels as rendered, e.g.
/// `kvgov_x_total{outcome="ok"}`, or a histogram's `..._sum`) in
/// `exposition`, or -1 when it is absent.
inline double MetricValue(const std::string& exposition, std::string_view series) {
  const std::string sample = std::string(series) + " ";
  const size_t at = exposition.find(sample);
  if (at == std::string::npos) return -1;
  return std::strtod(exposition.c_str() + at + sample.size(), nullptr);  // stops at the line's end
}

}  // namespace kvgov::test_support
