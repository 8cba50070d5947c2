#pragma once

#include <cstdio>
#include <string>

namespace kvgov::testing {

/// Runs a shell command to completion; its stdout (and what it redirects)
/// goes to `output`. Returns pclose's status: 0 for a clean exit.
inline int RunCommand(const std::string& command, std::string* output) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output->append(buffer, n);
  return ::pclose(pipe);
}

}  // namespace kvgov::testing
