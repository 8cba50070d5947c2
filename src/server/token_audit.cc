#include "server/token_audit.h"

#include <nlohmann/json.hpp>

#include "kvgov/log/log.h"
#include "server/daemon.h"

namespace kvgov::server {
namespace {

using Json = nlohmann::json;
using TokenSet = std::map<std::string, std::string, std::less<>>;

std::string EncodeTokenSet(const TokenSet& tokens) { return Json(tokens).dump(); }

// One row, with the set it leaves recorded in the same write.
Status JournalChange(Daemon& daemon, std::string_view kind, std::string_view name,
                     const std::string& payload, const TokenSet& after) {
  const store::WriteOp state{store::Column::kGovernance,
                             std::string(TokenAudit::kJournaledTokensKey), EncodeTokenSet(after)};
  return RecordGovernance(daemon, TokenAudit::kActor, kind, name, payload, {&state, 1}).status();
}

}  // namespace

Result<TokenAudit> TokenAudit::Load(const Daemon& daemon) {
  KVGOV_ASSIGN_OR_RETURN(std::optional<std::string> stored,
                         daemon.store->Get(store::Column::kGovernance, kJournaledTokensKey));
  TokenAudit audit;
  if (!stored.has_value()) return audit;
  const Json value = Json::parse(*stored, nullptr, /*allow_exceptions=*/false);
  if (!value.is_object()) {
    return Status::Corruption(std::string(kJournaledTokensKey) + ": not a JSON object");
  }
  for (const auto& [name, described] : value.items()) {
    if (!described.is_string()) {
      return Status::Corruption(std::string(kJournaledTokensKey) + ": '" + name +
                                "' is not a string");
    }
    audit.journaled_.emplace(name, described.get<std::string>());
  }
  return audit;
}

Status TokenAudit::CatchUp(Daemon& daemon) {
  daemon.auth->Refresh();
  const uint64_t generation = daemon.auth->generation();
  if (generation == seen_generation_) return Status::Ok();
  TokenSet in_force;
  for (const auth::TokenRecord& record : daemon.auth->Records()) {
    in_force.emplace(record.name, auth::DescribeTokenChange(record.name, &record));
  }
  // A token replaced under the same name (an edited file) is a revoke and
  // an add: the row says what it was and what it is.
  for (auto it = journaled_.begin(); it != journaled_.end();) {
    const auto now = in_force.find(it->first);
    if (now != in_force.end() && now->second == it->second) {
      ++it;
      continue;
    }
    TokenSet after = journaled_;
    after.erase(it->first);
    KVGOV_RETURN_IF_ERROR(JournalChange(daemon, "token.revoke", it->first,
                                        auth::DescribeTokenChange(it->first, nullptr), after));
    it = journaled_.erase(it);
  }
  for (const auto& [name, described] : in_force) {
    if (journaled_.contains(name)) continue;
    TokenSet after = journaled_;
    after.emplace(name, described);
    KVGOV_RETURN_IF_ERROR(JournalChange(daemon, "token.add", name, described, after));
    journaled_ = std::move(after);
  }
  seen_generation_ = generation;
  return Status::Ok();
}

void TokenAudit::CatchUpOrLog(Daemon& daemon) {
  Status caught_up = CatchUp(daemon);
  if (!caught_up.ok() && !failing_) {
    log::Line(log::Level::kError, "tokens.journal_failed").Field("error", caught_up.ToString());
  }
  failing_ = !caught_up.ok();
}

}  // namespace kvgov::server
