#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kvgov/core/status.h"
#include "kvgov/simfleet/child_process.h"
#include "testing/scratch_dir.h"

namespace kvgov::testing {

/// A `kvgov serve` child process for end-to-end tests. Start() spawns it on
/// 127.0.0.1:0 with a fresh data dir and polls its ready file (never a fixed
/// sleep); the destructor stops it by PID (SIGTERM, then SIGKILL after a
/// grace period) and removes the scratch directory. Start may be called
/// again after Stop or Kill: the same data dir is reused. Not thread-safe.
class DaemonProcess {
 public:
  DaemonProcess();
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  /// Spawns `kvgov serve --listen LISTEN` plus `extra_args` and waits until
  /// it is ready or has exited. Returns Unavailable (with the child's
  /// stderr) when it exits or does not become ready in time.
  Status Start(const std::vector<std::string>& extra_args = {},
               const std::string& listen = "127.0.0.1:0");

  /// The data dir the daemon is started with.
  std::string data_dir() const { return (scratch_ / "data").string(); }

  /// Sends SIGTERM and waits for exit; returns the exit code, or -signal.
  int Stop();

  /// Sends SIGKILL and reaps the process: a crash. The data dir stays, so a
  /// later Start() recovers from it.
  void Kill();

  /// Runs `kvgov ARGS...` to completion (for one-shot subcommands and for
  /// serve invocations expected to fail); returns the exit code and fills
  /// `output` with stdout and stderr.
  static int RunToExit(const std::vector<std::string>& args, std::string* output);

  uint16_t port() const { return port_; }
  pid_t pid() const { return child_.pid(); }
  const std::filesystem::path& dir() const { return scratch_.path(); }
  std::string Stderr() const;

 private:
  test_support::ScratchDir scratch_;  // the data dir and logs
  simfleet::ChildProcess child_;
  uint16_t port_ = 0;
};

}  // namespace kvgov::testing
