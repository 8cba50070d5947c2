#include "server/governance_api.h"

#include <httplib.h>

#include <charconv>
#include <nlohmann/json.hpp>

#include "kvgov/cert/certificate.h"
#include "kvgov/clock/clock.h"
#include "kvgov/codec/directive_record.h"
#include "kvgov/codec/governance_api.h"
#include "kvgov/core/digest.h"
#include "kvgov/index/block_key.h"
#include "kvgov/journal/journal.h"
#include "kvgov/log/log.h"
#include "server/access.h"
#include "kvgov/services/engines.h"
#include "server/route_state.h"
#include "server/route_http.h"

namespace kvgov::server {
namespace {

using governance::Directive;

using Json = nlohmann::json;

Json LeaseJson(const NIXLLease& lease, int64_t now_ms) {
  return {{"lease_id", lease.lease_id},
          {"state", std::string(ToString(LeaseStateAt(lease, now_ms)))},
          {"event", std::string(ToString(lease.event))},
          {"role", std::string(ToString(lease.role))},
          {"remote_engine", lease.remote_engine},
          {"span_digest", lease.span_digest},
          {"tokens", lease.tokens},
          {"granted_at_ms", lease.granted_at_ms},
          {"expires_at_ms", lease.expires_at_ms},
          {"ttl_ms", lease.ttl_ms},
          {"bytes_moved", lease.bytes_moved},
          {"witness", std::string(ToString(lease.witness))}};
}

// A governance write that names a tenant no token is bound to and no route
// was made for since start is most likely a typo: it is carried out (the
// tenant may come later), and the answer says so.
void WarnOfUnknownTenant(const GovernanceRoutes& routes, std::string_view tenant, Json& answer) {
  if (tenant.empty() || routes.access.auth->NamesTenant(tenant) ||
      routes.tenants_seen->Contains(tenant)) {
    return;
  }
  answer["warning"] = "tenant '" + std::string(tenant.substr(0, 128)) +
                      "' is unknown to kvgov: no token is bound to it and no route was made for "
                      "it since start; check the name";
}

// A revocation's residue now: {"blocks","unattributed","workers":[{"worker",
// "blocks","unattributed","by_tier":{tier: blocks}}]} (governance-api.md).
Json ResidueJson(const std::vector<index::LineageResidue>& residue) {
  Json workers = Json::array();
  uint64_t blocks = 0;
  uint64_t unattributed = 0;
  for (const index::LineageResidue& held : residue) {
    Json by_tier = Json::object();
    for (size_t t = 0; t < index::kIndexedTiers.size(); ++t) {
      if (held.matched_by_tier[t] > 0) {
        by_tier[std::string(ToString(index::kIndexedTiers[t]))] = held.matched_by_tier[t];
      }
    }
    workers.push_back({{"worker", held.worker},
                       {"blocks", held.matched_refs},
                       {"unattributed", held.unattributed_refs},
                       {"by_tier", std::move(by_tier)}});
    blocks += held.matched_refs;
    unattributed += held.unattributed_refs;
  }
  return {{"blocks", blocks}, {"unattributed", unattributed}, {"workers", std::move(workers)}};
}

// The longest leading run of `keys` some worker holds.
uint64_t ResidentBlocks(const GovernanceRoutes& routes, std::span<const index::BlockKey> keys) {
  uint64_t longest = 0;
  for (const index::WorkerOverlap& overlap : routes.index->Overlap(keys)) {
    longest = std::max(longest, overlap.blocks);
  }
  return longest;
}

// Whether the span is named by token ids, given or to be tokenized.
template <typename Request>
bool NamesSpanByTokens(const Request& body) {
  return !body.token_ids.empty() || !body.prompt.empty() || !body.messages.empty();
}

// A span named by prompt or messages, tokenized by an engine of the model as
// the gateway tokenizes a completion or a chat completion: `body.token_ids`
// then holds the ids and the text is cleared. False once the error is
// answered: 404 when no worker of the model has an engine URL, 502 when the
// engine cannot tokenize.
template <typename Request>
bool TokenizeSpan(const GovernanceRoutes& routes, Request& body, httplib::Response& response) {
  if (body.prompt.empty() && body.messages.empty()) return true;
  const bool chat = !body.messages.empty();
  Result<std::vector<int64_t>> tokens =
      chat ? routes.engines->TokenizeMessages(body.model, body.messages)
           : routes.engines->TokenizePrompt(body.model, body.prompt);
  if (!tokens.ok()) {
    // Anything but a model no engine serves is the engine's failure: it was
    // unreachable, refused, or answered no token list.
    if (tokens.status().code() == StatusCode::kNotFound) {
      SendError(response, 404, tokens.status());
    } else {
      SendError(
          response, 502,
          Status::Unavailable(std::string("the engine could not tokenize the ") +
                              (chat ? "messages" : "prompt") + ": " + tokens.status().message()));
    }
    return false;
  }
  body.token_ids = *std::move(tokens);
  body.prompt.clear();
  body.messages.clear();
  return true;
}

void HandleQuarantine(const GovernanceRoutes& routes, const httplib::Request& request,
                      httplib::Response& response, const auth::Principal& caller) {
  if (!RequireJsonContentType(request, response)) return;
  Result<QuarantineRequest> body =
      DecodeQuarantineRequestJson(request.body, routes.access.body_limits);
  if (!body.ok()) return SendBodyError(response, body.status());
  if (Status fitted = FitToCaller(caller, NamesSpanByTokens(*body), body->tenant); !fitted.ok()) {
    return SendError(response, 403, fitted);
  }
  const std::string_view token_field = !body->prompt.empty()     ? "prompt"
                                       : !body->messages.empty() ? "messages"
                                                                 : "token_ids";
  const bool tokenized = token_field != "token_ids";
  if (!TokenizeSpan(routes, *body, response)) return;
  std::vector<index::BlockKey> keys;
  if (!body->token_ids.empty()) {
    int64_t block_size = 0;
    for (const index::WorkerResidency& worker : routes.index->Workers()) {
      if (worker.model == body->model) block_size = worker.block_size;
    }
    if (block_size == 0) {
      return SendError(
          response, 404,
          Status::NotFound("model: no registered worker serves '" + body->model + "'"));
    }
    const std::string salt = routes.salts->Current(body->tenant, body->model);
    keys = index::RequestChain(routes.index->hasher(), {body->model, body->lora_name, 0}, salt,
                               body->token_ids, block_size);
    if (keys.empty()) {
      return SendError(
          response, 400,
          Status::InvalidArgument("$." + std::string(token_field) + ": shorter than one block (" +
                                  std::to_string(body->token_ids.size()) + " tokens, blocks of " +
                                  std::to_string(block_size) + ")"));
    }
  } else {
    Result<std::vector<index::BlockKey>> found = routes.index->KeysForEngineHashes(
        body->worker, std::span(&*body->block_hash, 1), body->group_idx);
    if (!found.ok()) return SendError(response, 404, found.status());
    keys = *found;
  }
  services::Quarantine wanted;
  wanted.model = body->model;
  wanted.tenant = body->tenant;
  wanted.reason = body->reason;
  wanted.keys = keys;
  Result<services::Quarantine> imposed =
      routes.quarantines->Impose(ActorOf(caller), std::move(wanted), clock::NowMillis());
  if (!imposed.ok()) {
    return SendError(response, GovernanceWriteHttpStatus(imposed.status()), imposed.status());
  }
  const std::string& id = imposed->id;
  Json answer = {{"id", id},
                 {"blocks", keys.size()},
                 {"resident_blocks", ResidentBlocks(routes, keys)},
                 {"reason", body->reason}};
  // What the text stood for: the caller sees what was quarantined.
  if (tokenized) answer["token_ids"] = body->token_ids;
  WarnOfUnknownTenant(routes, body->tenant, answer);
  if (body->invalidate) {
    // The same span, evicted from every engine that holds it.
    InvalidationRequest invalidation;
    invalidation.model = body->model;
    invalidation.tenant = body->tenant;
    invalidation.lora_name = body->lora_name;
    invalidation.token_ids = body->token_ids;
    invalidation.worker = body->worker;
    invalidation.block_hash = body->block_hash;
    invalidation.group_idx = body->group_idx;
    invalidation.reason = "quarantine " + id + ": " + body->reason;
    Result<services::DirectiveDriver::Opened> opened =
        routes.invalidations->Create(invalidation, ActorOf(caller));
    if (!opened.ok()) {
      return SendError(response, GovernanceWriteHttpStatus(opened.status()), opened.status());
    }
    answer["invalidation"] = {{"id", opened->directive.id},
                              {"state", ToString(opened->directive.state)}};
  }
  SendJson(response, 200, answer);
}

}  // namespace

namespace {

// A fleet-wide caller sees everything; a tenant-bound one its tenant's.
bool VisibleTo(const auth::Principal& caller, std::string_view tenant) {
  return caller.tenant.empty() || caller.tenant == tenant;
}

// Ends a quarantine: journaled with its reason and the quarantine it ends,
// then its blocks earn credit again (unless another quarantine names them).
void HandleQuarantineLift(const GovernanceRoutes& routes, const httplib::Request& request,
                          httplib::Response& response, const auth::Principal& caller) {
  if (!RequireJsonContentType(request, response)) return;
  Result<QuarantineLiftRequest> body =
      DecodeQuarantineLiftRequestJson(request.body, routes.access.body_limits);
  if (!body.ok()) return SendBodyError(response, body.status());
  Result<services::Quarantine> found = routes.quarantines->Find(request.matches[1].str());
  // Another tenant's quarantine answers as an unknown one.
  if (found.ok() && !VisibleTo(caller, found->tenant)) {
    found = Status::NotFound("no quarantine '" + request.matches[1].str() + "' in force");
  }
  if (!found.ok()) {
    return SendError(response, found.status().code() == StatusCode::kNotFound ? 404 : 500,
                     found.status());
  }
  if (Status lifted = routes.quarantines->Lift(ActorOf(caller), *found, body->reason);
      !lifted.ok()) {
    return SendError(response, GovernanceWriteHttpStatus(lifted), lifted);
  }
  SendJson(response, 200,
           {{"id", found->id},
            {"lifted", true},
            {"blocks", found->keys.size()},
            {"reason", body->reason}});
}

// The tenant of the directive a stored certificate was minted for.
std::string CertificateTenant(const GovernanceRoutes& routes, std::string_view certificate) {
  const Json json = Json::parse(certificate, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("directive_id") || !json["directive_id"].is_string()) {
    return "";
  }
  std::optional<Directive> directive =
      routes.invalidations->Get(json["directive_id"].get<std::string>());
  return directive ? directive->tenant : "";
}

constexpr size_t kListedDirectives = 100;

// The stored certificate with this id or unique id prefix that the caller
// may see: NotFound (another tenant's is not there for it), or
// InvalidArgument for a prefix of more than one.
Result<std::string> FindCertificate(const GovernanceRoutes& routes, const std::string& prefix,
                                    const auth::Principal& caller) {
  const std::string begin = "certificate/" + prefix;
  std::vector<std::string> found;
  // Every key with the prefix sorts before prefix + 'g'.
  KVGOV_RETURN_IF_ERROR(
      routes.store->Scan(store::Column::kGovernance, begin, begin + "g",
                         [&](std::string_view, std::string_view value) {
                           if (VisibleTo(caller, CertificateTenant(routes, value)))
                             found.emplace_back(value);
                           return found.size() < 2;
                         }));
  if (found.empty()) return Status::NotFound("no certificate '" + prefix + "'");
  if (found.size() > 1) {
    return Status::InvalidArgument("'" + prefix +
                                   "' is the prefix of more than one certificate; give more of "
                                   "the id");
  }
  return std::move(found.front());
}

void SendCertificateError(httplib::Response& response, const Status& error) {
  switch (error.code()) {
    case StatusCode::kNotFound:
      return SendError(response, 404, error);
    case StatusCode::kInvalidArgument:
      return SendError(response, 400, error);
    default:
      return SendError(response, 500, error);
  }
}

// Each check's name, outcome and detail: the certificate's own (schema,
// fields, id, signature, issuer against this kvgov's key) and its anchor
// (the journal chain verifies through the anchor row, which matches).
Json VerifyStoredCertificate(const GovernanceRoutes& routes, std::string_view text) {
  Json checks = Json::array();
  bool ok = true;
  auto add = [&](std::string_view name, const Status& status, const std::string& detail) {
    ok = ok && status.ok();
    checks.push_back({{"name", name},
                      {"ok", status.ok()},
                      {"detail", status.ok() ? detail : status.ToString()}});
  };
  Result<cert::DeletionCertificate> parsed = cert::ParseCertificateJson(text);
  if (!parsed.ok()) {
    add("parse", parsed.status(), "");
    return {{"ok", false}, {"checks", std::move(checks)}};
  }
  const std::string trusted[] = {routes.issuer->public_key_hex()};
  for (const cert::CertificateCheck& check : cert::CheckCertificate(*parsed, trusted)) {
    add(check.name, check.status,
        check.name == "issuer" ? "signed by this kvgov's key " + routes.issuer->key_id() : "holds");
  }
  const uint64_t seq = parsed->anchor.journal_seq;
  Status anchored = Status::Ok();
  Result<journal::VerifyReport> chain =
      routes.chain_check->Verify(*routes.store, routes.journal->head_seq());
  if (!chain.ok()) {
    anchored = chain.status();
  } else if (chain->first_broken_seq.has_value() && *chain->first_broken_seq <= seq) {
    anchored = Status::Corruption("the journal breaks at seq " +
                                  std::to_string(*chain->first_broken_seq) + ": " + chain->problem);
  } else {
    Result<std::vector<journal::Row>> rows = routes.journal->Read(seq, 1);
    if (!rows.ok()) {
      anchored = rows.status();
    } else if (rows->empty() || rows->front().seq != seq) {
      anchored = Status::NotFound("journal row " + std::to_string(seq) + " is not there");
    } else {
      const journal::Row& row = rows->front();
      anchored = cert::VerifyAnchor(*parsed, row.seq, row.prev_hash, row.hash, row.subject);
    }
  }
  add("anchor", anchored,
      "journal row " + std::to_string(seq) + " matches, and the chain verifies through it");
  return {{"ok", ok}, {"certificate_id", parsed->certificate_id}, {"checks", std::move(checks)}};
}

}  // namespace

void RegisterGovernanceApi(httplib::Server& http, const GovernanceRoutes& routes) {
  using auth::Role;
  http.Post(
      "/v1/invalidations",
      Guard(routes.access, Role::kAdmin,
            [routes](const httplib::Request& request, httplib::Response& response,
                     const auth::Principal& caller) {
              if (!RequireJsonContentType(request, response)) return;
              Result<InvalidationRequest> body =
                  DecodeInvalidationRequestJson(request.body, routes.access.body_limits);
              if (!body.ok()) return SendBodyError(response, body.status());
              // A tenant-bound token revokes its own tenant only.
              const bool by_tokens =
                  (body->scope.empty() && NamesSpanByTokens(*body)) || body->scope == "tenant";
              if (Status fitted = FitToCaller(caller, by_tokens, body->tenant); !fitted.ok()) {
                return SendError(response, 403, fitted);
              }
              const bool tokenized = !body->prompt.empty() || !body->messages.empty();
              if (!TokenizeSpan(routes, *body, response)) return;
              Result<services::DirectiveDriver::Opened> opened =
                  routes.invalidations->Create(*body, ActorOf(caller));
              if (!opened.ok()) {
                return SendError(response,
                                 opened.status().code() == StatusCode::kNotFound
                                     ? 404
                                     : GovernanceWriteHttpStatus(opened.status()),
                                 opened.status());
              }
              const Directive& directive = opened->directive;
              // The owners as GET /v1/invalidations/{id} shows them.
              Json answer = {{"id", directive.id},
                             {"state", ToString(directive.state)},
                             {"owners", Json::parse(EncodeDirectiveJson(directive))["owners"]}};
              if (tokenized) answer["token_ids"] = body->token_ids;
              if (directive.revocation) {
                // What it was opened over, as its owners count it.
                answer["unreachable_since_ms"] = directive.revocation->unreachable_since_ms;
                answer["residue"] = ResidueJson(opened->residue);
              }
              WarnOfUnknownTenant(routes, body->tenant, answer);
              SendJson(response, 202, answer);
            }));
  http.Get(R"(/v1/invalidations/([0-9a-f]{32}))",
           Guard(routes.access, Role::kRead,
                 [routes](const httplib::Request& request, httplib::Response& response,
                          const auth::Principal& caller) {
                   std::optional<Directive> directive =
                       routes.invalidations->Get(request.matches[1].str());
                   // Another tenant's directive answers as an unknown one:
                   // its existence is not the caller's to learn.
                   if (!directive || !VisibleTo(caller, directive->tenant)) {
                     return SendError(
                         response, 404,
                         Status::NotFound("no invalidation '" + request.matches[1].str() + "'"));
                   }
                   Json answer = Json::parse(EncodeDirectiveJson(*directive));
                   if (directive->revocation) {
                     answer["residue"] = ResidueJson(routes.invalidations->Residue(*directive));
                   }
                   SendJson(response, 200, answer);
                 }));
  // By its id, or a unique prefix of at least 8 hex digits (what the demo
  // and the logs print).
  http.Get(R"(/v1/certificates/([0-9a-f]{8,64}))",
           Guard(routes.access, Role::kRead,
                 [routes](const httplib::Request& request, httplib::Response& response,
                          const auth::Principal& caller) {
                   Result<std::string> found =
                       FindCertificate(routes, request.matches[1].str(), caller);
                   if (!found.ok()) return SendCertificateError(response, found.status());
                   response.status = 200;
                   response.set_content(*found, "application/json");
                 }));
  // The checks `kvgov cert verify` makes, made here against this kvgov's
  // own issuer key and journal: for the console, and for a caller that
  // cannot stop the daemon to read its store.
  http.Get(R"(/v1/certificates/([0-9a-f]{8,64})/verify)",
           Guard(routes.access, Role::kRead,
                 [routes](const httplib::Request& request, httplib::Response& response,
                          const auth::Principal& caller) {
                   Result<std::string> found =
                       FindCertificate(routes, request.matches[1].str(), caller);
                   if (!found.ok()) return SendCertificateError(response, found.status());
                   SendJson(response, 200, VerifyStoredCertificate(routes, *found));
                 }));
  // Newest first; a tenant-bound caller sees its tenant's.
  http.Get("/v1/invalidations",
           Guard(routes.access, Role::kRead,
                 [routes](const httplib::Request&, httplib::Response& response,
                          const auth::Principal& caller) {
                   Json out = Json::array();
                   for (const Directive& directive : routes.invalidations->NewestFirst()) {
                     if (out.size() == kListedDirectives) break;
                     if (VisibleTo(caller, directive.tenant)) {
                       out.push_back(Json::parse(EncodeDirectiveJson(directive)));
                     }
                   }
                   SendJson(response, 200, {{"invalidations", std::move(out)}});
                 }));
  http.Get("/v1/leases", Guard(routes.access, Role::kRead,
                               [routes](const httplib::Request&, httplib::Response& response,
                                        const auth::Principal& caller) {
                                 // Leases are transport infrastructure and carry no tenant:
                                 // a tenant-bound caller sees none.
                                 Json leases = Json::array();
                                 if (caller.tenant.empty()) {
                                   const int64_t now = clock::NowMillis();
                                   for (const NIXLLease& lease : routes.leases->All()) {
                                     leases.push_back(LeaseJson(lease, now));
                                   }
                                 }
                                 SendJson(response, 200, {{"leases", std::move(leases)}});
                               }));
  http.Post("/v1/quarantine",
            Guard(routes.access, Role::kAdmin,
                  [routes](const httplib::Request& request, httplib::Response& response,
                           const auth::Principal& caller) {
                    HandleQuarantine(routes, request, response, caller);
                  }));
  http.Post(R"(/v1/quarantines/([0-9a-f]{32})/lift)",
            Guard(routes.access, Role::kAdmin,
                  [routes](const httplib::Request& request, httplib::Response& response,
                           const auth::Principal& caller) {
                    HandleQuarantineLift(routes, request, response, caller);
                  }));
  http.Get(
      "/v1/quarantines",
      Guard(routes.access, Role::kRead,
            [routes](const httplib::Request&, httplib::Response& response,
                     const auth::Principal& caller) {
              Result<std::vector<services::Quarantine>> in_force = routes.quarantines->InForce();
              if (!in_force.ok()) return SendError(response, 500, in_force.status());
              Json out = Json::array();
              for (const services::Quarantine& quarantine : *in_force) {
                if (!VisibleTo(caller, quarantine.tenant)) continue;
                out.push_back({{"id", quarantine.id},
                               {"model", quarantine.model},
                               {"tenant", quarantine.tenant},
                               {"reason", quarantine.reason},
                               {"created_ms", quarantine.created_ms},
                               {"blocks", quarantine.keys.size()},
                               {"diverted_requests", routes.quarantines->Diverted(quarantine.id)}});
              }
              SendJson(response, 200, {{"quarantines", std::move(out)}});
            }));
}

}  // namespace kvgov::server
