#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "kvgov/codec/governance_api.h"
#include "kvgov/core/engine_events.h"
#include "kvgov/governance/directive.h"
#include "kvgov/governance/directive_lifecycle.h"
#include "kvgov/index/block_key.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/store/store.h"

namespace kvgov::server {

struct Daemon;

using governance::Directive;

/// Drives directives through governance::DirectiveLifecycle, which decides
/// every transition; this performs its effects: it calls the engines'
/// control APIs (src/connectors), journals each record in one synced write,
/// mints certificates, holds targets in the gate (no route credit from the
/// moment a directive is planned until they are witnessed gone) and, for
/// replicas, claims the directives it drives.
///
/// Thread-safety: one mutex guards the directives; one dispatcher thread
/// calls the engines and mints certificates (never under the mutex);
/// engine-stream threads report events through Observe.
class InvalidationManager {
 public:
  InvalidationManager(Daemon* daemon, int64_t witness_timeout_ms);
  ~InvalidationManager();

  /// A directive as Create opened it.
  struct Opened {
    Directive directive;
    /// For a tenant revocation, the residue it was opened over, per worker
    /// by tier, read before its first call: the dispatcher may flush it
    /// away before the caller could read it again. Empty otherwise.
    std::vector<index::LineageResidue> residue;
  };

  /// Plans, referees and journals a directive and queues it for dispatch.
  /// Returns the planned (or referee-denied) directive; NotFound when the
  /// model or worker is unknown. The first journal row names `actor`, who
  /// asked; the rows of its progress name kvgov.
  Result<Opened> Create(const InvalidationRequest& request, std::string_view actor);

  /// What a tenant revocation's old salts still hold now, per worker, by
  /// tier (ResidencyIndex::Residue): the residue its directive waits for.
  /// Empty for any other directive.
  std::vector<index::LineageResidue> Residue(const Directive& directive) const;

  /// An engine event about to be applied on `worker` at batch `seq`.
  void Observe(std::string_view worker, uint64_t seq, const EngineEvent& event);
  /// `worker`'s engine restarted (EngineStream's restart observer): its
  /// emptied cache witnesses the directives on it (RestartSeen).
  void ObserveRestart(std::string_view worker, uint64_t seq);

  /// Fails directives whose witnesses did not come in time.
  void Tick(int64_t now_ms);

  std::optional<Directive> Get(std::string_view id) const;

  /// Every directive this kvgov holds, the newest first.
  std::vector<Directive> NewestFirst() const;

  /// How many directives are in each state (every state present, 0 when
  /// none), for the kvgov_invalidations gauge.
  std::map<std::string, uint64_t, std::less<>> CountByState() const;

  /// Reads directives back after a restart: finished ones as they were;
  /// unfinished ones driven on (owners without an acknowledgement called
  /// again, removals witnessed from the engines' streams, which catch up
  /// through replay, within a fresh --witness-timeout-ms), or, for a
  /// replica, left for whichever replica claims them next. Targets not seen
  /// gone stay without route credit. Call before the engine streams start,
  /// so every removal they catch up on finds its directive. Corruption
  /// naming its key for a record that does not decode: start-up stops.
  Status Recover();

  /// Calls the owners Recover found without an acknowledgement; once the
  /// streams run, so each call's dispatch seq is the stream's.
  void CallRecoveredOwners();

  /// A directive record the replicated governance log carries, applied in
  /// log order on every replica. Ignored for a directive this replica
  /// drives: its own state is at least as new as any record it wrote.
  void ApplyReplicated(std::string_view record);

  void Stop();

 private:
  // What the dispatcher thread does for one directive: call these owners,
  // or certify.
  struct Work {
    std::string id;
    std::vector<size_t> call;
    bool certify = false;
  };

  // Create for scope "tenant": advances the tenant's salt epoch and opens a
  // directive over the residue of its earlier salts (docs/adr/0028).
  Result<Opened> CreateRevocation(const InvalidationRequest& request, std::string_view actor);
  // Claims (replicas), journals the planned record with `state` beside it
  // in one write, and queues its first work. The claim is released again
  // when the write fails.
  Status Open(governance::DirectiveLifecycle::Planned& planned, std::string_view actor,
              std::span<const store::WriteOp> state);
  // Per worker, the residue of the revocation's tenant on the workers it
  // covers; counts only unless `by_tier`.
  std::vector<index::LineageResidue> ResidueOf(const Directive& directive, bool by_tier) const;
  // Tick's part for revocations: each driven one's residue, read again.
  void WatchResidue(int64_t now_ms);
  void Run();
  void Dispatch(const Work& work);
  // Replicas: renews the claims on driven directives, lets go of finished
  // ones and those whose claim was lost, and takes over directives whose
  // driver stopped renewing.
  void TendClaims(int64_t now_ms);
  // True when this kvgov dispatches, witnesses and certifies the directive:
  // always for a single node, while it holds the claim for a replica.
  // REQUIRES: mu_ held.
  bool DrivesLocked(std::string_view id) const;
  // Applies what a stream showed (a removal, a clear, a restart) to every
  // directive this kvgov drives. Takes mu_.
  void WitnessAll(const governance::DirectiveEvent& seen);
  // Moves the gate's pending targets from `before` (may be null) to `after`.
  // REQUIRES: mu_ held.
  void SyncGateLocked(const Directive* before, const Directive& after);
  // Applies `event` to directive `id` and performs the effects that need
  // no I/O: the gate's holds and the dispatcher's queue (calls and
  // certification are queued unless `defer` collects them, as Recover does).
  // Returns the record to journal, if the transition asks for one.
  // REQUIRES: mu_ held; `id` is known.
  std::optional<std::pair<Directive, std::string>> ApplyLocked(
      const std::string& id, const governance::DirectiveEvent& event, int64_t now_ms,
      std::vector<Work>* defer = nullptr);
  void Certify(const std::string& id);
  // kvgov_certificates_total{outcome}: issued, or failed (minting, storing
  // or journaling the anchor failed; the directive stays witnessed).
  void CountCertificate(std::string_view outcome);
  // Journals the directive's current record. REQUIRES: mu_ not held.
  Status Record(const Directive& directive, std::string_view kind, std::string_view actor,
                std::span<const store::WriteOp> beside = {});
  // Record, with a failure logged: the state stands in memory either way.
  void RecordOrLog(const Directive& directive, std::string_view kind);
  // REQUIRES: mu_ held.
  void SetGateLocked(const std::vector<governance::WorkerTargets>& targets, bool pending);

  Daemon* const daemon_;
  const governance::DirectiveLifecycle lifecycle_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::map<std::string, Directive, std::less<>> directives_;  // guarded by mu_
  std::deque<Work> queue_;                          // guarded by mu_
  std::set<std::string, std::less<>> driving_;      // replicas: claimed here; guarded by mu_
  std::vector<Work> recovered_;  // what Recover found to do, until the streams run; guarded by mu_
  int64_t next_claim_round_ms_ = 0;                 // guarded by mu_
  bool stopping_ = false;                           // guarded by mu_
  std::atomic<bool> cancel_{false};
  // Serializes revocations: each advances the epoch it read by exactly one.
  std::mutex revoke_mu_;
  std::thread thread_;
};


}  // namespace kvgov::server
