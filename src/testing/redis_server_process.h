#pragma once

// Test support: a real redis-server on a free loopback port, owned by the
// test that starts it. Linked by kvgov_replication's tests and available to
// the end-to-end tests (target kvgov_test_support).

#include <sys/types.h>

#include <string>

#include "kvgov/core/status.h"

namespace kvgov::test_support {

/// Starts /usr/bin/redis-server with no persistence, in a temporary
/// directory of its own (which also holds its log, `redis.log`), and waits
/// until it answers PING. The destructor stops it and removes the directory.
///
/// Thread-compatible: one thread drives it (tests start, kill and restart
/// the server from the test body).
class RedisServerProcess {
 public:
  RedisServerProcess() = default;
  ~RedisServerProcess();
  RedisServerProcess(const RedisServerProcess&) = delete;
  RedisServerProcess& operator=(const RedisServerProcess&) = delete;

  /// Before Start: keep every write in an append-only file fsynced at once,
  /// so a Kill and Restart loses nothing (what production Redis should do).
  void set_append_only(bool append_only) { append_only_ = append_only; }

  /// Picks a free port and starts the server; retries with another port if
  /// the chosen one was taken in the meantime. Unavailable when the server
  /// cannot be started (the message quotes the end of its log).
  Status Start();
  /// SIGTERM and wait; SIGKILL when it has not exited after 5 s.
  void Stop();
  /// SIGKILL and wait: Redis vanishes as in a crash.
  void Kill();
  /// Starts a stopped or killed server again on the same port (so clients
  /// holding url() reconnect to it). An empty server: nothing is persisted.
  Status Restart();

  bool running() const { return pid_ > 0; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  /// "redis://127.0.0.1:PORT".
  std::string url() const;

 private:
  Status EnsureDirectory();
  // Starts on port_ and waits for PING. Sets *exited_early when the
  // process exited before answering (most likely the port was taken).
  Status Launch(bool* exited_early);
  void Signal(int signal, int grace_ms);
  std::string LogTail() const;

  std::string dir_;
  bool append_only_ = false;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kvgov::test_support
