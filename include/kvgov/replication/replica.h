#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kvgov/auth/tokens.h"
#include "kvgov/core/mutex.h"
#include "kvgov/core/status.h"
#include "kvgov/journal/journal.h"
#include "kvgov/replication/governance_log.h"
#include "kvgov/router/router.h"
#include "kvgov/store/store.h"

namespace kvgov::replication {

/// The tokens the replicated governance log holds: what every replica's
/// token file holds once it applied the whole log.
struct ReplicatedTokens {
  std::vector<auth::TokenRecord> tokens;  // in the order a replica's token file has them
  std::string as_of;                      // the last stream id read ("0-0": none)
  std::string snapshot;                   // the snapshot the read started from; "" for none
  // Token name -> the id of the last entry after the snapshot that wrote it
  // (added, replaced or revoked it); names it lacks last changed at or
  // before the snapshot.
  std::map<std::string, std::string> changed_at;

  /// Where the named token last changed as this read saw it: its entry,
  /// else the snapshot, else "0-0". Readers that saw the same state of the
  /// token agree on it, whatever else the log got between their reads.
  std::string ChangedAt(const std::string& name) const {
    const auto it = changed_at.find(name);
    if (it != changed_at.end()) return it->second;
    return snapshot.empty() ? "0-0" : snapshot;
  }
};

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
  // How much history the housekeeper keeps below the slowest live replica
  // (and below the snapshot) when it trims the stream: a replica away for
  // less than this catches up from the log, a longer one from the snapshot.
  std::chrono::milliseconds log_retain{600000};
  // How often the housekeeper writes the governance snapshot and trims.
  std::chrono::milliseconds snapshot_interval{30000};
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
  /// Decides whether an entry applies, before anything of it is written,
  /// from state the log alone built (the store's governance records), so
  /// that every replica decides alike: an error refuses the entry on every
  /// replica (skipped, and its writer gets that Status), except
  /// Unavailable, IOError and Internal, which are this replica's own
  /// failure (its store) and are retried.
  using GuardHook = std::function<Status(const LogEntry&)>;
  /// Called once, from a replica thread, when this replica can no longer
  /// serve as one of the fleet: another process holds its replica id.
  using FatalHook = std::function<void(const Status&)>;
  struct Hooks {
    ApplyHook apply;
    GuardHook guard;
    FatalHook fatal;
  };

  /// Connects, refuses a data dir whose journal did not come from the log,
  /// claims its replica id (FailedPrecondition naming the holder when
  /// another live process has it), and catches up with the log (bounded by
  /// catch_up_wait; without Redis it starts on its local state and catches
  /// up when Redis returns). A replica whose history was trimmed while it
  /// was away installs the housekeeper's snapshot instead.
  /// `journal`, `store` and `router` must outlive the replica.
  static Result<std::unique_ptr<Replica>> Start(ReplicaOptions options, journal::Journal* journal,
                                                store::Store* store, router::Router* router,
                                                Hooks hooks);
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  /// Appends a governance write and returns once this replica applied it:
  /// the journal row (a default Row for an empty kind). The entry carries a
  /// write id of its own, so an append whose connection broke is retried
  /// at once without the risk of a second row: a duplicate is applied once
  /// and answered with the first one's result. Unavailable when the log
  /// cannot be reached, or when the entry was appended but not applied
  /// here within apply_wait (the message says which); the guard's Status
  /// when it refused the entry. The row names `actor` and this replica as
  /// its origin.
  Result<journal::Row> Record(std::string_view kind, std::string_view subject,
                              std::string_view actor, std::string_view payload,
                              std::span<const store::WriteOp> state);

  /// Appends an entry made elsewhere (kvgov token --redis) without waiting
  /// for it to be applied; under a write id of its own when it has none, so
  /// a retry after a broken connection is applied once.
  static Result<std::string> AppendOnce(const std::string& redis_url, std::string_view prefix,
                                        const LogEntry& entry);

  /// The tokens the log holds (kvgov token list --redis), read from Redis
  /// alone, without a replica: the housekeeper's snapshot, then every
  /// entry after it, each taken as a replica takes it (a retried append
  /// once, a record every replica refuses skipped). Unavailable when Redis
  /// cannot be reached, or when the log was trimmed past every snapshot in
  /// it (the message says so); InvalidArgument for a snapshot that does
  /// not decode.
  static Result<ReplicatedTokens> ReadTokens(const std::string& redis_url, std::string_view prefix);

  /// Claims on work that must be done once across the replicas.
  Result<bool> Claim(std::string_view name);
  Result<bool> RenewClaim(std::string_view name);
  void ReleaseClaim(std::string_view name);

  /// True while this replica holds the housekeeping claim.
  bool housekeeper() const { return housekeeper_.load(); }
  /// True while the last read of the log succeeded.
  bool connected() const { return connected_.load(); }
  /// True once this replica has applied the log to its end as one read
  /// found it (or was there at start), and from then on: until then its
  /// governance state may lack quarantines and revocations the fleet holds,
  /// so it should take no traffic (GET /readyz).
  bool caught_up() const { return caught_up_.load() && !log_reset_.load(); }
  /// True while Redis holds another governance log than the one this
  /// replica followed (its identity differs, or is gone): Redis lost its
  /// data. Governance writes are refused and the log is not applied until
  /// the log it followed is back (Redis restored from its backup).
  bool log_reset() const { return log_reset_.load(); }
  const std::string& id() const { return options_.replica_id; }
  std::string applied_id() const;
  uint64_t rejected_entries() const { return rejected_.load(); }
  /// Entries the guard refused (alike on every replica).
  uint64_t refused_entries() const { return refused_.load(); }
  /// Entries applied once already (a retried append), skipped.
  uint64_t duplicate_entries() const { return duplicates_.load(); }
  /// Times this replica installed the snapshot for a history it missed.
  uint64_t snapshot_installs() const { return snapshot_installs_.load(); }

  void Stop();

 private:
  Replica(ReplicaOptions options, const RedisEndpoint& endpoint, std::string instance,
          journal::Journal* journal, store::Store* store, router::Router* router, Hooks hooks);

  Status LoadWriteIds();
  void ApplyLoop();
  // Applies one entry (journal, store, cursor, write id, hook).
  // InvalidArgument or ResourceExhausted for an entry its content makes
  // every replica refuse, and the guard's refusals, are skipped alike; any
  // other failure is retried, since skipping it would fork the chain.
  Status Apply(const LogEntry& entry);
  // Moves the cursor past a refused entry, remembering its write id; its
  // writer gets `why`.
  Status Skip(const LogEntry& entry, const Status& why);
  void NoteSkipped(const std::string& id, const Status& why);
  Status AdvanceCursor(const std::string& id);
  // The store ops that remember `entry`'s write id and forget the ones
  // past the window; RememberWriteId makes the same change in memory once
  // they are written.
  std::vector<store::WriteOp> WriteIdOps(const LogEntry& entry, const StreamId& id) const;
  void RememberWriteId(const LogEntry& entry, const StreamId& id);
  // The writer of `entry` (at `id`), if it is this replica, gets `outcome`.
  void SettleOwn(const LogEntry& entry, const StreamId& id, Result<journal::Row> outcome);
  // True when the log was trimmed past what this replica applied: the next
  // entries would follow a hole.
  Result<bool> MissedHistory();
  Status InstallSnapshot();
  void MaybeSnapshotAndTrim();
  Result<GovernanceSnapshot> TakeSnapshot();
  void HeartbeatLoop();
  void KeepReplicaId();
  // Whether Redis holds the log this replica followed; adopts the log's
  // identity at the first meeting, and sets or clears log_reset_. False
  // also when Redis cannot be read.
  bool CheckLogIdentity();
  Status LogResetError() const;
  bool WaitFor(std::chrono::milliseconds period);  // false once stopping

  const ReplicaOptions options_;
  // Random per data dir: the owner of this replica's id claim, so that a
  // restart on the same data dir resumes its own claim and another
  // process with the same --replica-id is refused.
  const std::string instance_;
  journal::Journal* const journal_;
  store::Store* const store_;
  router::Router* const router_;
  const Hooks hooks_;
  GovernanceLog log_;
  ClaimStore claims_;
  LoadBoard load_board_;
  AppliedBoard applied_board_;
  SnapshotStore snapshots_;

  mutable Mutex mu_;
  std::condition_variable_any applied_cv_;
  std::condition_variable_any stop_cv_;
  StreamId applied_ KVGOV_GUARDED_BY(mu_);
  // What this replica's own entries came to, by write id, until their
  // writers collect them.
  struct OwnOutcome {
    StreamId at;
    Result<journal::Row> outcome;
  };
  std::map<std::string, OwnOutcome, std::less<>> own_rows_ KVGOV_GUARDED_BY(mu_);
  // The write ids applied within the window, by id and in stream order
  // (the applier's own; read under mu_ by nothing else).
  std::map<std::string, StreamId, std::less<>> write_ids_;
  std::deque<std::pair<StreamId, std::string>> write_id_order_;
  StreamId snapshot_taken_;                              // the applier's own
  std::chrono::steady_clock::time_point next_snapshot_;  // the applier's own
  bool stopping_ KVGOV_GUARDED_BY(mu_) = false;
  std::atomic<bool> connected_{false};
  std::atomic<bool> caught_up_{false};
  std::atomic<bool> log_reset_{false};
  std::string log_identity_ KVGOV_GUARDED_BY(mu_);  // the log followed; "" until first met
  std::atomic<bool> housekeeper_{false};
  std::atomic<bool> fatal_{false};
  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> duplicates_{0};
  std::atomic<uint64_t> snapshot_installs_{0};
  std::thread applier_;
  std::thread heartbeat_;
};

}  // namespace kvgov::replication
