#pragma once

// The cache salts kvgov forwards to engines, and the epochs that revoke a
// tenant's (docs/adr/0028). An engine keys its prefix cache by the salt on
// a chain's first block, so the salt kvgov chooses decides what KV a
// request can reuse:
//
//   salt(tenant)            = tag(tenant) || epoch part      32 hex digits
//   diverted(salt, ids)     = salt "." divert part           49 hex digits and a dot
//
// tag(tenant) is the first 16 hex digits of every salt a tenant ever gets,
// in every epoch and every diversion, so the blocks of a tenant's old
// salts are found by their chain root's extra key alone.

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/mutex.h"

namespace kvgov::router {

/// How often a tenant's salts were revoked: for every model at once, and
/// for one model. Both start at 0 and only ever grow.
struct SaltEpoch {
  uint64_t all_models = 0;
  uint64_t model = 0;
  friend bool operator==(const SaltEpoch&, const SaltEpoch&) = default;
};

/// The tenant's cache salt in epoch {0, 0}: HMAC-SHA256 of the tenant id
/// under the deployment's secret, 32 hex digits. The client never chooses
/// it, so one tenant cannot name another's salt.
std::string TenantCacheSalt(std::string_view secret, std::string_view tenant);

/// The tenant's salt for `model` in `epoch`: TenantCacheSalt in epoch {0,
/// 0}; afterwards the same first 16 digits (TenantSaltTag) and 16 that
/// depend on the epoch and the model. Empty for the empty tenant.
std::string TenantCacheSalt(std::string_view secret, std::string_view tenant,
                            std::string_view model, SaltEpoch epoch);

/// The 16 hex digits every salt of `tenant` starts with.
std::string TenantSaltTag(std::string_view secret, std::string_view tenant);

/// The salt of a request that crosses the quarantines `quarantine_ids`
/// (sorted, unique, not empty) under its ordinary salt `salt` ("" for an
/// untenanted request): one no engine has seen before the first such
/// request, the same for every later one crossing the same quarantines, so
/// the span is recomputed once and that clean copy is reused. It starts
/// with the ordinary salt (an untenanted request's with the salt of the
/// empty tenant), so a tenant's diverted blocks are its own.
std::string DivertedCacheSalt(std::string_view secret, std::string_view salt,
                              std::span<const std::string> quarantine_ids);

/// Whether a chain root's extra key (canonical JSON, e.g. `["<lora>","<salt>"]`)
/// carries a salt of the tenant tagged `tenant_tag` other than
/// `current_salt` or a diversion of it: a chain the tenant's revoked salts
/// keyed. False for anything unparsable as such.
bool KeyedByRevokedSalt(std::string_view root_extra_key, std::string_view tenant_tag,
                        std::string_view current_salt);

/// Every tenant's salt epochs. Absent tenants and models are at 0.
///
/// Thread-safe: one mutex.
class SaltEpochs {
 public:
  /// A tenant's epochs as the store and the governance log carry them.
  struct TenantEpochs {
    uint64_t all_models = 0;
    std::map<std::string, uint64_t, std::less<>> models;
    friend bool operator==(const TenantEpochs&, const TenantEpochs&) = default;
  };

  SaltEpoch Of(std::string_view tenant, std::string_view model) const;
  std::optional<TenantEpochs> Get(std::string_view tenant) const;

  /// The tenant's epochs after one more revocation of `model` ("": every
  /// model). Changes nothing here: the caller records it, then Sets it.
  TenantEpochs Advanced(std::string_view tenant, std::string_view model) const;

  /// Installs a recorded state. An epoch never goes back: each counter
  /// keeps the larger of the two (a replica may apply a record it made
  /// itself twice, or an older one after a newer).
  void Set(std::string_view tenant, const TenantEpochs& epochs);

  /// How many tenants were ever revoked.
  size_t size() const;

 private:
  mutable Mutex mu_;
  std::map<std::string, TenantEpochs, std::less<>> tenants_ KVGOV_GUARDED_BY(mu_);
};

}  // namespace kvgov::router
