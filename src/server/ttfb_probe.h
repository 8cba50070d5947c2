#pragma once

// Benchmark support, never linked into kvgov: time to first byte of one
// streamed completion, as the gateway benchmarks measure it.

#include <httplib.h>

#include <chrono>
#include <string>

namespace kvgov::bench {

/// Microseconds from sending `body` to `path` to the first byte of the
/// answer's body; the rest is read to the end. Negative on failure.
inline double TimeToFirstByte(httplib::Client& client, const std::string& path,
                              const std::string& body) {
  using Clock = std::chrono::steady_clock;
  httplib::Request request;
  request.method = "POST";
  request.path = path;
  request.body = body;
  request.set_header("Content-Type", "application/json");
  Clock::time_point first{};
  request.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    if (first == Clock::time_point{}) first = Clock::now();
    return true;
  };
  const auto sent = Clock::now();
  httplib::Result result = client.send(request);
  if (!result || result->status != 200 || first == Clock::time_point{}) return -1;
  return std::chrono::duration<double, std::micro>(first - sent).count();
}

}  // namespace kvgov::bench
