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
#include "server/daemon.h"
#include "server/gateway.h"
#include "server/salting.h"
#include "kvgov/auth/entropy.h"
#include "server/http_api.h"
#include "server/invalidations.h"

namespace kvgov::server {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kLeasePrefix = "lease/";
constexpr std::string_view kQuarantinePrefix = "quarantine/";

std::string StateName(const std::optional<NIXLLeaseState>& state) {
  return state ? std::string(ToString(*state)) : "none";
}

// The engine hash a span digest names: 16 hex digits (as kvgov spells
// engine hashes in the envelope) or a decimal integer (as BlockStored
// publishes them).
std::optional<EngineHash> ParseEngineHash(std::string_view text) {
  EngineHash hash = 0;
  const char* end = text.data() + text.size();
  if (text.size() == 16) {
    auto [stop, error] = std::from_chars(text.data(), end, hash, 16);
    if (error == std::errc() && stop == end) return hash;
  }
  auto [stop, error] = std::from_chars(text.data(), end, hash, 10);
  if (!text.empty() && error == std::errc() && stop == end) return hash;
  return std::nullopt;
}

// The worker and blocks a lease pins: by token ids when the report names
// them, else the block the span digest names on the prefill worker. A span
// kvgov cannot resolve pins nothing it could credit.
std::pair<std::string, std::vector<index::BlockKey>> LeaseSpan(
    const Daemon& daemon, const NIXLLease& lease, const std::optional<SpanResidency>& residency) {
  std::string worker = residency && !residency->worker.empty() ? residency->worker
                                                               : lease.remote_engine;
  std::optional<index::WorkerResidency> holder = daemon.index.Worker(worker);
  if (!holder) return {worker, {}};
  if (residency && !residency->token_ids.empty()) {
    return {worker, index::RequestChain(daemon.index.hasher(),
                                        {holder->model, residency->lora_name, residency->group_idx},
                                        residency->cache_salt, residency->token_ids,
                                        holder->block_size)};
  }
  std::optional<EngineHash> hash = ParseEngineHash(lease.span_digest);
  if (!hash) return {worker, {}};
  const int64_t group = residency ? residency->group_idx : 0;
  Result<std::vector<index::BlockKey>> keys =
      daemon.index.KeysForEngineHashes(worker, std::span(&*hash, 1), group);
  return {worker, keys.ok() ? *keys : std::vector<index::BlockKey>{}};
}

std::string LeaseRecord(const NIXLLease& lease, std::string_view worker,
                        const std::vector<index::BlockKey>& keys) {
  return Json{{"lease", Json::parse(EncodeJson(lease))}, {"worker", worker}, {"keys", keys}}
      .dump();
}

Status PersistTransition(Daemon& daemon, std::string_view actor,
                         const governance::LeaseTransition& transition, const NIXLLease& lease,
                         std::string_view worker, const std::vector<index::BlockKey>& keys) {
  const store::WriteOp state{store::Column::kGovernance,
                             std::string(kLeasePrefix) + lease.lease_id,
                             LeaseRecord(lease, worker, keys)};
  const Json payload = {{"lease_id", lease.lease_id},
                        {"from", StateName(transition.from)},
                        {"to", std::string(ToString(transition.to))},
                        {"event", std::string(ToString(lease.event))},
                        {"remote_engine", lease.remote_engine},
                        {"blocks", keys.size()}};
  KVGOV_RETURN_IF_ERROR(
      RecordGovernance(daemon, actor, "lease.transition", lease.lease_id, payload.dump(),
                       {&state, 1})
          .status());
  daemon.lease_transitions
      ->WithLabels({StateName(transition.from), ToString(transition.to)})
      ->Inc();
  if (!transition.from.has_value()) {
    daemon.lease_grants->WithLabels({std::string(ToString(lease.witness))})->Inc();
  }
  return Status::Ok();
}

// The worker and keys a lease was persisted with.
std::pair<std::string, std::vector<index::BlockKey>> PersistedSpan(const Daemon& daemon,
                                                                   std::string_view lease_id) {
  Result<std::optional<std::string>> record = daemon.store->Get(
      store::Column::kGovernance, std::string(kLeasePrefix) + std::string(lease_id));
  if (!record.ok() || !record->has_value()) return {};
  try {
    Json json = Json::parse(**record);
    return {json.at("worker").get<std::string>(),
            json.at("keys").get<std::vector<index::BlockKey>>()};
  } catch (const Json::exception&) {
    return {};  // a lease whose span cannot be read pins nothing
  }
}

// Puts a stored lease record back into the lease table and the gate:
// recovery and the replicated log's apply alike. False for a value that is
// not a lease record.
bool RestoreLeaseRecord(Daemon& daemon, std::string_view record) {
  Json json = Json::parse(record, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("lease")) return false;
  Result<NIXLLease> lease = DecodeNIXLLeaseJson(json["lease"].dump(), JsonLimits{});
  if (!lease.ok()) return false;
  daemon.leases.Restore(*lease);
  try {
    daemon.gate.CoverLease(*lease, json.value("worker", ""),
                           json.value("keys", std::vector<index::BlockKey>{}));
  } catch (const Json::exception&) {
    daemon.gate.CoverLease(*lease, "", {});  // a span that cannot be read pins nothing
  }
  return true;
}

// The blocks a stored quarantine record names. Corruption when it cannot
// be read: a quarantine must never be quietly dropped.
Result<std::vector<index::BlockKey>> QuarantineKeys(std::string_view record) {
  Json json = Json::parse(record, nullptr, /*allow_exceptions=*/false);
  if (json.is_object() && json.contains("keys") && json["keys"].is_array()) {
    try {
      return json["keys"].get<std::vector<index::BlockKey>>();
    } catch (const Json::exception&) {
    }
  }
  return Status::Corruption("quarantine record without a readable keys array");
}

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
void WarnOfUnknownTenant(const Daemon& daemon, std::string_view tenant, Json& answer) {
  if (tenant.empty() || daemon.auth->NamesTenant(tenant) || daemon.tenants_seen.Contains(tenant)) {
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
uint64_t ResidentBlocks(const Daemon& daemon, std::span<const index::BlockKey> keys) {
  uint64_t longest = 0;
  for (const index::WorkerOverlap& overlap : daemon.index.Overlap(keys)) {
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
bool TokenizeSpan(Daemon& daemon, Request& body, httplib::Response& response) {
  if (body.prompt.empty() && body.messages.empty()) return true;
  const bool chat = !body.messages.empty();
  Result<std::vector<int64_t>> tokens = chat
                                            ? TokenizeMessages(daemon, body.model, body.messages)
                                            : TokenizePrompt(daemon, body.model, body.prompt);
  if (!tokens.ok()) {
    // Anything but a model no engine serves is the engine's failure: it was
    // unreachable, refused, or answered no token list.
    if (tokens.status().code() == StatusCode::kNotFound) {
      SendError(response, 404, tokens.status());
    } else {
      SendError(response, 502,
                Status::Unavailable(std::string("the engine could not tokenize the ") +
                                    (chat ? "messages" : "prompt") + ": " +
                                    tokens.status().message()));
    }
    return false;
  }
  body.token_ids = *std::move(tokens);
  body.prompt.clear();
  body.messages.clear();
  return true;
}

void HandleQuarantine(Daemon& daemon, const httplib::Request& request,
                      httplib::Response& response, const auth::Principal& caller) {
  if (!RequireJsonContentType(request, response)) return;
  Result<QuarantineRequest> body = DecodeQuarantineRequestJson(request.body, BodyLimits(daemon));
  if (!body.ok()) return SendBodyError(response, body.status());
  if (Status fitted = FitToCaller(caller, NamesSpanByTokens(*body), body->tenant); !fitted.ok()) {
    return SendError(response, 403, fitted);
  }
  const std::string_view token_field = !body->prompt.empty()     ? "prompt"
                                       : !body->messages.empty() ? "messages"
                                                                 : "token_ids";
  const bool tokenized = token_field != "token_ids";
  if (!TokenizeSpan(daemon, *body, response)) return;
  std::vector<index::BlockKey> keys;
  if (!body->token_ids.empty()) {
    int64_t block_size = 0;
    for (const index::WorkerResidency& worker : daemon.index.Workers()) {
      if (worker.model == body->model) block_size = worker.block_size;
    }
    if (block_size == 0) {
      return SendError(response, 404,
                        Status::NotFound("model: no registered worker serves '" + body->model +
                                         "'"));
    }
    const std::string salt = CurrentTenantSalt(daemon, body->tenant, body->model);
    keys = index::RequestChain(daemon.index.hasher(), {body->model, body->lora_name, 0}, salt,
                               body->token_ids, block_size);
    if (keys.empty()) {
      return SendError(response, 400,
                        Status::InvalidArgument(
                            "$." + std::string(token_field) + ": shorter than one block (" +
                            std::to_string(body->token_ids.size()) + " tokens, blocks of " +
                            std::to_string(block_size) + ")"));
    }
  } else {
    Result<std::vector<index::BlockKey>> found = daemon.index.KeysForEngineHashes(
        body->worker, std::span(&*body->block_hash, 1), body->group_idx);
    if (!found.ok()) return SendError(response, 404, found.status());
    keys = *found;
  }
  Result<std::string> id = auth::RandomHexId();
  if (!id.ok()) return SendError(response, 500, id.status());
  const Json record = {{"id", *id},          {"model", body->model}, {"tenant", body->tenant},
                       {"reason", body->reason}, {"keys", keys},
                       {"created_ms", clock::NowMillis()}};
  const store::WriteOp state{store::Column::kGovernance, std::string(kQuarantinePrefix) + *id,
                             record.dump()};
  if (Status recorded =
          RecordGovernance(daemon, ActorOf(caller), "quarantine", *id, record.dump(), {&state, 1})
              .status();
      !recorded.ok()) {
    return SendError(response, GovernanceWriteHttpStatus(recorded), recorded);
  }
  daemon.gate.Quarantine(*id, keys);
  Json answer = {{"id", *id},
                 {"blocks", keys.size()},
                 {"resident_blocks", ResidentBlocks(daemon, keys)},
                 {"reason", body->reason}};
  // What the text stood for: the caller sees what was quarantined.
  if (tokenized) answer["token_ids"] = body->token_ids;
  WarnOfUnknownTenant(daemon, body->tenant, answer);
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
    invalidation.reason = "quarantine " + *id + ": " + body->reason;
    Result<InvalidationManager::Opened> opened =
        daemon.invalidations->Create(invalidation, ActorOf(caller));
    if (!opened.ok()) {
      return SendError(response, GovernanceWriteHttpStatus(opened.status()), opened.status());
    }
    answer["invalidation"] = {{"id", opened->directive.id},
                              {"state", ToString(opened->directive.state)}};
  }
  SendJson(response, 200, answer);
}

Status RecoverGovernanceRecords(Daemon& daemon);

}  // namespace

namespace {

// A replica's lease report: the change is previewed here, recorded in the
// replicated log, and made on every replica (this one included) when the
// log's entry is applied (ApplyReplicatedGovernance), in log order.
Status ApplyReplicatedLeaseReport(Daemon& daemon, const NIXLLease& report,
                                  const std::optional<SpanResidency>& residency,
                                  std::string_view actor, int64_t now) {
  Result<governance::LeaseTable::Change> change = daemon.leases.Preview(report, now);
  if (!change.ok()) {
    daemon.lease_rejections->WithLabels({StatusCodeName(change.status().code())})->Inc();
    return change.status();
  }
  const NIXLLease& lease = change->next;
  std::pair<std::string, std::vector<index::BlockKey>> span =
      report.event == NIXLLeaseEvent::kCreate ? LeaseSpan(daemon, lease, residency)
                                              : PersistedSpan(daemon, lease.lease_id);
  if (!change->transition.has_value()) {
    // A heartbeat: state only, no journal row.
    const store::WriteOp state{store::Column::kGovernance,
                               std::string(kLeasePrefix) + lease.lease_id,
                               LeaseRecord(lease, span.first, span.second)};
    return RecordGovernance(daemon, actor, "", lease.lease_id, "", {&state, 1}).status();
  }
  return PersistTransition(daemon, actor, *change->transition, lease, span.first, span.second);
}

}  // namespace

void ApplyReplicatedGovernance(Daemon& daemon, const replication::LogEntry& entry) {
  for (const replication::LogWrite& write : entry.writes) {
    if (write.column != "governance") continue;  // tokens: the replica's own file
    const std::string_view key = write.key;
    if (key.starts_with(kLeasePrefix) && write.value.has_value()) {
      (void)RestoreLeaseRecord(daemon, *write.value);
    } else if (key.starts_with(kQuarantinePrefix)) {
      const std::string_view id = key.substr(kQuarantinePrefix.size());
      if (!write.value.has_value()) {
        (void)daemon.gate.Lift(id);  // lifted
      } else if (Result<std::vector<index::BlockKey>> keys = QuarantineKeys(*write.value);
                 keys.ok()) {
        daemon.gate.Quarantine(id, *keys);
      }
    } else if (key.starts_with("drain/")) {
      (void)daemon.status.SetDraining(key.substr(6), write.value.has_value());
    } else if (key.starts_with(kSaltEpochPrefix) && write.value.has_value()) {
      if (auto epochs = DecodeSaltEpochRecord(*write.value); epochs.ok()) {
        daemon.salt_epochs.Set(epochs->first, epochs->second);
      }
    } else if (key.starts_with("invalidation/") && write.value.has_value()) {
      daemon.invalidations->ApplyReplicated(*write.value);
    }
  }
}

Status GuardReplicatedGovernance(const Daemon& daemon, const replication::LogEntry& entry) {
  for (const replication::LogWrite& write : entry.writes) {
    if (write.column != "governance" || !write.key.starts_with(kLeasePrefix) ||
        !write.value.has_value()) {
      continue;
    }
    const std::string lease_id = write.key.substr(kLeasePrefix.size());
    auto decode = [](std::string_view record) -> Result<NIXLLease> {
      const Json json = Json::parse(record, nullptr, /*allow_exceptions=*/false);
      if (!json.is_object() || !json.contains("lease")) {
        return Status::InvalidArgument("not a lease record");
      }
      return DecodeNIXLLeaseJson(json["lease"].dump(), JsonLimits{});
    };
    Result<NIXLLease> next = decode(*write.value);
    if (!next.ok()) return next.status().WithContext("lease '" + lease_id + "'");
    // The record the log left: only the log writes lease records on a
    // replica, so every replica reads the same one here.
    Result<std::optional<std::string>> stored = daemon.store->Get(store::Column::kGovernance,
                                                                  write.key);
    if (!stored.ok()) return Status::Unavailable(stored.status().ToString());
    if (!stored->has_value()) {
      if (next->event == NIXLLeaseEvent::kCreate) continue;
      return Status::NotFound("lease '" + lease_id +
                              "' is not known to the governance log (never created, or "
                              "forgotten after it ended)");
    }
    if (next->event == NIXLLeaseEvent::kCreate) {
      return Status::AlreadyExists("lease '" + lease_id + "' was already created");
    }
    Result<NIXLLease> current = decode(**stored);
    if (!current.ok()) return current.status().WithContext("stored lease '" + lease_id + "'");
    // Ended by an event: nothing moves it again, not even a second expiry.
    if (current->event != NIXLLeaseEvent::kCreate &&
        current->event != NIXLLeaseEvent::kHeartbeat) {
      return Status::FailedPrecondition(
          "lease '" + lease_id + "' is " +
          std::string(ToString(LeaseStateAt(*current, entry.time_ms))) + "; event '" +
          std::string(ToString(next->event)) + "' cannot move it (a concurrent write ended it)");
    }
    // kvgov's own expiry only ends a lease whose time the log says is up:
    // a heartbeat applied meanwhile (through another replica) extended it.
    if (next->event == NIXLLeaseEvent::kExpiry && entry.actor == kDaemonActor &&
        LeaseStateAt(*current, entry.time_ms) != NIXLLeaseState::kExpired) {
      return Status::FailedPrecondition("lease '" + lease_id +
                                        "' is not due: a heartbeat extended it");
    }
    KVGOV_RETURN_IF_ERROR(ApplyNIXLLeaseEvent(*current, next->event, entry.time_ms).status());
  }
  return Status::Ok();
}

Status ApplyLeaseReport(Daemon& daemon, const NIXLLease& report,
                        const std::optional<SpanResidency>& residency, std::string_view actor) {
  const int64_t now = clock::NowMillis();
  if (daemon.replica) return ApplyReplicatedLeaseReport(daemon, report, residency, actor, now);
  Result<std::optional<governance::LeaseTransition>> applied = daemon.leases.Apply(report, now);
  if (!applied.ok()) {
    daemon.lease_rejections->WithLabels({StatusCodeName(applied.status().code())})->Inc();
    return applied.status();
  }
  std::optional<NIXLLease> lease = daemon.leases.Get(report.lease_id);
  if (!lease) return Status::Internal("lease vanished after it was applied");
  std::pair<std::string, std::vector<index::BlockKey>> span;
  if (report.event == NIXLLeaseEvent::kCreate) {
    span = LeaseSpan(daemon, *lease, residency);
    daemon.gate.CoverLease(*lease, span.first, span.second);
  } else {
    daemon.gate.UpdateLease(*lease);
    span = PersistedSpan(daemon, lease->lease_id);
  }
  if (!applied->has_value()) {
    // A heartbeat: no state change, but the new expiry must survive a crash.
    const store::WriteOp state{store::Column::kGovernance,
                               std::string(kLeasePrefix) + lease->lease_id,
                               LeaseRecord(*lease, span.first, span.second)};
    return daemon.store->Write({&state, 1}, /*sync=*/true);
  }
  return PersistTransition(daemon, actor, **applied, *lease, span.first, span.second);
}

void RecordLeaseTransitions(Daemon& daemon,
                            const std::vector<governance::LeaseTransition>& transitions) {
  for (const governance::LeaseTransition& transition : transitions) {
    std::optional<NIXLLease> lease = daemon.leases.Get(transition.lease_id);
    if (!lease) continue;
    daemon.gate.UpdateLease(*lease);
    auto [worker, keys] = PersistedSpan(daemon, lease->lease_id);
    if (Status recorded = PersistTransition(daemon, kDaemonActor, transition, *lease, worker, keys);
        !recorded.ok()) {
      log::Line(log::Level::kError, "governance.write_failed")
          .Field("kind", "lease.transition")
          .Field("subject", lease->lease_id)
          .Field("error", recorded.ToString());
    }
  }
}

void ForgetEndedLeases(Daemon& daemon, int64_t now_ms) {
  // The gate keeps an ended lease's blocks only while their worker holds them.
  daemon.gate.ForgetEnded(now_ms, [&daemon](std::string_view worker, index::BlockKey key) {
    return daemon.index.Holds(worker, key);
  });
  const std::vector<std::string> handoffs =
      daemon.leases.ForgetEndedBefore(now_ms - daemon.options.lease_retain_ms, now_ms - 60 * 1000);
  if (handoffs.empty()) return;
  std::vector<store::WriteOp> deletes;
  deletes.reserve(handoffs.size());
  for (const std::string& id : handoffs) {
    deletes.push_back({store::Column::kGovernance, std::string(kLeasePrefix) + id, std::nullopt});
  }
  // Not synced: a record a crash brings back is an ended lease, forgotten
  // again a minute after the restart.
  if (Status deleted = daemon.store->Write(deletes, /*sync=*/false); !deleted.ok()) {
    log::Line(log::Level::kError, "store.write_failed")
        .Field("what", "ended handoff leases")
        .Field("error", deleted.ToString());
  }
}

Status RecoverGovernance(Daemon& daemon) {
  // The records are kvgov's own and RocksDB checksums them, but a record of
  // the wrong shape must still fail start-up with an error, not a throw.
  try {
    return RecoverGovernanceRecords(daemon);
  } catch (const Json::exception& error) {
    return Status::Corruption(std::string("governance record of the wrong shape: ") +
                              error.what());
  }
}

namespace {

Status RecoverGovernanceRecords(Daemon& daemon) {
  KVGOV_RETURN_IF_ERROR(RecoverSaltEpochs(daemon));
  Status scanned = daemon.store->Scan(
      store::Column::kGovernance, kLeasePrefix, "lease0",
      [&](std::string_view key, std::string_view value) {
        if (!RestoreLeaseRecord(daemon, value)) {
          log::Line(log::Level::kWarn, "recovery.record_skipped")
              .Field("key", key)
              .Field("detail", "not a lease record");
        }
        return true;
      });
  KVGOV_RETURN_IF_ERROR(scanned);
  // A quarantine that cannot be read must not be skipped (that would
  // quietly re-enable credit): start-up refuses.
  Status unreadable;
  KVGOV_RETURN_IF_ERROR(daemon.store->Scan(
      store::Column::kGovernance, kQuarantinePrefix, "quarantine0",
      [&](std::string_view key, std::string_view value) {
        Result<std::vector<index::BlockKey>> keys = QuarantineKeys(value);
        if (!keys.ok()) {
          unreadable = keys.status().WithContext(std::string(key));
          return false;
        }
        daemon.gate.Quarantine(key.substr(kQuarantinePrefix.size()), *keys);
        return true;
      }));
  KVGOV_RETURN_IF_ERROR(unreadable);
  // A replica leaves expiry to whichever replica keeps house.
  if (!daemon.replicated()) {
    RecordLeaseTransitions(daemon, daemon.leases.ExpireDue(clock::NowMillis()));
  }
  return Status::Ok();
}

}  // namespace

namespace {

// A fleet-wide caller sees everything; a tenant-bound one its tenant's.
bool VisibleTo(const auth::Principal& caller, std::string_view tenant) {
  return caller.tenant.empty() || caller.tenant == tenant;
}

// Ends a quarantine: journaled with its reason and the quarantine it ends,
// then its blocks earn credit again (unless another quarantine names them).
void HandleQuarantineLift(Daemon& daemon, const httplib::Request& request,
                          httplib::Response& response, const auth::Principal& caller) {
  if (!RequireJsonContentType(request, response)) return;
  Result<QuarantineLiftRequest> body =
      DecodeQuarantineLiftRequestJson(request.body, BodyLimits(daemon));
  if (!body.ok()) return SendBodyError(response, body.status());
  const std::string id = request.matches[1].str();
  const std::string key = std::string(kQuarantinePrefix) + id;
  Result<std::optional<std::string>> stored = daemon.store->Get(store::Column::kGovernance, key);
  if (!stored.ok()) return SendError(response, 500, stored.status());
  const Json record = stored->has_value()
                          ? Json::parse(**stored, nullptr, /*allow_exceptions=*/false)
                          : Json();
  // Another tenant's quarantine answers as an unknown one.
  if (!record.is_object() || !VisibleTo(caller, record.value("tenant", ""))) {
    return SendError(response, 404, Status::NotFound("no quarantine '" + id + "' in force"));
  }
  const size_t blocks = record.contains("keys") ? record["keys"].size() : 0;
  const Json payload = {{"id", id},
                        {"model", record.value("model", "")},
                        {"tenant", record.value("tenant", "")},
                        {"blocks", blocks},
                        {"reason", body->reason},
                        {"quarantined_for", record.value("reason", "")}};
  const store::WriteOp state{store::Column::kGovernance, key, std::nullopt};
  if (Status recorded =
          RecordGovernance(daemon, ActorOf(caller), "quarantine.lift", id, payload.dump(),
                           {&state, 1})
              .status();
      !recorded.ok()) {
    return SendError(response, GovernanceWriteHttpStatus(recorded), recorded);
  }
  (void)daemon.gate.Lift(id);  // a replica has lifted it already, from the log
  SendJson(response, 200, {{"id", id}, {"lifted", true}, {"blocks", blocks},
                           {"reason", body->reason}});
}

// The tenant of the directive a stored certificate was minted for.
std::string CertificateTenant(const Daemon& daemon, std::string_view certificate) {
  const Json json = Json::parse(certificate, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("directive_id") || !json["directive_id"].is_string()) {
    return "";
  }
  std::optional<Directive> directive =
      daemon.invalidations->Get(json["directive_id"].get<std::string>());
  return directive ? directive->tenant : "";
}

constexpr size_t kListedDirectives = 100;

// The stored certificate with this id or unique id prefix that the caller
// may see: NotFound (another tenant's is not there for it), or
// InvalidArgument for a prefix of more than one.
Result<std::string> FindCertificate(const Daemon& daemon, const std::string& prefix,
                                    const auth::Principal& caller) {
  const std::string begin = "certificate/" + prefix;
  std::vector<std::string> found;
  // Every key with the prefix sorts before prefix + 'g'.
  KVGOV_RETURN_IF_ERROR(daemon.store->Scan(
      store::Column::kGovernance, begin, begin + "g",
      [&](std::string_view, std::string_view value) {
        if (VisibleTo(caller, CertificateTenant(daemon, value))) found.emplace_back(value);
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
Json VerifyStoredCertificate(Daemon& daemon, std::string_view text) {
  Json checks = Json::array();
  bool ok = true;
  auto add = [&](std::string_view name, const Status& status, const std::string& detail) {
    ok = ok && status.ok();
    checks.push_back({{"name", name}, {"ok", status.ok()},
                      {"detail", status.ok() ? detail : status.ToString()}});
  };
  Result<cert::DeletionCertificate> parsed = cert::ParseCertificateJson(text);
  if (!parsed.ok()) {
    add("parse", parsed.status(), "");
    return {{"ok", false}, {"checks", std::move(checks)}};
  }
  const std::string trusted[] = {daemon.issuer->public_key_hex()};
  for (const cert::CertificateCheck& check : cert::CheckCertificate(*parsed, trusted)) {
    add(check.name, check.status,
        check.name == "issuer" ? "signed by this kvgov's key " + daemon.issuer->key_id() : "holds");
  }
  const uint64_t seq = parsed->anchor.journal_seq;
  Status anchored = Status::Ok();
  Result<journal::VerifyReport> chain =
      daemon.chain_check.Verify(*daemon.store, daemon.journal->head_seq());
  if (!chain.ok()) {
    anchored = chain.status();
  } else if (chain->first_broken_seq.has_value() && *chain->first_broken_seq <= seq) {
    anchored = Status::Corruption("the journal breaks at seq " +
                                  std::to_string(*chain->first_broken_seq) + ": " +
                                  chain->problem);
  } else {
    Result<std::vector<journal::Row>> rows = daemon.journal->Read(seq, 1);
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

void RegisterGovernanceApi(httplib::Server& http, Daemon& daemon) {
  using auth::Role;
  http.Post("/v1/invalidations",
            Guard(daemon, Role::kAdmin,
                  [&daemon](const httplib::Request& request, httplib::Response& response,
                            const auth::Principal& caller) {
                    if (!RequireJsonContentType(request, response)) return;
                    Result<InvalidationRequest> body =
                        DecodeInvalidationRequestJson(request.body, BodyLimits(daemon));
                    if (!body.ok()) return SendBodyError(response, body.status());
                    // A tenant-bound token revokes its own tenant only.
                    const bool by_tokens = (body->scope.empty() && NamesSpanByTokens(*body)) ||
                                           body->scope == "tenant";
                    if (Status fitted = FitToCaller(caller, by_tokens, body->tenant);
                        !fitted.ok()) {
                      return SendError(response, 403, fitted);
                    }
                    const bool tokenized = !body->prompt.empty() || !body->messages.empty();
                    if (!TokenizeSpan(daemon, *body, response)) return;
                    Result<InvalidationManager::Opened> opened =
                        daemon.invalidations->Create(*body, ActorOf(caller));
                    if (!opened.ok()) {
                      return SendError(response,
                                       opened.status().code() == StatusCode::kNotFound
                                           ? 404
                                           : GovernanceWriteHttpStatus(opened.status()),
                                       opened.status());
                    }
                    const Directive& directive = opened->directive;
                    // The owners as GET /v1/invalidations/{id} shows them.
                    Json answer = {
                        {"id", directive.id},
                        {"state", ToString(directive.state)},
                        {"owners", Json::parse(EncodeDirectiveJson(directive))["owners"]}};
                    if (tokenized) answer["token_ids"] = body->token_ids;
                    if (directive.revocation) {
                      // What it was opened over, as its owners count it.
                      answer["unreachable_since_ms"] = directive.revocation->unreachable_since_ms;
                      answer["residue"] = ResidueJson(opened->residue);
                    }
                    WarnOfUnknownTenant(daemon, body->tenant, answer);
                    SendJson(response, 202, answer);
                  }));
  http.Get(R"(/v1/invalidations/([0-9a-f]{32}))",
           Guard(daemon, Role::kRead,
                 [&daemon](const httplib::Request& request, httplib::Response& response,
                           const auth::Principal& caller) {
                   std::optional<Directive> directive =
                       daemon.invalidations->Get(request.matches[1].str());
                   // Another tenant's directive answers as an unknown one:
                   // its existence is not the caller's to learn.
                   if (!directive || !VisibleTo(caller, directive->tenant)) {
                     return SendError(response, 404,
                                      Status::NotFound("no invalidation '" +
                                                       request.matches[1].str() + "'"));
                   }
                   Json answer = Json::parse(EncodeDirectiveJson(*directive));
                   if (directive->revocation) {
                     answer["residue"] = ResidueJson(daemon.invalidations->Residue(*directive));
                   }
                   SendJson(response, 200, answer);
                 }));
  // By its id, or a unique prefix of at least 8 hex digits (what the demo
  // and the logs print).
  http.Get(R"(/v1/certificates/([0-9a-f]{8,64}))",
           Guard(daemon, Role::kRead,
                 [&daemon](const httplib::Request& request, httplib::Response& response,
                           const auth::Principal& caller) {
                   Result<std::string> found =
                       FindCertificate(daemon, request.matches[1].str(), caller);
                   if (!found.ok()) return SendCertificateError(response, found.status());
                   response.status = 200;
                   response.set_content(*found, "application/json");
                 }));
  // The checks `kvgov cert verify` makes, made here against this kvgov's
  // own issuer key and journal: for the console, and for a caller that
  // cannot stop the daemon to read its store.
  http.Get(R"(/v1/certificates/([0-9a-f]{8,64})/verify)",
           Guard(daemon, Role::kRead,
                 [&daemon](const httplib::Request& request, httplib::Response& response,
                           const auth::Principal& caller) {
                   Result<std::string> found =
                       FindCertificate(daemon, request.matches[1].str(), caller);
                   if (!found.ok()) return SendCertificateError(response, found.status());
                   SendJson(response, 200, VerifyStoredCertificate(daemon, *found));
                 }));
  // Newest first; a tenant-bound caller sees its tenant's.
  http.Get("/v1/invalidations",
           Guard(daemon, Role::kRead,
                 [&daemon](const httplib::Request&, httplib::Response& response,
                           const auth::Principal& caller) {
                   Json out = Json::array();
                   for (const Directive& directive : daemon.invalidations->NewestFirst()) {
                     if (out.size() == kListedDirectives) break;
                     if (VisibleTo(caller, directive.tenant)) {
                       out.push_back(Json::parse(EncodeDirectiveJson(directive)));
                     }
                   }
                   SendJson(response, 200, {{"invalidations", std::move(out)}});
                 }));
  http.Get("/v1/leases",
           Guard(daemon, Role::kRead,
                 [&daemon](const httplib::Request&, httplib::Response& response,
                           const auth::Principal& caller) {
                   // Leases are transport infrastructure and carry no tenant:
                   // a tenant-bound caller sees none.
                   Json leases = Json::array();
                   if (caller.tenant.empty()) {
                     const int64_t now = clock::NowMillis();
                     for (const NIXLLease& lease : daemon.leases.All()) {
                       leases.push_back(LeaseJson(lease, now));
                     }
                   }
                   SendJson(response, 200, {{"leases", std::move(leases)}});
                 }));
  http.Post("/v1/quarantine",
            Guard(daemon, Role::kAdmin,
                  [&daemon](const httplib::Request& request, httplib::Response& response,
                            const auth::Principal& caller) {
                    HandleQuarantine(daemon, request, response, caller);
                  }));
  http.Post(R"(/v1/quarantines/([0-9a-f]{32})/lift)",
            Guard(daemon, Role::kAdmin,
                  [&daemon](const httplib::Request& request, httplib::Response& response,
                            const auth::Principal& caller) {
                    HandleQuarantineLift(daemon, request, response, caller);
                  }));
  http.Get("/v1/quarantines",
           Guard(daemon, Role::kRead,
                 [&daemon](const httplib::Request&, httplib::Response& response,
                           const auth::Principal& caller) {
                   Json out = Json::array();
                   Status scanned = daemon.store->Scan(
                       store::Column::kGovernance, kQuarantinePrefix, "quarantine0",
                       [&](std::string_view, std::string_view value) {
                         Json json = Json::parse(value, nullptr, /*allow_exceptions=*/false);
                         if (json.is_object() && VisibleTo(caller, json.value("tenant", ""))) {
                           json["blocks"] = json["keys"].size();
                           json.erase("keys");
                           json["diverted_requests"] =
                               daemon.gate.Diverted(json.value("id", ""));
                           out.push_back(std::move(json));
                         }
                         return true;
                       });
                   if (!scanned.ok()) return SendError(response, 500, scanned);
                   SendJson(response, 200, {{"quarantines", std::move(out)}});
                 }));
}

}  // namespace kvgov::server
