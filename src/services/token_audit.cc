#include "kvgov/services/token_audit.h"

#include <nlohmann/json.hpp>

#include "kvgov/core/digest.h"
#include "kvgov/log/log.h"

namespace kvgov::services {
namespace {

using Json = nlohmann::json;

TokenAudit::Recorded RecordOf(const auth::TokenRecord& record) {
  return {auth::DescribeTokenChange(record.name, &record), Sha256Hex(record.sha256).substr(0, 16)};
}

std::string EncodeTokenSet(const TokenAudit::TokenSet& tokens) {
  Json out = Json::object();
  for (const auto& [name, recorded] : tokens) {
    out[name] = {{"payload", recorded.payload},
                 {"secret_fingerprint", recorded.secret_fingerprint}};
  }
  return out.dump();
}

}  // namespace

Status TokenAudit::JournalChange(std::string_view kind, std::string_view name,
                                 const std::string& payload, const TokenSet& after) {
  const store::WriteOp state{store::Column::kGovernance, std::string(kJournaledTokensKey),
                             EncodeTokenSet(after)};
  return recorder_->Record(kActor, kind, name, payload, {&state, 1}).status();
}

Result<TokenAudit> TokenAudit::Load(auth::Authenticator* auth, const store::Store* store,
                                    GovernanceRecorder* recorder) {
  KVGOV_ASSIGN_OR_RETURN(std::optional<std::string> stored,
                         store->Get(store::Column::kGovernance, kJournaledTokensKey));
  TokenAudit audit(auth, recorder);
  audit.first_audit_ = !stored.has_value();
  if (!stored.has_value()) return audit;
  const Json value = Json::parse(*stored, nullptr, /*allow_exceptions=*/false);
  if (!value.is_object()) {
    return Status::Corruption(std::string(kJournaledTokensKey) + ": not a JSON object");
  }
  for (const auto& [name, recorded] : value.items()) {
    const auto payload = recorded.find("payload");
    const auto fingerprint = recorded.find("secret_fingerprint");
    if (!recorded.is_object() || payload == recorded.end() || !payload->is_string() ||
        fingerprint == recorded.end() || !fingerprint->is_string()) {
      return Status::Corruption(std::string(kJournaledTokensKey) + ": '" + name +
                                "' is not {payload, secret_fingerprint}");
    }
    audit.journaled_.emplace(
        name, Recorded{payload->get<std::string>(), fingerprint->get<std::string>()});
  }
  return audit;
}

Status TokenAudit::CatchUp() {
  auth_->Refresh();
  const uint64_t generation = auth_->generation();
  if (generation == seen_generation_) return Status::Ok();
  TokenSet in_force;
  for (const auth::TokenRecord& record : auth_->Records()) {
    in_force.emplace(record.name, RecordOf(record));
  }
  // A token replaced under the same name (an edited file, a new secret) is
  // a revoke and an add: the rows say what it was and what it is.
  for (auto it = journaled_.begin(); it != journaled_.end();) {
    const auto now = in_force.find(it->first);
    if (now != in_force.end() && now->second == it->second) {
      ++it;
      continue;
    }
    TokenSet after = journaled_;
    after.erase(it->first);
    KVGOV_RETURN_IF_ERROR(JournalChange("token.revoke", it->first,
                                        auth::DescribeTokenChange(it->first, nullptr), after));
    it = journaled_.erase(it);
  }
  // The tokens found by the first audit of a data dir were made before
  // kvgov journaled tokens: a baseline, not an add at this time.
  const std::string_view kind = first_audit_ ? "token.baseline" : "token.add";
  for (const auto& [name, recorded] : in_force) {
    if (journaled_.contains(name)) continue;
    TokenSet after = journaled_;
    after.emplace(name, recorded);
    KVGOV_RETURN_IF_ERROR(JournalChange(kind, name, recorded.payload, after));
    journaled_ = std::move(after);
  }
  first_audit_ = false;
  seen_generation_ = generation;
  return Status::Ok();
}

void TokenAudit::CatchUpOrLog() {
  Status caught_up = CatchUp();
  if (!caught_up.ok() && !failing_) {
    log::Line(log::Level::kError, "tokens.journal_failed").Field("error", caught_up.ToString());
  }
  failing_ = !caught_up.ok();
}

}  // namespace kvgov::services
