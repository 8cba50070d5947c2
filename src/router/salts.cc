#include "kvgov/router/salts.h"

#include <algorithm>

#include "kvgov/core/digest.h"

namespace kvgov::router {
namespace {

constexpr size_t kSaltDigits = 32;
constexpr size_t kTagDigits = 16;
constexpr size_t kDivertDigits = 16;

// Length-prefixed, so no two (tenant, model) pairs spell the same message.
std::string Framed(std::string_view text) {
  return std::to_string(text.size()) + ":" + std::string(text);
}

}  // namespace

std::string TenantCacheSalt(std::string_view secret, std::string_view tenant) {
  return HmacSha256Hex(secret, "kvgov.cache_salt.v1:" + std::string(tenant)).substr(0, kSaltDigits);
}

std::string TenantSaltTag(std::string_view secret, std::string_view tenant) {
  return TenantCacheSalt(secret, tenant).substr(0, kTagDigits);
}

std::string TenantCacheSalt(std::string_view secret, std::string_view tenant,
                            std::string_view model, SaltEpoch epoch) {
  if (tenant.empty()) return "";
  // Epoch {0, 0} keeps the salt kvgov always gave, so an upgrade does not
  // empty every tenant's cache.
  if (epoch == SaltEpoch{}) return TenantCacheSalt(secret, tenant);
  const std::string message = "kvgov.cache_salt.v2:" + Framed(tenant) + Framed(model) +
                              std::to_string(epoch.all_models) + ":" + std::to_string(epoch.model);
  return TenantSaltTag(secret, tenant) +
         HmacSha256Hex(secret, message).substr(0, kSaltDigits - kTagDigits);
}

std::string DivertedCacheSalt(std::string_view secret, std::string_view salt,
                              std::span<const std::string> quarantine_ids) {
  const std::string base = salt.empty() ? TenantCacheSalt(secret, "") : std::string(salt);
  std::string message = "kvgov.diverted_salt.v1:" + Framed(base);
  for (const std::string& id : quarantine_ids) message += Framed(id);
  return base + "." + HmacSha256Hex(secret, message).substr(0, kDivertDigits);
}

bool KeyedByRevokedSalt(std::string_view root_extra_key, std::string_view tenant_tag,
                        std::string_view current_salt) {
  if (tenant_tag.size() != kTagDigits) return false;
  const std::string opening = "\"" + std::string(tenant_tag);
  for (size_t at = root_extra_key.find(opening); at != std::string_view::npos;
       at = root_extra_key.find(opening, at + 1)) {
    const size_t begin = at + 1;
    const size_t end = root_extra_key.find('"', begin);
    if (end == std::string_view::npos) return false;
    const std::string_view element = root_extra_key.substr(begin, end - begin);
    // A salt, or a salt "." a diversion of it; anything else merely starts
    // with the same digits.
    if (element.size() < kSaltDigits) continue;
    if (element.size() != kSaltDigits && element[kSaltDigits] != '.') continue;
    if (element.substr(0, kSaltDigits) != current_salt) return true;
  }
  return false;
}

SaltEpoch SaltEpochs::Of(std::string_view tenant, std::string_view model) const {
  MutexLock lock(mu_);
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return {};
  auto by_model = it->second.models.find(model);
  return {it->second.all_models, by_model == it->second.models.end() ? 0 : by_model->second};
}

std::optional<SaltEpochs::TenantEpochs> SaltEpochs::Get(std::string_view tenant) const {
  MutexLock lock(mu_);
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return std::nullopt;
  return it->second;
}

SaltEpochs::TenantEpochs SaltEpochs::Advanced(std::string_view tenant,
                                              std::string_view model) const {
  TenantEpochs next = Get(tenant).value_or(TenantEpochs{});
  if (model.empty()) {
    ++next.all_models;
  } else {
    ++next.models[std::string(model)];
  }
  return next;
}

void SaltEpochs::Set(std::string_view tenant, const TenantEpochs& epochs) {
  MutexLock lock(mu_);
  TenantEpochs& held = tenants_[std::string(tenant)];
  held.all_models = std::max(held.all_models, epochs.all_models);
  for (const auto& [model, epoch] : epochs.models) {
    uint64_t& mine = held.models[model];
    mine = std::max(mine, epoch);
  }
}

size_t SaltEpochs::size() const {
  MutexLock lock(mu_);
  return tenants_.size();
}

}  // namespace kvgov::router
