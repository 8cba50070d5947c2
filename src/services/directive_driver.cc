#include "kvgov/services/directive_driver.h"

#include <algorithm>

#include "kvgov/auth/entropy.h"
#include "kvgov/cert/certificate.h"
#include "kvgov/clock/clock.h"
#include "kvgov/codec/directive_record.h"
#include "kvgov/connectors/invalidation_connector.h"
#include "kvgov/core/hex.h"
#include "kvgov/journal/journal.h"
#include "kvgov/log/log.h"
#include "kvgov/replication/replica.h"

namespace kvgov::services {
namespace {

using governance::DirectiveState;
using governance::OwnerProgress;

constexpr std::string_view kCertificatePrefix = "certificate/";

std::string ClaimName(std::string_view id) { return "directive/" + std::string(id); }

}  // namespace

Result<std::unique_ptr<DirectiveDriver>> DirectiveDriver::Create(Collaborators collaborators,
                                                                 metrics::Registry* metrics,
                                                                 DirectiveDriverOptions options) {
  KVGOV_ASSIGN_OR_RETURN(metrics::CounterFamily * certificates,
                         metrics->AddCounter({"kvgov_certificates_total",
                                              "Deletion certificates by outcome: issued, or "
                                              "failed (minting or storing failed; the "
                                              "directive stays witnessed).",
                                              {"outcome"}}));
  // Both series exist from the start, so a rate or an alert on failures
  // never sees an absent series.
  certificates->WithLabels({"issued"});
  certificates->WithLabels({"failed"});
  std::unique_ptr<DirectiveDriver> driver(new DirectiveDriver(std::move(collaborators), options));
  driver->certificates_ = certificates;
  return driver;
}

DirectiveDriver::DirectiveDriver(Collaborators collaborators, DirectiveDriverOptions options)
    : with_(std::move(collaborators)),
      options_(options),
      lifecycle_(options.witness_timeout_ms),
      thread_([this] { Run(); }) {}

Result<std::unique_ptr<connectors::InvalidationConnector>> DirectiveDriver::ConnectorFor(
    std::string_view worker) const {
  const ingest::EngineSpec* engine = with_.engines.engine_of(worker);
  if (engine == nullptr || engine->control.empty()) {
    return Status::FailedPrecondition("worker '" + std::string(worker) +
                                      "' has no control URL to send a directive to");
  }
  connectors::ConnectorConfig config;
  config.kind = engine->connector.empty() ? std::string(ToString(engine->kind)) : engine->connector;
  config.control = engine->control;
  config.webhook_path = engine->connector_path;
  return connectors::MakeConnector(config);
}

DirectiveDriver::~DirectiveDriver() { Stop(); }

void DirectiveDriver::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cancel_ = true;
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status DirectiveDriver::Record(const Directive& directive, std::string_view kind,
                               std::string_view actor, std::span<const store::WriteOp> beside) {
  const std::string record = EncodeDirectiveRecord(directive);
  std::vector<store::WriteOp> state(beside.begin(), beside.end());
  state.push_back({store::Column::kGovernance, std::string(kRecordPrefix) + directive.id, record});
  return with_.recorder->Record(actor, kind, directive.id, record, state).status();
}

void DirectiveDriver::RecordOrLog(const Directive& directive, std::string_view kind) {
  if (Status recorded = Record(directive, kind, kDaemonActor); !recorded.ok()) {
    log::Line(log::Level::kError, "directive.not_journaled")
        .Field("directive", directive.id)
        .Field("kind", kind)
        .Field("error", recorded.ToString());
  }
}

bool DirectiveDriver::DrivesLocked(std::string_view id) const {
  return !with_.recorder->replicated() || driving_.contains(id);
}

void DirectiveDriver::SetGateLocked(const std::vector<governance::WorkerTargets>& targets,
                                    bool pending) {
  for (const governance::WorkerTargets& target : targets) {
    with_.gate->SetPending(target.worker, target.keys, target.whole_worker, pending);
  }
}

void DirectiveDriver::SyncGateLocked(const Directive* before, const Directive& after) {
  if (before != nullptr) SetGateLocked(governance::PendingTargets(*before), false);
  SetGateLocked(governance::PendingTargets(after), true);
}

std::optional<std::pair<Directive, std::string>> DirectiveDriver::ApplyLocked(
    const std::string& id, const governance::DirectiveEvent& event, int64_t now_ms,
    std::vector<Work>* defer) {
  Directive& directive = directives_.at(id);
  governance::DirectiveEffects effects = lifecycle_.Apply(directive, event, now_ms);
  SetGateLocked(effects.hold, true);
  SetGateLocked(effects.release, false);
  if (!effects.call.empty() || effects.certify) {
    Work work{id, std::move(effects.call), effects.certify};
    if (defer != nullptr) {
      defer->push_back(std::move(work));
    } else {
      queue_.push_back(std::move(work));
      wake_.notify_all();
    }
  }
  if (!effects.journal) return std::nullopt;
  return std::make_pair(directive, std::move(*effects.journal));
}

void DirectiveDriver::ApplyReplicated(std::string_view record) {
  Result<Directive> directive = DecodeDirectiveRecord(record);
  if (!directive.ok()) {
    log::Line(log::Level::kError, "directive.replicated_unreadable")
        .Field("error", directive.status().ToString());
    return;
  }
  MutexLock lock(mu_);
  if (DrivesLocked(directive->id)) return;
  auto it = directives_.find(directive->id);
  SyncGateLocked(it == directives_.end() ? nullptr : &it->second, *directive);
  const std::string id = directive->id;
  directives_[id] = *std::move(directive);
}

Result<DirectiveDriver::Opened> DirectiveDriver::Create(const InvalidationRequest& request,
                                                        std::string_view actor) {
  if (request.scope == "tenant") return CreateRevocation(request, actor);
  governance::DirectiveDraft draft;
  KVGOV_ASSIGN_OR_RETURN(draft.id, auth::RandomHexId());
  draft.reason = request.reason;
  draft.model = request.model;
  draft.tenant = request.tenant;
  draft.scope =
      request.scope.empty() ? KVEvictionScope::kExactSpan : KVEvictionScope::kWholePrefixCache;

  std::vector<index::WorkerResidency> workers;
  for (index::WorkerResidency& w : with_.index->Workers()) {
    if (w.model == request.model) workers.push_back(std::move(w));
  }
  if (workers.empty()) {
    return Status::NotFound("model: no registered worker serves '" + request.model + "'");
  }
  std::vector<index::BlockKey> span;
  if (!request.token_ids.empty()) {
    const std::string salt = with_.salts->Current(request.tenant, request.model);
    span = index::RequestChain(with_.index->hasher(),
                               {request.model, request.lora_name, request.group_idx}, salt,
                               request.token_ids, workers.front().block_size);
    draft.owners = governance::OwnersOfSpan(span, with_.index->Overlap(span));
  } else if (request.block_hash.has_value()) {
    KVGOV_ASSIGN_OR_RETURN(
        span, with_.index->KeysForEngineHashes(request.worker, std::span(&*request.block_hash, 1),
                                               request.group_idx));
    draft.owners.push_back(governance::OwnerOfKeys(request.worker, span));
  } else {
    if (request.scope == "worker") {
      std::erase_if(workers,
                    [&](const index::WorkerResidency& w) { return w.id != request.worker; });
      if (workers.empty()) {
        return Status::NotFound("worker: '" + request.worker + "' does not serve '" +
                                request.model + "'");
      }
    }
    draft.owners = governance::OwnersOfWorkers(workers);
  }
  draft.subject = governance::DirectiveSubject(request.model, request.scope, request.worker, span);
  governance::DirectiveLifecycle::Planned planned =
      lifecycle_.Plan(std::move(draft), clock::NowMillis());
  KVGOV_RETURN_IF_ERROR(Open(planned, actor, {}));
  return Opened{std::move(planned.directive), {}};
}

Result<DirectiveDriver::Opened> DirectiveDriver::CreateRevocation(
    const InvalidationRequest& request, std::string_view actor) {
  if (!request.model.empty()) {
    const std::vector<index::WorkerResidency> workers = with_.index->Workers();
    if (std::none_of(workers.begin(), workers.end(),
                     [&](const index::WorkerResidency& w) { return w.model == request.model; })) {
      return Status::NotFound("model: no registered worker serves '" + request.model + "'");
    }
  }
  MutexLock revoking(revoke_mu_);
  const router::SaltEpochs::TenantEpochs next =
      with_.salts->Advanced(request.tenant, request.model);
  governance::DirectiveDraft draft;
  KVGOV_ASSIGN_OR_RETURN(draft.id, auth::RandomHexId());
  draft.reason = request.reason;
  draft.model = request.model;
  draft.tenant = request.tenant;
  draft.scope = request.flush ? KVEvictionScope::kWholePrefixCache : KVEvictionScope::kExactSpan;
  const int64_t now_ms = clock::NowMillis();
  governance::Revocation& revocation = draft.revocation.emplace();
  revocation.all_models_epoch = next.all_models;
  if (auto it = next.models.find(request.model); it != next.models.end()) {
    revocation.model_epoch = it->second;
  }
  revocation.unreachable_since_ms = now_ms;
  revocation.flush = request.flush;
  draft.subject = governance::RevocationSubject(request.model, request.tenant, revocation);
  // The residue as of the new epoch: what every salt before it keyed.
  std::vector<index::LineageResidue> residue_by_tier =
      with_.salts->Residue(request.tenant, request.model, next, /*by_tier=*/true);
  for (const index::LineageResidue& residue : residue_by_tier) {
    OwnerProgress& owner = draft.owners.emplace_back();
    owner.worker = residue.worker;
    owner.residue = residue.matched_refs;
    owner.unattributed = residue.unattributed_refs;
    owner.target_count = residue.matched_refs + residue.unattributed_refs;
  }
  governance::DirectiveLifecycle::Planned planned = lifecycle_.Plan(std::move(draft), now_ms);
  // The epoch and the directive in one journaled write: a revocation the
  // answer acknowledges is in force after any crash.
  const store::WriteOp epoch = services::TenantSalts::RecordOf(request.tenant, next);
  KVGOV_RETURN_IF_ERROR(Open(planned, actor, {&epoch, 1}));
  with_.salts->Install(request.tenant, next);
  return Opened{std::move(planned.directive), std::move(residue_by_tier)};
}

Status DirectiveDriver::Open(governance::DirectiveLifecycle::Planned& planned,
                             std::string_view actor, std::span<const store::WriteOp> state) {
  const Directive& directive = planned.directive;
  // Replicas claim what they drive.
  replication::Replica* const claims =
      governance::IsFinished(directive.state) ? nullptr : with_.recorder->replica();
  if (claims != nullptr) {
    // Claimed before it is in the log, so no other replica takes it over
    // while its creator is alive.
    Result<bool> claimed = claims->Claim(ClaimName(directive.id));
    if (!claimed.ok()) {
      return Status::Unavailable("governance writes are refused while Redis is unreachable: " +
                                 claimed.status().message());
    }
    if (!*claimed) return Status::Internal("a fresh directive id was already claimed");
    MutexLock lock(mu_);
    driving_.insert(directive.id);
  }
  if (Status recorded = Record(directive, *planned.effects.journal, actor, state); !recorded.ok()) {
    if (claims != nullptr) {
      claims->ReleaseClaim(ClaimName(directive.id));
      MutexLock lock(mu_);
      driving_.erase(directive.id);
    }
    return recorded;
  }
  MutexLock lock(mu_);
  SetGateLocked(planned.effects.hold, true);
  directives_[directive.id] = directive;
  if (!planned.effects.call.empty() || planned.effects.certify) {
    queue_.push_back({directive.id, std::move(planned.effects.call), planned.effects.certify});
    wake_.notify_all();
  }
  return Status::Ok();
}

std::vector<index::LineageResidue> DirectiveDriver::Residue(const Directive& directive) const {
  return ResidueOf(directive, /*by_tier=*/true);
}

std::vector<index::LineageResidue> DirectiveDriver::ResidueOf(const Directive& directive,
                                                              bool by_tier) const {
  if (!directive.revocation) return {};
  // Against the tenant's epochs now: a later revocation only moves more
  // salts into the residue.
  return with_.salts->Residue(
      directive.tenant, directive.model,
      with_.salts->Epochs(directive.tenant).value_or(router::SaltEpochs::TenantEpochs{}), by_tier);
}

void DirectiveDriver::WatchResidue(int64_t now_ms) {
  std::vector<Directive> watched;
  {
    MutexLock lock(mu_);
    for (const auto& [id, directive] : directives_) {
      const bool awaits = directive.state == DirectiveState::kDispatched ||
                          directive.state == DirectiveState::kAcknowledged;
      if (directive.revocation && awaits && DrivesLocked(id)) watched.push_back(directive);
    }
  }
  for (const Directive& directive : watched) {
    // Read outside the lock: the index takes its own.
    const std::vector<index::LineageResidue> residue = ResidueOf(directive, /*by_tier=*/false);
    MutexLock lock(mu_);
    if (!directives_.contains(directive.id)) continue;
    for (const OwnerProgress& owner : directive.owners) {
      governance::ResidueSeen seen{owner.worker, 0, 0, with_.engines.stream_seq(owner.worker)};
      for (const index::LineageResidue& held : residue) {
        if (held.worker != owner.worker) continue;
        seen.residue = held.matched_refs;
        seen.unattributed = held.unattributed_refs;
      }
      ApplyLocked(directive.id, seen, now_ms);
    }
  }
}

void DirectiveDriver::Run() {
  MutexLock lock(mu_);
  while (true) {
    while (!stopping_ && queue_.empty()) wake_.wait(lock);
    if (stopping_) return;
    Work work = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    if (work.certify) {
      Certify(work.id);
    } else {
      Dispatch(work);
    }
    lock.lock();
  }
}

void DirectiveDriver::Dispatch(const Work& work) {
  std::optional<Directive> directive = Get(work.id);
  if (!directive) return;
  for (size_t i : work.call) {
    if (i >= directive->owners.size()) continue;
    const OwnerProgress& owner = directive->owners[i];
    Result<std::unique_ptr<connectors::InvalidationConnector>> connector =
        ConnectorFor(owner.worker);
    const int64_t stream_seq = with_.engines.stream_seq(owner.worker);
    {
      MutexLock lock(mu_);
      // Answered meanwhile (a second round for the same owner), or the
      // directive finished or was witnessed: nothing to call.
      if (!governance::MayCall(directives_.at(work.id), i)) continue;
      ApplyLocked(work.id, governance::CallStarted{i, stream_seq}, clock::NowMillis());
      if (!connector.ok()) {
        ApplyLocked(work.id, governance::CallFailed{i, "", connector.status().message()},
                    clock::NowMillis());
        continue;
      }
    }
    connectors::EvictionRequest request{owner.worker, {}, directive->reason, work.id};
    for (index::BlockKey key : owner.pending) request.span_digests.push_back(Hex64(key));
    Result<connectors::DispatchResult> result = (*connector)->Dispatch(request, cancel_);
    const std::string name((*connector)->name());
    governance::DirectiveEvent answer =
        result.ok() ? governance::DirectiveEvent(governance::CallAnswered{
                          i, name, static_cast<int>(result->attempts.size()),
                          result->attempts.empty() ? 0 : result->attempts.back().http_status,
                          result->scope, result->degraded, result->degrade_reason})
                    : governance::DirectiveEvent(
                          governance::CallFailed{i, name, result.status().message()});
    MutexLock lock(mu_);
    ApplyLocked(work.id, answer, clock::NowMillis());
  }
  std::optional<std::pair<Directive, std::string>> record;
  {
    MutexLock lock(mu_);
    record = ApplyLocked(work.id, governance::CallsEnded{}, clock::NowMillis());
  }
  if (record) RecordOrLog(record->first, record->second);
}

void DirectiveDriver::Observe(std::string_view worker, uint64_t seq, const EngineEvent& event) {
  governance::DirectiveEvent seen;
  if (const auto* block_removed = std::get_if<BlockRemoved>(&event)) {
    // Resolved before the index applies the removal and forgets the hash.
    Result<std::vector<index::BlockKey>> keys = with_.index->KeysForEngineHashes(
        worker, block_removed->block_hashes, block_removed->group_idx);
    seen = governance::RemovalSeen{std::string(worker), seq,
                                   keys.ok() ? *std::move(keys) : std::vector<index::BlockKey>{}};
  } else if (std::holds_alternative<AllBlocksCleared>(event)) {
    seen = governance::ClearSeen{std::string(worker), seq};
  } else {
    return;
  }
  WitnessAll(seen);
}

void DirectiveDriver::ObserveRestart(std::string_view worker, uint64_t seq) {
  WitnessAll(governance::RestartSeen{std::string(worker), seq});
}

void DirectiveDriver::WitnessAll(const governance::DirectiveEvent& seen) {
  const int64_t now_ms = clock::NowMillis();
  MutexLock lock(mu_);
  for (const auto& [id, directive] : directives_) {
    // Witnessing journals nothing: the certify step journals the anchor.
    if (DrivesLocked(id)) ApplyLocked(id, seen, now_ms);
  }
}

void DirectiveDriver::Certify(const std::string& id) {
  std::optional<Directive> directive = Get(id);
  if (!directive || directive->state != DirectiveState::kWitnessed) return;
  // The journal row recording the witness is the certificate's anchor: the
  // certificate can only exist after the removal was seen and recorded.
  const std::string record = EncodeDirectiveRecord(*directive);
  const store::WriteOp state{store::Column::kGovernance, std::string(kRecordPrefix) + directive->id,
                             record};
  Result<journal::Row> anchor = with_.recorder->Record(kDaemonActor, "invalidation.witnessed",
                                                       directive->id, record, {&state, 1});
  if (!anchor.ok()) {
    log::Line(log::Level::kError, "directive.not_journaled")
        .Field("directive", id)
        .Field("kind", "invalidation.witnessed")
        .Field("error", anchor.status().ToString());
    CountCertificate("failed");
    return;
  }
  cert::CertificateInput input;
  input.subject = directive->subject;
  input.directive_id = directive->id;
  input.scope = directive->scope;
  for (const OwnerProgress& owner : directive->owners) {
    cert::CertOwner c;
    c.worker = owner.worker;
    // An owner a revocation never called is named by its engine's kind,
    // and did what the directive asked: its residue went by eviction.
    std::string connector_name = owner.connector;
    if (connector_name.empty()) {
      if (const ingest::EngineSpec* engine = with_.engines.engine_of(owner.worker)) {
        connector_name =
            engine->connector.empty() ? std::string(ToString(engine->kind)) : engine->connector;
      }
    }
    Result<cert::CertConnector> connector = ParseEnum<cert::CertConnector>(connector_name);
    c.connector = connector.ok() ? *connector : cert::CertConnector::kWebhook;
    c.scope = owner.scope.value_or(directive->revocation ? directive->scope
                                                         : KVEvictionScope::kWholePrefixCache);
    c.degraded = owner.degraded;
    c.degrade_reason = owner.degrade_reason;
    c.witness.kind = owner.witness_kind.value_or(WitnessKind::kBlockRemoved);
    c.witness.event_seqs = owner.witness_seqs;
    input.owners.push_back(std::move(c));
  }
  input.target_count = directive->target_count;
  if (directive->revocation) {
    input.revocation = cert::CertRevocation{directive->tenant, directive->model,
                                            directive->revocation->unreachable_since_ms,
                                            directive->revocation->removed_by_ms};
  }
  input.anchor = {anchor->seq, anchor->prev_hash, anchor->hash};
  input.issued_at_ms = clock::NowMillis();
  Result<cert::DeletionCertificate> certificate = cert::MintCertificate(input, *with_.issuer);
  Result<std::string> encoded = certificate.ok() ? cert::EncodeCertificateJson(*certificate)
                                                 : Result<std::string>(certificate.status());
  if (!encoded.ok()) {
    log::Line(log::Level::kError, "directive.not_certified")
        .Field("directive", id)
        .Field("error", encoded.status().ToString());
    CountCertificate("failed");
    return;
  }
  // "certified" becomes visible only once the certificate is stored and
  // journaled: anyone who sees the state can fetch the certificate.
  const governance::Certified certified_event{certificate->certificate_id};
  Directive certified = *directive;
  lifecycle_.Apply(certified, certified_event, input.issued_at_ms);
  const std::string certified_record = EncodeDirectiveRecord(certified);
  const std::array<store::WriteOp, 2> ops = {
      store::WriteOp{store::Column::kGovernance,
                     std::string(kCertificatePrefix) + certificate->certificate_id, *encoded},
      store::WriteOp{store::Column::kGovernance, std::string(kRecordPrefix) + id,
                     certified_record}};
  if (Status recorded =
          with_.recorder
              ->Record(kDaemonActor, "certificate", certificate->certificate_id, *encoded, ops)
              .status();
      !recorded.ok()) {
    log::Line(log::Level::kError, "directive.not_certified")
        .Field("directive", id)
        .Field("error", "certificate not stored: " + recorded.ToString());
    CountCertificate("failed");
    return;
  }
  {
    MutexLock lock(mu_);
    ApplyLocked(id, certified_event, input.issued_at_ms);
  }
  CountCertificate("issued");
}

void DirectiveDriver::CountCertificate(std::string_view outcome) {
  certificates_->WithLabels({std::string(outcome)})->Inc();
}

void DirectiveDriver::Tick(int64_t now_ms) {
  if (replication::Replica* replica = with_.recorder->replica()) TendClaims(*replica, now_ms);
  WatchResidue(now_ms);
  std::vector<std::pair<Directive, std::string>> records;
  {
    MutexLock lock(mu_);
    for (const auto& [id, directive] : directives_) {
      if (!DrivesLocked(id)) continue;
      if (auto record = ApplyLocked(id, governance::Tick{}, now_ms)) {
        records.push_back(*std::move(record));
      }
    }
  }
  for (const auto& [directive, kind] : records) (void)Record(directive, kind, kDaemonActor);
}

void DirectiveDriver::TendClaims(replication::Replica& replica, int64_t now_ms) {
  std::vector<std::string> driven;
  std::vector<std::string> orphans;
  {
    MutexLock lock(mu_);
    // A third of the claim's life between rounds: a live driver renews
    // twice before its claim could lapse.
    if (now_ms < next_claim_round_ms_) return;
    next_claim_round_ms_ = now_ms + options_.claim_ttl_ms / 3;
    for (const auto& [id, directive] : directives_) {
      if (driving_.contains(id)) {
        driven.push_back(id);
      } else if (!governance::IsFinished(directive.state)) {
        // Claimable only once its driver stopped renewing the claim.
        orphans.push_back(id);
      }
    }
  }
  for (const std::string& id : driven) {
    bool finished = false;
    {
      MutexLock lock(mu_);
      finished = governance::IsFinished(directives_.at(id).state);
    }
    if (finished) {
      replica.ReleaseClaim(ClaimName(id));
      MutexLock lock(mu_);
      driving_.erase(id);
      continue;
    }
    Result<bool> renewed = replica.RenewClaim(ClaimName(id));
    if (renewed.ok() && !*renewed) {
      // Another replica took it over: from now on its records are the truth.
      log::Line(log::Level::kWarn, "directive.claim_lost")
          .Field("replica", replica.id())
          .Field("directive", id);
      MutexLock lock(mu_);
      driving_.erase(id);
    }
  }
  for (const std::string& id : orphans) {
    Result<bool> claimed = replica.Claim(ClaimName(id));
    if (!claimed.ok() || !*claimed) continue;
    MutexLock lock(mu_);
    const Directive& directive = directives_.at(id);
    if (governance::IsFinished(directive.state)) {
      replica.ReleaseClaim(ClaimName(id));
      continue;
    }
    log::Line(log::Level::kWarn, "directive.taken_over")
        .Field("replica", replica.id())
        .Field("directive", id)
        .Field("state", ToString(directive.state));
    driving_.insert(id);
    ApplyLocked(id, governance::DriverResumed{}, now_ms);
  }
}

std::optional<Directive> DirectiveDriver::Get(std::string_view id) const {
  MutexLock lock(mu_);
  auto it = directives_.find(id);
  if (it == directives_.end()) return std::nullopt;
  return it->second;
}

std::vector<Directive> DirectiveDriver::NewestFirst() const {
  std::vector<Directive> out;
  {
    MutexLock lock(mu_);
    out.reserve(directives_.size());
    for (const auto& [id, directive] : directives_) out.push_back(directive);
  }
  std::sort(out.begin(), out.end(), [](const Directive& a, const Directive& b) {
    return a.created_ms != b.created_ms ? a.created_ms > b.created_ms : a.id < b.id;
  });
  return out;
}

std::map<std::string, uint64_t, std::less<>> DirectiveDriver::CountByState() const {
  std::map<std::string, uint64_t, std::less<>> counts;
  for (const auto& [state, spelling] : EnumSpelling<DirectiveState>::kValues) {
    counts.emplace(spelling, 0);
  }
  MutexLock lock(mu_);
  for (const auto& [id, directive] : directives_) ++counts[std::string(ToString(directive.state))];
  return counts;
}

void DirectiveDriver::CallRecoveredOwners() {
  MutexLock lock(mu_);
  for (Work& work : recovered_) queue_.push_back(std::move(work));
  recovered_.clear();
  wake_.notify_all();
}

Status DirectiveDriver::Recover() {
  const int64_t now_ms = clock::NowMillis();
  Status unreadable;
  KVGOV_RETURN_IF_ERROR(with_.store->Scan(
      store::Column::kGovernance, kRecordPrefix, "invalidation0",
      [&](std::string_view key, std::string_view value) {
        Result<Directive> decoded = DecodeDirectiveRecord(value);
        if (!decoded.ok()) {
          unreadable = Status::Corruption(std::string(key) + ": " + decoded.status().message());
          return false;
        }
        const std::string id = decoded->id;
        MutexLock lock(mu_);
        SyncGateLocked(nullptr, *decoded);
        directives_[id] = *std::move(decoded);
        // A single kvgov was the directive's only driver and drives it on:
        // owners not yet called are called, and every removal still counts
        // when the engines' streams show it, caught up through replay. A
        // replica's directive lives on with whichever replica claims it.
        if (!with_.recorder->replicated()) {
          ApplyLocked(id, governance::DriverResumed{}, now_ms, &recovered_);
        }
        return true;
      }));
  return unreadable;
}

}  // namespace kvgov::services
