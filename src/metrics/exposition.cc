#include "metrics/exposition.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <system_error>

#include "kvgov/core/utf8.h"

namespace kvgov::metrics::internal {
namespace {

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

bool IsPlainName(std::string_view name) {
  if (name.empty() || !IsNameStart(name[0])) return false;
  for (char c : name) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

}  // namespace

bool IsValidMetricName(std::string_view name) { return IsPlainName(name); }

bool IsValidLabelName(std::string_view name) {
  return IsPlainName(name) && !name.starts_with("__");
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (std::size_t i = 0; i < text.size();) {
    std::size_t len = Utf8SequenceLength(text, i);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

void AppendDouble(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  // The shortest digits that round-trip, laid out as Go's
  // strconv.FormatFloat(v, 'g', -1, 64) does (what the Prometheus Go client
  // writes): plain notation for decimal exponents in [-4, 21), so integers
  // below 1e21 never get an exponent, and `le` labels read the same as
  // every other exporter's ("0.0001", not "1e-04").
  char sci[64];
  auto [sci_end, ec] = std::to_chars(sci, sci + sizeof(sci), v, std::chars_format::scientific);
  if (ec != std::errc()) {  // cannot happen with 64 bytes; stay parseable anyway
    out += "NaN";
    return;
  }
  std::string_view text(sci, static_cast<std::size_t>(sci_end - sci));
  std::size_t e_pos = text.find('e');
  int exponent = 0;
  std::from_chars(text.data() + e_pos + (text[e_pos + 1] == '+' ? 2 : 1), text.data() + text.size(),
                  exponent);
  if (exponent < -4 || exponent >= 21) {
    out.append(text);  // already "d.ddde±XX" with at least two exponent digits
    return;
  }
  std::string_view mantissa = text.substr(0, e_pos);
  if (mantissa.front() == '-') {
    out += '-';
    mantissa.remove_prefix(1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  if (exponent < 0) {
    out += "0.";
    out.append(static_cast<std::size_t>(-exponent - 1), '0');
    out += digits;
    return;
  }
  auto int_digits = static_cast<std::size_t>(exponent) + 1;
  if (digits.size() <= int_digits) {
    out += digits;
    out.append(int_digits - digits.size(), '0');
  } else {
    out.append(digits, 0, int_digits);
    out += '.';
    out.append(digits, int_digits);
  }
}

std::string FormatDouble(double v) {
  std::string out;
  AppendDouble(out, v);
  return out;
}

void AppendEscapedHelp(std::string& out, std::string_view help) {
  for (char c : help) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
}

void AppendEscapedLabelValue(std::string& out, std::string_view value) {
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
}

std::string RenderLabelPairs(std::span<const std::string> names,
                             std::span<const std::string> values) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i];
    out += "=\"";
    AppendEscapedLabelValue(out, values[i]);
    out += '"';
  }
  return out;
}

}  // namespace kvgov::metrics::internal
