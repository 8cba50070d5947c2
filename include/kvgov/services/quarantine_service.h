#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/status.h"
#include "kvgov/governance/governance_gate.h"
#include "kvgov/index/block_key.h"
#include "kvgov/services/governance_recorder.h"
#include "kvgov/store/store.h"

namespace kvgov::services {

/// A quarantine in force, as stored: "quarantine/<id>" in the governance
/// column, a JSON object of these fields (docs/formats/store.md).
struct Quarantine {
  std::string id;
  std::string model;
  std::string tenant;  // "" for one imposed across tenants
  std::string reason;
  std::vector<index::BlockKey> keys;
  int64_t created_ms = 0;
};

/// Quarantines: a span whose blocks earn no route credit on any worker,
/// and whose requests are diverted to a salt of their own
/// (docs/adr/0028), until it is lifted. Each imposition and lift is
/// journaled with its record in one synced write (through the replicated
/// log for a replica) before the gate changes.
///
/// Thread-safe: the gate, the store and the recorder each are.
class QuarantineService {
 public:
  static constexpr std::string_view kRecordPrefix = "quarantine/";

  /// Every collaborator must outlive the service.
  QuarantineService(governance::GovernanceGate* gate, store::Store* store,
                    GovernanceRecorder* recorder)
      : gate_(gate), store_(store), recorder_(recorder) {}

  /// Quarantines `quarantine.keys` under a fresh id, journaled as
  /// "quarantine" by `actor`. Returns it with its id and `now_ms` filled.
  Result<Quarantine> Impose(std::string_view actor, Quarantine quarantine, int64_t now_ms);

  /// The quarantine in force with this id; NotFound when there is none or
  /// its record cannot be read.
  Result<Quarantine> Find(std::string_view id) const;

  /// Lifts `quarantine` (as Find returned it), journaled as
  /// "quarantine.lift" by `actor` for `reason`.
  Status Lift(std::string_view actor, const Quarantine& quarantine, std::string_view reason);

  /// Every quarantine in force, by id; records that cannot be read are
  /// left out.
  Result<std::vector<Quarantine>> InForce() const;

  /// Requests diverted by quarantine `id` since it was applied here.
  uint64_t Diverted(std::string_view id) const { return gate_->Diverted(id); }

  /// Puts the stored quarantines back into the gate at start. Corruption
  /// naming the key for a record that cannot be read: a quarantine must
  /// never be quietly dropped, which would re-enable credit.
  Status Recover();

  /// A quarantine record the replicated log carries (`value`, or nullopt
  /// for a lift), applied in log order on every replica.
  void ApplyReplicatedWrite(std::string_view id, const std::optional<std::string>& value);

 private:
  // `each(key, decoded record)` for every stored quarantine, in id order,
  // until it returns false; the store's error if the scan fails.
  Status ScanRecords(
      const std::function<bool(std::string_view key, Result<Quarantine> quarantine)>& each) const;

  governance::GovernanceGate* const gate_;
  store::Store* const store_;
  GovernanceRecorder* const recorder_;
};

}  // namespace kvgov::services
