#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <map>
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
#include "kvgov/core/mutex.h"
#include "kvgov/governance/directive.h"
#include "kvgov/governance/directive_lifecycle.h"
#include "kvgov/index/block_key.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/governance/governance_gate.h"
#include "kvgov/ingest/engine_spec.h"
#include "kvgov/metrics/registry.h"
#include "kvgov/services/governance_recorder.h"
#include "kvgov/services/tenant_salts.h"
#include "kvgov/store/store.h"

namespace kvgov::connectors {
class InvalidationConnector;
}  // namespace kvgov::connectors
namespace kvgov::replication {
class Replica;
}  // namespace kvgov::replication

namespace kvgov::cert {
class IssuerKey;
}  // namespace kvgov::cert

namespace kvgov::services {

using governance::Directive;

/// What the driver reads of the engines kvgov follows.
struct EngineDirectory {
  /// The engine a worker ("id" or "id@dp_rank") belongs to; null for one
  /// no --engine names (it has no control API to call).
  std::function<const ingest::EngineSpec*(std::string_view worker)> engine_of;
  /// The last batch seq the worker's stream applied; -1 when unknown.
  std::function<int64_t(std::string_view worker)> stream_seq;
};

struct DirectiveDriverOptions {
  int64_t witness_timeout_ms = 0;  // --witness-timeout-ms
  int64_t claim_ttl_ms = 0;        // replicas: --claim-ttl-ms
};

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
class DirectiveDriver {
 public:
  /// Where directive records live in the governance column.
  static constexpr std::string_view kRecordPrefix = "invalidation/";

  struct Collaborators {
    const index::ResidencyIndex* index = nullptr;
    governance::GovernanceGate* gate = nullptr;
    TenantSalts* salts = nullptr;
    GovernanceRecorder* recorder = nullptr;  // and, for a replica, its claims
    const store::Store* store = nullptr;
    const cert::IssuerKey* issuer = nullptr;
    EngineDirectory engines;
  };

  /// Registers kvgov_certificates_total on `metrics` and starts the
  /// dispatcher. Every collaborator must outlive the driver.
  static Result<std::unique_ptr<DirectiveDriver>> Create(Collaborators collaborators,
                                                         metrics::Registry* metrics,
                                                         DirectiveDriverOptions options);
  ~DirectiveDriver();

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
  void TendClaims(replication::Replica& replica, int64_t now_ms);
  // True when this kvgov dispatches, witnesses and certifies the directive:
  // always for a single node, while it holds the claim for a replica.
  bool DrivesLocked(std::string_view id) const KVGOV_REQUIRES(mu_);
  // Applies what a stream showed (a removal, a clear, a restart) to every
  // directive this kvgov drives. Takes mu_.
  void WitnessAll(const governance::DirectiveEvent& seen) KVGOV_EXCLUDES(mu_);
  // Moves the gate's pending targets from `before` (may be null) to `after`.
  void SyncGateLocked(const Directive* before, const Directive& after) KVGOV_REQUIRES(mu_);
  // Applies `event` to directive `id` and performs the effects that need
  // no I/O: the gate's holds and the dispatcher's queue (calls and
  // certification are queued unless `defer` collects them, as Recover does).
  // Returns the record to journal, if the transition asks for one.
  // `id` must be known.
  std::optional<std::pair<Directive, std::string>> ApplyLocked(
      const std::string& id, const governance::DirectiveEvent& event, int64_t now_ms,
      std::vector<Work>* defer = nullptr) KVGOV_REQUIRES(mu_);
  void Certify(const std::string& id);
  // kvgov_certificates_total{outcome}: issued, or failed (minting, storing
  // or journaling the anchor failed; the directive stays witnessed).
  void CountCertificate(std::string_view outcome);
  // Journals the directive's current record.
  Status Record(const Directive& directive, std::string_view kind, std::string_view actor,
                std::span<const store::WriteOp> beside = {}) KVGOV_EXCLUDES(mu_);
  // Record, with a failure logged: the state stands in memory either way.
  void RecordOrLog(const Directive& directive, std::string_view kind);
  void SetGateLocked(const std::vector<governance::WorkerTargets>& targets, bool pending)
      KVGOV_REQUIRES(mu_);

  DirectiveDriver(Collaborators collaborators, DirectiveDriverOptions options);

  // The connector that reaches the owner's control API; FailedPrecondition
  // when its engine has none.
  Result<std::unique_ptr<connectors::InvalidationConnector>> ConnectorFor(
      std::string_view worker) const;

  const Collaborators with_;
  const DirectiveDriverOptions options_;
  metrics::CounterFamily* certificates_ = nullptr;  // {outcome}
  const governance::DirectiveLifecycle lifecycle_;
  mutable Mutex mu_;
  std::condition_variable_any wake_;
  std::map<std::string, Directive, std::less<>> directives_ KVGOV_GUARDED_BY(mu_);
  std::deque<Work> queue_ KVGOV_GUARDED_BY(mu_);
  std::set<std::string, std::less<>> driving_ KVGOV_GUARDED_BY(mu_);  // replicas: claimed here
  // What Recover found to do, until the streams run.
  std::vector<Work> recovered_ KVGOV_GUARDED_BY(mu_);
  int64_t next_claim_round_ms_ KVGOV_GUARDED_BY(mu_) = 0;
  bool stopping_ KVGOV_GUARDED_BY(mu_) = false;
  std::atomic<bool> cancel_{false};
  // Serializes revocations: each advances the epoch it read by exactly one.
  Mutex revoke_mu_;
  std::thread thread_;
};

}  // namespace kvgov::services
