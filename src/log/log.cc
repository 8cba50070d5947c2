#include "kvgov/log/log.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>

namespace kvgov::log {
namespace {

std::string_view LevelName(Level level) {
  switch (level) {
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
  }
  return "info";
}

bool Bare(std::string_view value) {
  if (value.empty()) return false;
  for (char c : value) {
    if (c <= ' ' || c == '=' || c == '"' || c == '\\' || static_cast<unsigned char>(c) >= 0x7f) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string IsoUtc(int64_t unix_ms) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[40];
  const size_t n = std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + n, sizeof(text) - n, ".%03dZ", static_cast<int>(unix_ms % 1000));
  return text;
}

std::string Quoted(std::string_view value) {
  if (Bare(value)) return std::string(value);
  std::string out = "\"";
  for (char c : value) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\x%02x", static_cast<unsigned char>(c));
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

Line::Line(Level level, std::string_view event) {
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  text_ = "ts=" + IsoUtc(now_ms) + " level=" + std::string(LevelName(level)) +
          " event=" + Quoted(event);
}

Line::~Line() {
  std::string line = text_ + "\n";
  // One write: a line from another thread cannot land inside this one.
  for (size_t at = 0; at < line.size();) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + at, line.size() - at);
    if (n <= 0) return;  // nowhere to report a failed log write
    at += static_cast<size_t>(n);
  }
}

Line& Line::Field(std::string_view key, std::string_view value) {
  text_ += ' ';
  text_ += key;
  text_ += '=';
  text_ += Quoted(value);
  return *this;
}

Line& Line::Field(std::string_view key, int64_t value) {
  return Field(key, std::string_view(std::to_string(value)));
}

Line& Line::Field(std::string_view key, uint64_t value) {
  return Field(key, std::string_view(std::to_string(value)));
}

Line& Line::Field(std::string_view key, bool value) {
  return Field(key, std::string_view(value ? "true" : "false"));
}

}  // namespace kvgov::log
