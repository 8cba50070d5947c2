#include "kvgov/services/lease_service.h"

#include <charconv>
#include <nlohmann/json.hpp>
#include <utility>

#include "kvgov/codec/governance_api.h"
#include "kvgov/index/block_key.h"
#include "kvgov/log/log.h"

namespace kvgov::services {
namespace {

using Json = nlohmann::json;

std::string StateName(const std::optional<NIXLLeaseState>& state) {
  return state ? std::string(ToString(*state)) : "none";
}

std::string RecordKey(std::string_view lease_id) {
  return std::string(LeaseService::kRecordPrefix) + std::string(lease_id);
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

std::string LeaseRecord(const NIXLLease& lease, std::string_view worker,
                        const std::vector<index::BlockKey>& keys) {
  return Json{{"lease", Json::parse(EncodeJson(lease))}, {"worker", worker}, {"keys", keys}}.dump();
}

// A stored lease record: the lease, and the span it pins (empty when the
// span cannot be read: it then pins nothing).
struct StoredLease {
  NIXLLease lease;
  std::string worker;
  std::vector<index::BlockKey> keys;
};

// What LeaseRecord wrote; InvalidArgument for any other value.
Result<StoredLease> DecodeLeaseRecord(std::string_view record) {
  const Json json = Json::parse(record, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("lease")) {
    return Status::InvalidArgument("not a lease record");
  }
  KVGOV_ASSIGN_OR_RETURN(NIXLLease lease, DecodeNIXLLeaseJson(json["lease"].dump(), JsonLimits{}));
  StoredLease stored{.lease = std::move(lease), .worker = "", .keys = {}};
  try {
    stored.worker = json.value("worker", "");
    stored.keys = json.value("keys", std::vector<index::BlockKey>{});
  } catch (const Json::exception&) {
    stored.worker.clear();
    stored.keys.clear();
  }
  return stored;
}

}  // namespace

Result<std::unique_ptr<LeaseService>> LeaseService::Create(
    governance::GovernanceGate* gate, const index::ResidencyIndex* index, store::Store* store,
    GovernanceRecorder* recorder, metrics::Registry* metrics, LeaseServiceOptions options) {
  std::unique_ptr<LeaseService> service(new LeaseService(gate, index, store, recorder, options));
  KVGOV_ASSIGN_OR_RETURN(service->transitions_,
                         metrics->AddCounter({"kvgov_lease_transitions_total",
                                              "NIXL lease state changes; from=none is a grant.",
                                              {"from", "to"}}));
  KVGOV_ASSIGN_OR_RETURN(service->rejections_,
                         metrics->AddCounter({"kvgov_lease_rejections_total",
                                              "Lease events refused, by reason (a "
                                              "failed_precondition is an attempt to revive an "
                                              "ended lease).",
                                              {"reason"}}));
  KVGOV_ASSIGN_OR_RETURN(
      service->grants_,
      metrics->AddCounter({"kvgov_lease_grants_total",
                           "NIXL leases begun, by witness: handoff (kvgov's gateway ran the "
                           "handoff and read the pin from the prefill answer) or reported (a "
                           "transport or engine reported it).",
                           {"witness"}}));
  for (const auto& [value, spelling] : EnumSpelling<NIXLLeaseWitness>::kValues) {
    service->grants_->WithLabels({std::string(spelling)});
  }
  return service;
}

Status LeaseService::ApplyReport(const NIXLLease& report,
                                 const std::optional<SpanResidency>& residency,
                                 std::string_view actor, int64_t now_ms) {
  if (recorder_->through_log()) return ApplyThroughLog(report, residency, actor, now_ms);
  Result<std::optional<governance::LeaseTransition>> applied = table_.Apply(report, now_ms);
  if (!applied.ok()) {
    Reject(applied.status());
    return applied.status();
  }
  std::optional<NIXLLease> lease = table_.Get(report.lease_id);
  if (!lease) return Status::Internal("lease vanished after it was applied");
  Span span;
  if (report.event == NIXLLeaseEvent::kCreate) {
    span = SpanOf(*lease, residency);
    gate_->CoverLease(*lease, span.worker, span.keys);
  } else {
    gate_->UpdateLease(*lease);
    span = PersistedSpan(lease->lease_id);
  }
  if (!applied->has_value()) return PersistHeartbeat(actor, *lease, span);
  return Persist(actor, **applied, *lease, span);
}

// A replica's report is previewed here, recorded in the replicated log, and
// made on every replica (this one included) when the log's entry is applied
// (ApplyReplicatedRecord), in log order.
Status LeaseService::ApplyThroughLog(const NIXLLease& report,
                                     const std::optional<SpanResidency>& residency,
                                     std::string_view actor, int64_t now_ms) {
  Result<governance::LeaseTable::Change> change = table_.Preview(report, now_ms);
  if (!change.ok()) {
    Reject(change.status());
    return change.status();
  }
  const NIXLLease& lease = change->next;
  const Span span = report.event == NIXLLeaseEvent::kCreate ? SpanOf(lease, residency)
                                                            : PersistedSpan(lease.lease_id);
  if (!change->transition.has_value()) return PersistHeartbeat(actor, lease, span);
  return Persist(actor, *change->transition, lease, span);
}

void LeaseService::ExpireDue(int64_t now_ms) {
  for (const governance::LeaseTransition& transition : table_.ExpireDue(now_ms)) {
    std::optional<NIXLLease> lease = table_.Get(transition.lease_id);
    if (!lease) continue;
    gate_->UpdateLease(*lease);
    if (Status recorded = Persist(kDaemonActor, transition, *lease, PersistedSpan(lease->lease_id));
        !recorded.ok()) {
      log::Line(log::Level::kError, "governance.write_failed")
          .Field("kind", "lease.transition")
          .Field("subject", lease->lease_id)
          .Field("error", recorded.ToString());
    }
  }
}

void LeaseService::ForgetEnded(int64_t now_ms) {
  // The gate keeps an ended lease's blocks only while their worker holds them.
  gate_->ForgetEnded(now_ms, [this](std::string_view worker, index::BlockKey key) {
    return index_->Holds(worker, key);
  });
  const std::vector<std::string> handoffs =
      table_.ForgetEndedBefore(now_ms - options_.retain_ended_ms, now_ms - int64_t{60} * 1000);
  if (handoffs.empty()) return;
  std::vector<store::WriteOp> deletes;
  deletes.reserve(handoffs.size());
  for (const std::string& id : handoffs) {
    deletes.push_back({store::Column::kGovernance, RecordKey(id), std::nullopt});
  }
  // Not synced: a record a crash brings back is an ended lease, forgotten
  // again a minute after the restart.
  if (Status deleted = store_->Write(deletes, /*sync=*/false); !deleted.ok()) {
    log::Line(log::Level::kError, "store.write_failed")
        .Field("what", "ended handoff leases")
        .Field("error", deleted.ToString());
  }
}

Status LeaseService::Recover(int64_t now_ms) {
  KVGOV_RETURN_IF_ERROR(store_->Scan(store::Column::kGovernance, kRecordPrefix, "lease0",
                                     [&](std::string_view key, std::string_view value) {
                                       if (!ApplyReplicatedRecord(value)) {
                                         log::Line(log::Level::kWarn, "recovery.record_skipped")
                                             .Field("key", key)
                                             .Field("detail", "not a lease record");
                                       }
                                       return true;
                                     }));
  if (!recorder_->replicated()) ExpireDue(now_ms);
  return Status::Ok();
}

bool LeaseService::ApplyReplicatedRecord(std::string_view record) {
  Result<StoredLease> stored = DecodeLeaseRecord(record);
  if (!stored.ok()) return false;
  table_.Restore(stored->lease);
  gate_->CoverLease(stored->lease, stored->worker, stored->keys);
  return true;
}

Status LeaseService::GuardReplicated(const replication::LogEntry& entry) const {
  for (const replication::LogWrite& write : entry.writes) {
    if (write.column != "governance" || !write.key.starts_with(kRecordPrefix) ||
        !write.value.has_value()) {
      continue;
    }
    const std::string lease_id = write.key.substr(kRecordPrefix.size());
    Result<StoredLease> next_record = DecodeLeaseRecord(*write.value);
    if (!next_record.ok()) return next_record.status().WithContext("lease '" + lease_id + "'");
    const NIXLLease& next = next_record->lease;
    // The record the log left: only the log writes lease records on a
    // replica, so every replica reads the same one here.
    Result<std::optional<std::string>> stored = store_->Get(store::Column::kGovernance, write.key);
    if (!stored.ok()) return Status::Unavailable(stored.status().ToString());
    if (!stored->has_value()) {
      if (next.event == NIXLLeaseEvent::kCreate) continue;
      return Status::NotFound("lease '" + lease_id +
                              "' is not known to the governance log (never created, or "
                              "forgotten after it ended)");
    }
    if (next.event == NIXLLeaseEvent::kCreate) {
      return Status::AlreadyExists("lease '" + lease_id + "' was already created");
    }
    Result<StoredLease> current_record = DecodeLeaseRecord(**stored);
    if (!current_record.ok()) {
      return current_record.status().WithContext("stored lease '" + lease_id + "'");
    }
    const NIXLLease& current = current_record->lease;
    // Ended by an event: nothing moves it again, not even a second expiry.
    if (current.event != NIXLLeaseEvent::kCreate && current.event != NIXLLeaseEvent::kHeartbeat) {
      return Status::FailedPrecondition(
          "lease '" + lease_id + "' is " +
          std::string(ToString(LeaseStateAt(current, entry.time_ms))) + "; event '" +
          std::string(ToString(next.event)) + "' cannot move it (a concurrent write ended it)");
    }
    // kvgov's own expiry only ends a lease whose time the log says is up:
    // a heartbeat applied meanwhile (through another replica) extended it.
    if (next.event == NIXLLeaseEvent::kExpiry && entry.actor == kDaemonActor &&
        LeaseStateAt(current, entry.time_ms) != NIXLLeaseState::kExpired) {
      return Status::FailedPrecondition("lease '" + lease_id +
                                        "' is not due: a heartbeat extended it");
    }
    KVGOV_RETURN_IF_ERROR(ApplyNIXLLeaseEvent(current, next.event, entry.time_ms).status());
  }
  return Status::Ok();
}

// The worker and blocks a lease pins: by token ids when the report names
// them, else the block the span digest names on the prefill worker.
LeaseService::Span LeaseService::SpanOf(const NIXLLease& lease,
                                        const std::optional<SpanResidency>& residency) const {
  Span span{residency && !residency->worker.empty() ? residency->worker : lease.remote_engine, {}};
  std::optional<index::WorkerResidency> holder = index_->Worker(span.worker);
  if (!holder) return span;
  if (residency && !residency->token_ids.empty()) {
    span.keys = index::RequestChain(
        index_->hasher(), {holder->model, residency->lora_name, residency->group_idx},
        residency->cache_salt, residency->token_ids, holder->block_size);
    return span;
  }
  std::optional<EngineHash> hash = ParseEngineHash(lease.span_digest);
  if (!hash) return span;
  Result<std::vector<index::BlockKey>> keys = index_->KeysForEngineHashes(
      span.worker, std::span(&*hash, 1), residency ? residency->group_idx : 0);
  if (keys.ok()) span.keys = *std::move(keys);
  return span;
}

// The worker and keys a lease was persisted with; none for a record that
// cannot be read (it pins nothing).
LeaseService::Span LeaseService::PersistedSpan(std::string_view lease_id) const {
  Result<std::optional<std::string>> record =
      store_->Get(store::Column::kGovernance, RecordKey(lease_id));
  if (!record.ok() || !record->has_value()) return {};
  Result<StoredLease> stored = DecodeLeaseRecord(**record);
  if (!stored.ok()) return {};
  return {std::move(stored->worker), std::move(stored->keys)};
}

Status LeaseService::Persist(std::string_view actor, const governance::LeaseTransition& transition,
                             const NIXLLease& lease, const Span& span) {
  const store::WriteOp state{store::Column::kGovernance, RecordKey(lease.lease_id),
                             LeaseRecord(lease, span.worker, span.keys)};
  const Json payload = {{"lease_id", lease.lease_id},
                        {"from", StateName(transition.from)},
                        {"to", std::string(ToString(transition.to))},
                        {"event", std::string(ToString(lease.event))},
                        {"remote_engine", lease.remote_engine},
                        {"blocks", span.keys.size()}};
  KVGOV_RETURN_IF_ERROR(
      recorder_->Record(actor, "lease.transition", lease.lease_id, payload.dump(), {&state, 1})
          .status());
  transitions_->WithLabels({StateName(transition.from), std::string(ToString(transition.to))})
      ->Inc();
  if (!transition.from.has_value()) {
    grants_->WithLabels({std::string(ToString(lease.witness))})->Inc();
  }
  return Status::Ok();
}

Status LeaseService::PersistHeartbeat(std::string_view actor, const NIXLLease& lease,
                                      const Span& span) {
  const store::WriteOp state{store::Column::kGovernance, RecordKey(lease.lease_id),
                             LeaseRecord(lease, span.worker, span.keys)};
  if (recorder_->through_log()) {
    return recorder_->Record(actor, /*kind=*/"", lease.lease_id, "", {&state, 1}).status();
  }
  return store_->Write({&state, 1}, /*sync=*/true);
}

void LeaseService::Reject(const Status& refusal) {
  rejections_->WithLabels({std::string(StatusCodeName(refusal.code()))})->Inc();
}

}  // namespace kvgov::services
