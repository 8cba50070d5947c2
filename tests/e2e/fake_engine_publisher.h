#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "kvgov/core/engine_events.h"

namespace kvgov::testing {

/// A vLLM-framed KV-event publisher for end-to-end tests: a real publishing
/// socket (XPUB, which speaks PUB's wire and also tells us when a subscriber
/// has joined) and a real ROUTER replay socket on loopback, bound to
/// ephemeral ports.
/// It keeps the set of blocks it "holds" so a test can compare kvgov's
/// index with it, and it can misbehave on purpose: drop a batch (the seq is
/// consumed but never sent live; replay still has it), resend one, restart
/// (seq back to 0), or send bytes that do not decode.
///
/// Thread-safety: the test thread drives it; an internal thread answers
/// replay requests. Both share the history under a mutex.
class FakeEnginePublisher {
 public:
  enum class Encoding { kMapEvents, kLegacyPositional };

  explicit FakeEnginePublisher(int64_t block_size);
  /// Binds the two sockets to these endpoints (a data-parallel rank's fixed
  /// ports); throws zmq::error_t when one is taken.
  FakeEnginePublisher(int64_t block_size, const std::string& events_bind,
                      const std::string& replay_bind);
  ~FakeEnginePublisher();

  std::string events_endpoint() const { return events_endpoint_; }
  std::string replay_endpoint() const { return replay_endpoint_; }

  void set_encoding(Encoding encoding) { encoding_ = encoding; }

  /// Waits until a subscriber's subscription arrives, so nothing published
  /// after this is lost to ZeroMQ's slow-joiner window. False on timeout.
  bool WaitForSubscriber(std::chrono::milliseconds timeout);
  /// The next published batch is recorded for replay but not sent live.
  void DropNext() { drop_next_ = true; }

  /// Publishes BlockStored for `blocks` full blocks chained after `parent`
  /// (none: a new prefix), tokens starting at first_token. Returns the
  /// engine hashes used.
  std::vector<uint64_t> Store(std::optional<uint64_t> parent, int blocks, int64_t first_token);
  /// Publishes a new prefix of `tokens` (full blocks only) as a request
  /// carrying `cache_salt` produces it: the salt in the first block's
  /// extra_keys, as vLLM does. Returns the engine hashes.
  std::vector<uint64_t> StoreSalted(const std::vector<int64_t>& tokens,
                                    const std::string& cache_salt);
  void Remove(const std::vector<uint64_t>& hashes);
  void Clear();
  /// Sends the batch with this seq again, as a redelivery.
  void Resend(uint64_t seq);
  /// Sends a payload that is not msgpack, under the next seq.
  void SendGarbage();
  /// Forgets everything and starts counting from seq 0, as a restarted
  /// engine does; the replay buffer is emptied too.
  void Restart();
  /// Publishes a payload built by the test (another engine's wire form)
  /// under the next seq. The held-block set is not updated.
  void PublishPayload(std::string payload) { Publish(std::move(payload)); }
  /// Drops every batch before `seq` from the replay buffer, as a bounded
  /// buffer (vLLM's buffer_steps) does once the engine has published more.
  void ForgetBefore(uint64_t seq);
  /// While true, replay requests are read and never answered.
  void set_replay_silent(bool silent) { replay_silent_ = silent; }
  /// Replay requests received so far, answered or not.
  int replay_requests() const { return replay_requests_; }

  size_t held_blocks() const { return held_.size(); }
  uint64_t next_seq() const { return next_seq_; }

 private:
  void Publish(std::string payload);
  void PublishEvent(EngineEvent event, Encoding encoding);
  void ServeReplay();

  const int64_t block_size_;
  zmq::context_t context_{1};
  zmq::socket_t pub_;
  std::string events_endpoint_;
  std::string replay_endpoint_;
  std::thread replay_thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> replay_silent_{false};
  std::atomic<int> replay_requests_{0};

  std::mutex mu_;  // guards history_ (read by the replay thread)
  std::map<uint64_t, std::string> history_;

  Encoding encoding_ = Encoding::kMapEvents;
  bool drop_next_ = false;
  uint64_t next_seq_ = 0;
  uint64_t next_hash_;
  double ts_ = 1000.0;
  std::set<uint64_t> held_;
};

}  // namespace kvgov::testing
