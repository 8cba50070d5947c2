#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvgov/core/status.h"
#include "kvgov/governance/governance_gate.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/router/salts.h"
#include "kvgov/store/store.h"

namespace kvgov::services {

/// The salt a request goes out under (docs/adr/0028).
struct RequestSalt {
  std::string salt;  // "" for an untenanted request that crosses no quarantine
  // The quarantines the prompt crosses under its ordinary salt, sorted;
  // empty when it goes out under that salt.
  std::vector<std::string> diverted_by;
  bool diverted() const { return !diverted_by.empty(); }
};

/// Tenants' cache salts (docs/adr/0028): a tenant's salt for a model is
/// keyed by kvgov's tenant secret and the tenant's revocation epochs, so
/// that a revocation makes every block cached under the earlier salts
/// unreachable; a prompt that crosses a quarantine goes out under a
/// diversion of its salt instead.
///
/// Store records: "salt_epoch/<tenant>" in the governance column,
/// {"tenant","all_models","models":{model: epoch}} (docs/formats/store.md).
///
/// Thread-safe: the epochs, the index and the gate each are; the secret is
/// fixed at construction and never logged.
class TenantSalts {
 public:
  static constexpr std::string_view kRecordPrefix = "salt_epoch/";

  /// `index` and `gate` must outlive the salts.
  TenantSalts(std::string secret, const index::ResidencyIndex* index,
              const governance::GovernanceGate* gate)
      : secret_(std::move(secret)), index_(index), gate_(gate) {}

  /// The tenant's salt for `model` in its current epoch ("" for no tenant).
  std::string Current(std::string_view tenant, std::string_view model) const;

  /// The salt for a prompt: the tenant's current salt, or, when the
  /// prompt's blocks under it cross a quarantine in force, a diversion of
  /// it that no quarantined block was keyed under, the same for every
  /// request crossing the same quarantines. Unavailable in the pathological
  /// case where a diversion crosses quarantines too, several times over.
  Result<RequestSalt> ForPrompt(std::string_view tenant, std::string_view model,
                                std::string_view lora_name, std::span<const int64_t> tokens) const;

  /// The blocks of `tenant`'s salts before `epochs` still resident, per
  /// worker serving `model` ("": every model), with the blocks whose salt
  /// cannot be told (ResidencyIndex::Residue): a revocation's residue.
  std::vector<index::LineageResidue> Residue(std::string_view tenant, std::string_view model,
                                             const router::SaltEpochs::TenantEpochs& epochs,
                                             bool by_tier) const;

  /// The tenant's epochs now, and after one more revocation of `model`
  /// ("": every model); Install makes them current once recorded.
  std::optional<router::SaltEpochs::TenantEpochs> Epochs(std::string_view tenant) const {
    return epochs_.Get(tenant);
  }
  router::SaltEpochs::TenantEpochs Advanced(std::string_view tenant, std::string_view model) const {
    return epochs_.Advanced(tenant, model);
  }
  void Install(std::string_view tenant, const router::SaltEpochs::TenantEpochs& epochs) {
    epochs_.Set(tenant, epochs);
  }

  /// The store write that records `epochs` as `tenant`'s.
  static store::WriteOp RecordOf(std::string_view tenant,
                                 const router::SaltEpochs::TenantEpochs& epochs);

  /// Installs every recorded epoch at start. Corruption naming its key for
  /// a record that does not decode: skipping it would give the tenant's
  /// revoked salts back.
  Status Recover(const store::Store& store);

  /// An epoch record the replicated log carries, applied in log order on
  /// every replica. False for a value that does not decode.
  bool ApplyReplicatedRecord(std::string_view record);

 private:
  const std::string secret_;  // never logged
  const index::ResidencyIndex* const index_;
  const governance::GovernanceGate* const gate_;
  router::SaltEpochs epochs_;
};

}  // namespace kvgov::services
