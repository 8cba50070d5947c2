#pragma once

// Internal to kvgov_cli: how long-running subcommands wait for Ctrl-C.

#include <pthread.h>
#include <signal.h>

namespace kvgov::cli {

/// Blocks SIGINT and SIGTERM in the calling thread. Call it before any
/// thread starts, so every thread inherits the mask and only
/// WaitForStopSignal receives them. Returns the set.
inline sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

/// Waits for one of `signals`; returns its number.
inline int WaitForStopSignal(const sigset_t& signals) {
  int received = 0;
  sigwait(&signals, &received);
  return received;
}

}  // namespace kvgov::cli
