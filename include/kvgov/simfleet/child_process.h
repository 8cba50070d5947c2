#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "kvgov/core/status.h"

namespace kvgov::simfleet {

/// A process kvgov's tools start and end by PID (`kvgov loadgen`'s daemon,
/// the end-to-end tests' daemons), its stdout and stderr in one log file.
/// Killed with SIGKILL and reaped if still running when destroyed, so no
/// test or tool leaves one behind. Not thread-safe: one owner drives it.
class ChildProcess {
 public:
  /// Starts `args[0]` (a path) with `args`, output to `log` (created 0600,
  /// truncated). IOError naming the program when it cannot start.
  static Result<ChildProcess> Spawn(const std::vector<std::string>& args, const std::string& log);

  ChildProcess() = default;
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }

  /// Whether it still runs; reaps it (and remembers its exit) once it ended.
  bool Running();

  /// The exit code, or -signal, once Running() returned false or
  /// Terminate/Kill/Wait ended it; -1 before.
  int exit_code() const { return exit_code_; }

  /// SIGTERM, then SIGKILL after `grace`; returns the exit code or -signal.
  int Terminate(std::chrono::milliseconds grace);

  /// SIGKILL and reap: a crash.
  void Kill();

  /// Waits for it to end by itself; returns the exit code or -signal.
  int Wait();

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  void Reaped(int wait_status);

  pid_t pid_ = -1;
  int exit_code_ = -1;
};

}  // namespace kvgov::simfleet
