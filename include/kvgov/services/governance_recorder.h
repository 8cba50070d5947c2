#pragma once

#include <atomic>
#include <span>
#include <string_view>

#include "kvgov/core/status.h"
#include "kvgov/journal/journal.h"
#include "kvgov/store/store.h"

namespace kvgov::replication {
class Replica;
}  // namespace kvgov::replication

namespace kvgov::services {

/// The journal's actor for what kvgov decides itself: a lease's expiry, a
/// directive's progress, a certificate, the start-up record.
inline constexpr std::string_view kDaemonActor = "kvgov";

/// Records governance changes, the one way every service writes one: a
/// journal row and, in the same synced write, the state it changes; for one
/// of several replicas, an entry of the replicated log instead
/// (Replica::Record), which writes both on every replica. The answer to the
/// request that made a change may leave only once Record returned OK.
///
/// Thread-safe: the journal and the replica are; the replica is published
/// once, atomically, while writers may already record.
class GovernanceRecorder {
 public:
  /// `journal` must outlive the recorder. `replicated`: this kvgov is one of
  /// several replicas, which must never append to its journal directly (a
  /// row appended here and not through the log would fork the chain), so it
  /// records nothing until AttachReplica.
  GovernanceRecorder(journal::Journal* journal, bool replicated)
      : journal_(journal), replicated_(replicated) {}

  /// From now on, changes go through `replica`'s log. Called once, after
  /// the replica caught up; `replica` must outlive the recorder.
  void AttachReplica(replication::Replica* replica) {
    replica_.store(replica, std::memory_order_release);
  }

  /// True for one of several replicas, from the start (before AttachReplica).
  bool replicated() const { return replicated_; }
  /// True once changes go through the replicated log: the state they change
  /// is then made when the log's entry is applied, on every replica alike.
  bool through_log() const { return replica() != nullptr; }
  /// The replica once attached (its claims are the directives' too); null
  /// for a single node.
  replication::Replica* replica() const { return replica_.load(std::memory_order_acquire); }

  /// Records one change: a row of `kind` about `subject`, attributed to
  /// `actor`, with `state` written beside it. An empty `kind` writes the
  /// state alone (a lease heartbeat: no row). Unavailable for a replica
  /// whose log is not followed yet or cannot be reached; ResourceExhausted
  /// for a row over the journal's limit; the store's error otherwise.
  Result<journal::Row> Record(std::string_view actor, std::string_view kind,
                              std::string_view subject, std::string_view payload,
                              std::span<const store::WriteOp> state);

 private:
  journal::Journal* const journal_;
  const bool replicated_;
  std::atomic<replication::Replica*> replica_{nullptr};
};

}  // namespace kvgov::services
