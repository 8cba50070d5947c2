#pragma once

// The Prometheus text format 0.0.4, piece by piece: name rules, escaping and
// number spelling. Pure functions; thread-safe.

#include <span>
#include <string>
#include <string_view>

#include "kvgov/core/utf8.h"

namespace kvgov::metrics::internal {

/// `[a-zA-Z_][a-zA-Z0-9_]*`: Prometheus' metric name rule without ':', which
/// is reserved for recording rules and which promtool flags.
bool IsValidMetricName(std::string_view name);

/// `[a-zA-Z_][a-zA-Z0-9_]*` and not starting with the reserved `__`.
bool IsValidLabelName(std::string_view name);

/// Strict UTF-8, as Prometheus' parser checks label values and help.
using kvgov::IsValidUtf8;

/// `text` with every byte that does not start a valid sequence replaced by
/// U+FFFD.
std::string SanitizeUtf8(std::string_view text);

/// Shortest text that parses back to exactly `v`, laid out as the Prometheus
/// Go client does (plain notation for exponents in [-4, 21), so integers
/// below 1e21 have no exponent), and `+Inf`, `-Inf`, `NaN` spelled as
/// Prometheus spells them.
void AppendDouble(std::string& out, double v);
std::string FormatDouble(double v);

/// HELP text escaping: backslash and newline.
void AppendEscapedHelp(std::string& out, std::string_view help);

/// Label value escaping: backslash, double quote and newline.
void AppendEscapedLabelValue(std::string& out, std::string_view value);

/// `a="x",b="y"` (no braces). REQUIRES: names.size() == values.size().
std::string RenderLabelPairs(std::span<const std::string> names,
                             std::span<const std::string> values);

}  // namespace kvgov::metrics::internal
