#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvgov/core/status.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/router/router.h"

namespace kvgov::server {

struct Daemon;

/// The salt a request goes out under (docs/adr/0028).
struct RequestSalt {
  std::string salt;  // "" for an untenanted request that crosses no quarantine
  // The quarantines the prompt crosses under its ordinary salt, sorted;
  // empty when it goes out under that salt.
  std::vector<std::string> diverted_by;
  bool diverted() const { return !diverted_by.empty(); }
};

/// The tenant's salt for `model` in its current epoch ("" for no tenant).
std::string CurrentTenantSalt(const Daemon& daemon, std::string_view tenant,
                              std::string_view model);

/// The salt for a prompt: the tenant's current salt, or, when the prompt's
/// blocks under it cross a quarantine in force, a diversion of it that no
/// quarantined block was keyed under, the same for every request crossing
/// the same quarantines. Unavailable in the pathological case where a
/// diversion crosses quarantines too, several times over.
Result<RequestSalt> SaltForPrompt(const Daemon& daemon, std::string_view tenant,
                                  std::string_view model, std::string_view lora_name,
                                  std::span<const int64_t> tokens);

/// SaltForPrompt for a route request; a diverted one may then go only to
/// engines proven to key by the salt (RouteRequest::salt_must_be_honoured),
/// and each diversion is counted.
Result<RequestSalt> SaltRoute(Daemon& daemon, router::RouteRequest& request);

/// The blocks of `tenant`'s salts before `epochs` still resident, per
/// worker serving `model` ("": every model), with the blocks whose salt
/// cannot be told (ResidencyIndex::Residue): a revocation's residue.
std::vector<index::LineageResidue> RevocationResidue(const Daemon& daemon,
                                                     std::string_view tenant,
                                                     std::string_view model,
                                                     const router::SaltEpochs::TenantEpochs& epochs,
                                                     bool by_tier);

/// Where a tenant's salt epochs live in the store's governance column
/// (docs/formats/store.md): `salt_epoch/<tenant>`, the record below.
inline constexpr std::string_view kSaltEpochPrefix = "salt_epoch/";

/// {"tenant","all_models","models":{model: epoch}}.
std::string EncodeSaltEpochRecord(std::string_view tenant,
                                  const router::SaltEpochs::TenantEpochs& epochs);
/// Corruption naming what is wrong.
Result<std::pair<std::string, router::SaltEpochs::TenantEpochs>> DecodeSaltEpochRecord(
    std::string_view record);

/// Installs every recorded salt epoch at start-up. A record that does not
/// decode stops start-up (Corruption naming its key): skipping it would
/// give the tenant's revoked salts back.
Status RecoverSaltEpochs(Daemon& daemon);

/// The verdict of a diverted decision: a quarantine the request was kept
/// from, whatever the diverted chain earned.
void MarkDiverted(const RequestSalt& salt, router::RouteDecision& decision);
void MarkDiverted(bool diverted, router::RouteDecision& decision);

}  // namespace kvgov::server
