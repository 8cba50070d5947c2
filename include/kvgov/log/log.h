#pragma once

// One logfmt line per daemon event on stderr (ADR 0017):
//   ts=2026-12-01T15:20:01.123Z level=info event=engine.health worker=w1 healthy=false
// Values holding a space, '=', '"', a control byte or nothing are quoted and
// escaped, so a line is always one line. Never pass a secret.

#include <cstdint>
#include <string>
#include <string_view>

namespace kvgov::log {

enum class Level { kInfo, kWarn, kError };

/// Builds a line and writes it when destroyed, in one write(2), so lines
/// from different threads never interleave.
///
/// Thread-compatible: one Line per thread; any number at once.
class Line {
 public:
  Line(Level level, std::string_view event);
  ~Line();
  Line(const Line&) = delete;
  Line& operator=(const Line&) = delete;

  Line& Field(std::string_view key, std::string_view value);
  Line& Field(std::string_view key, const char* value) {
    return Field(key, std::string_view(value));
  }
  Line& Field(std::string_view key, int64_t value);
  Line& Field(std::string_view key, uint64_t value);
  Line& Field(std::string_view key, bool value);

  /// The line as it will be written, without the newline.
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

/// `value` as logfmt writes it: bare, or quoted and escaped.
std::string Quoted(std::string_view value);

/// Milliseconds since the epoch as ISO-8601 UTC, 2026-12-01T15:20:01.123Z:
/// how a line's ts= reads, and how the command line prints a time.
std::string IsoUtc(int64_t unix_ms);

}  // namespace kvgov::log
