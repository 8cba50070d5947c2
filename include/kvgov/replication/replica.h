#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "kvgov/core/status.h"
#include "kvgov/journal/journal.h"
#include "kvgov/replication/governance_log.h"
#include "kvgov/router/router.h"
#include "kvgov/store/store.h"

namespace kvgov::replication {

struct ReplicaOptions {
  std::string redis_url;
  std::string key_prefix = "kvgov";
  std::string replica_id;
  std::string token_path;  // the token file the log's "tokens" writes go to
  std::chrono::milliseconds redis_timeout{1000};
  // How long a write waits for its own entry to be applied here.
  std::chrono::milliseconds apply_wait{5000};
  std::chrono::milliseconds claim_ttl{3000};
  // How often in-flight load is published and the peers' read.
  std::chrono::milliseconds load_interval{100};
  // How long Start waits to catch up with the log before serving.
  std::chrono::milliseconds catch_up_wait{30000};
};

/// One kvgov among several sharing one governance state through the log on
/// Redis Streams (docs/adr/0011-replicated-governance-log.md). Every
/// governance write is appended, then applied by every replica, this one
/// included, in stream order: the journal row (with the entry's own time,
/// so every replica computes the same chain), the store writes and the
/// applied stream id in one synced write, then the in-memory state through
/// the apply hook. Claims in Redis say which replica does work that must
/// happen once (dispatching a directive, lease-expiry housekeeping).
///
/// Thread-safe. One applier thread reads the log; one heartbeat thread
/// renews the housekeeping claim and trades route load with the peers.
class Replica {
 public:
  /// Called after an entry's journal row and store writes are durable, on
  /// the applier thread, in stream order.
  using ApplyHook = std::function<void(const LogEntry&)>;

  /// Connects, refuses a data dir whose journal did not come from the log,
  /// and catches up with the log (bounded by catch_up_wait; without Redis
  /// it starts on its local state and catches up when Redis returns).
  /// `journal`, `store` and `router` must outlive the replica.
  static Result<std::unique_ptr<Replica>> Start(ReplicaOptions options, journal::Journal* journal,
                                                store::Store* store, router::Router* router,
                                                ApplyHook hook);
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  /// Appends a governance write and returns once this replica applied it:
  /// the journal row (a default Row for an empty kind). Unavailable when
  /// the log cannot be reached (nothing was written, or the reply was
  /// lost), or when the entry was appended but not applied here within
  /// apply_wait (the message says which). The row names `actor` and this
  /// replica as its origin.
  Result<journal::Row> Record(std::string_view kind, std::string_view subject,
                              std::string_view actor, std::string_view payload,
                              std::span<const store::WriteOp> state);

  /// Appends an entry made elsewhere (kvgov token --redis) without waiting.
  static Result<std::string> AppendOnce(const std::string& redis_url, std::string_view prefix,
                                        const LogEntry& entry);

  /// Claims on work that must be done once across the replicas.
  Result<bool> Claim(std::string_view name);
  Result<bool> RenewClaim(std::string_view name);
  void ReleaseClaim(std::string_view name);

  /// True while this replica holds the housekeeping claim.
  bool housekeeper() const { return housekeeper_.load(); }
  /// True while the last read of the log succeeded.
  bool connected() const { return connected_.load(); }
  const std::string& id() const { return options_.replica_id; }
  std::string applied_id() const;
  uint64_t rejected_entries() const { return rejected_.load(); }

  void Stop();

 private:
  Replica(ReplicaOptions options, const RedisEndpoint& endpoint,
          journal::Journal* journal, store::Store* store, router::Router* router, ApplyHook hook);

  void ApplyLoop();
  // Applies one entry (journal, store, cursor, hook). InvalidArgument or
  // ResourceExhausted for an entry its content makes every replica refuse
  // (then skipped alike); any other failure is retried, since skipping it
  // would fork the chain.
  Status Apply(const LogEntry& entry);
  // Moves the cursor past a refused entry; its writer gets `why`.
  Status Skip(const LogEntry& entry, const Status& why);
  void NoteSkipped(const std::string& id, const Status& why);
  Status AdvanceCursor(const std::string& id);
  void HeartbeatLoop();
  bool WaitFor(std::chrono::milliseconds period);  // false once stopping

  const ReplicaOptions options_;
  journal::Journal* const journal_;
  store::Store* const store_;
  router::Router* const router_;
  const ApplyHook hook_;
  GovernanceLog log_;
  ClaimStore claims_;
  LoadBoard load_board_;

  mutable std::mutex mu_;
  std::condition_variable applied_cv_;
  std::condition_variable stop_cv_;
  StreamId applied_;                         // guarded by mu_
  // What this replica's own entries came to, by stream id, until their
  // writers collect them. Guarded by mu_.
  std::map<std::string, Result<journal::Row>> own_rows_;
  bool stopping_ = false;                                 // guarded by mu_
  std::atomic<bool> connected_{false};
  std::atomic<bool> housekeeper_{false};
  std::atomic<uint64_t> rejected_{0};
  std::thread applier_;
  std::thread heartbeat_;
};

}  // namespace kvgov::replication
