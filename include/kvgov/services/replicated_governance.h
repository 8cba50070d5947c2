#pragma once

#include "kvgov/core/status.h"
#include "kvgov/replication/governance_log.h"
#include "kvgov/services/directive_driver.h"
#include "kvgov/services/lease_service.h"
#include "kvgov/services/quarantine_service.h"
#include "kvgov/services/tenant_salts.h"
#include "kvgov/services/worker_drains.h"

namespace kvgov::services {

/// A replica's side of the replicated governance log
/// (docs/formats/governance-log.md): the replica's hooks, which bring each
/// service's state up to an entry whose writes are already durable here
/// (Apply) and decide whether an entry applies at all (Guard).
///
/// Thread-safety: the replica calls both from its applier thread; every
/// service is thread-safe on its own.
class ReplicatedGovernance {
 public:
  /// Every collaborator must outlive this.
  ReplicatedGovernance(LeaseService* leases, QuarantineService* quarantines, TenantSalts* salts,
                       DirectiveDriver* directives, WorkerDrains* drains)
      : leases_(leases),
        quarantines_(quarantines),
        salts_(salts),
        directives_(directives),
        drains_(drains) {}

  /// Replica::ApplyHook: each governance write of the entry into the
  /// service whose record it is (leases, quarantines, drains, salt epochs,
  /// directives). Every write is a whole record, so applying one twice
  /// changes nothing; a token write is the replica's own file's.
  void Apply(const replication::LogEntry& entry);

  /// Replica::GuardHook: an entry's lease writes apply only as legal steps
  /// of the lease machine (LeaseService::GuardReplicated); no other record
  /// is guarded.
  Status Guard(const replication::LogEntry& entry) const { return leases_->GuardReplicated(entry); }

 private:
  LeaseService* const leases_;
  QuarantineService* const quarantines_;
  TenantSalts* const salts_;
  DirectiveDriver* const directives_;
  WorkerDrains* const drains_;
};

}  // namespace kvgov::services
