#include "server/invalidations.h"

#include <algorithm>
#include <cstdio>

#include "kvgov/cert/certificate.h"
#include "kvgov/codec/directive_record.h"
#include "kvgov/connectors/invalidation_connector.h"
#include "kvgov/core/digest.h"
#include "kvgov/journal/journal.h"
#include "kvgov/replication/replica.h"
#include "server/daemon.h"
#include "server/entropy.h"

namespace kvgov::server {
namespace {

// An owner whose call may not have reached it: planned, or dispatched
// without a recorded answer.
bool NeedsCall(const OwnerProgress& owner) {
  return owner.state == "planned" || owner.state == "dispatched";
}

constexpr std::string_view kDirectivePrefix = "invalidation/";
constexpr std::string_view kCertificatePrefix = "certificate/";

bool Finished(const Directive& directive) {
  return directive.state == "certified" || directive.state == "failed";
}

std::string ClaimName(std::string_view id) { return "directive/" + std::string(id); }

// The engine a worker belongs to ("w1@dp0" -> "w1").
const ingest::EngineSpec* EngineOf(const Daemon& daemon, std::string_view worker) {
  const std::string_view id = worker.substr(0, worker.find('@'));
  for (const ingest::EngineSpec& engine : daemon.options.engines) {
    if (engine.id == id) return &engine;
  }
  return nullptr;
}

int64_t StreamSeq(const Daemon& daemon, std::string_view worker) {
  if (!daemon.ingest) return -1;
  for (const transport::StreamView& view : daemon.ingest->Streams()) {
    if (view.worker == worker) return view.stats->last_seq.load();
  }
  return -1;
}

}  // namespace

InvalidationManager::InvalidationManager(Daemon* daemon, int64_t witness_timeout_ms)
    : daemon_(daemon), witness_timeout_ms_(witness_timeout_ms), thread_([this] { Run(); }) {}

InvalidationManager::~InvalidationManager() { Stop(); }

void InvalidationManager::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cancel_ = true;
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status InvalidationManager::Record(const Directive& directive, std::string_view kind) {
  const std::string record = EncodeDirectiveRecord(directive);
  const store::WriteOp state{store::Column::kGovernance,
                             std::string(kDirectivePrefix) + directive.id, record};
  return RecordGovernance(*daemon_, kind, directive.id, record, {&state, 1}).status();
}

bool InvalidationManager::DrivesLocked(std::string_view id) const {
  return !daemon_->replicated() || driving_.contains(id);
}

void InvalidationManager::SyncGateLocked(const Directive* before, const Directive& after) {
  if (before != nullptr) ReleaseTargetsLocked(*before);
  for (const OwnerProgress& owner : after.owners) {
    std::vector<index::BlockKey> keys(owner.pending.begin(), owner.pending.end());
    if (!keys.empty() || owner.whole_worker) {
      daemon_->gate.SetPending(owner.worker, keys, owner.whole_worker, true);
    }
  }
}

void InvalidationManager::ApplyReplicated(std::string_view record) {
  Result<Directive> directive = DecodeDirectiveRecord(record);
  if (!directive.ok()) {
    std::fprintf(stderr, "kvgov: replicated %s\n", directive.status().ToString().c_str());
    return;
  }
  std::lock_guard lock(mu_);
  if (DrivesLocked(directive->id)) return;
  auto it = directives_.find(directive->id);
  SyncGateLocked(it == directives_.end() ? nullptr : &it->second, *directive);
  directives_[directive->id] = std::move(directive).value();
}

void InvalidationManager::ReleaseTargetsLocked(const Directive& directive) {
  for (const OwnerProgress& owner : directive.owners) {
    std::vector<index::BlockKey> keys(owner.pending.begin(), owner.pending.end());
    daemon_->gate.SetPending(owner.worker, keys, owner.whole_worker, false);
  }
}

Result<Directive> InvalidationManager::Create(const InvalidationRequest& request) {
  Directive directive;
  KVGOV_ASSIGN_OR_RETURN(directive.id, RandomHexId());
  directive.reason = request.reason;
  directive.model = request.model;
  directive.tenant = request.tenant;
  directive.created_ms = WallClockMillis();
  directive.deadline_ms = directive.created_ms + witness_timeout_ms_;
  directive.scope = request.scope.empty() ? "exact_span" : "whole_prefix_cache";

  std::vector<index::WorkerResidency> workers;
  for (index::WorkerResidency& w : daemon_->index.Workers()) {
    if (w.model == request.model) workers.push_back(std::move(w));
  }
  if (workers.empty()) {
    return Status::NotFound("model: no registered worker serves '" + request.model + "'");
  }
  std::vector<index::BlockKey> span;
  if (!request.token_ids.empty()) {
    const std::string salt = request.tenant.empty()
                                 ? ""
                                 : router::TenantCacheSalt(daemon_->tenant_secret, request.tenant);
    span = index::RequestChain(daemon_->index.hasher(),
                               {request.model, request.lora_name, request.group_idx}, salt,
                               request.token_ids, workers.front().block_size);
    for (const index::WorkerOverlap& overlap : daemon_->index.Overlap(span)) {
      OwnerProgress owner;
      owner.worker = overlap.worker;
      owner.pending.insert(span.begin(), span.begin() + static_cast<long>(overlap.blocks));
      directive.owners.push_back(std::move(owner));
    }
  } else if (request.block_hash.has_value()) {
    KVGOV_ASSIGN_OR_RETURN(span, daemon_->index.KeysForEngineHashes(
                                     request.worker, std::span(&*request.block_hash, 1),
                                     request.group_idx));
    OwnerProgress owner;
    owner.worker = request.worker;
    owner.pending.insert(span.begin(), span.end());
    directive.owners.push_back(std::move(owner));
  } else {
    for (const index::WorkerResidency& w : workers) {
      if (request.scope == "worker" && w.id != request.worker) continue;
      OwnerProgress owner;
      owner.worker = w.id;
      owner.whole_worker = true;
      for (uint64_t blocks : w.blocks) owner.target_count += blocks;
      directive.owners.push_back(std::move(owner));
    }
    if (request.scope == "worker" && directive.owners.empty()) {
      return Status::NotFound("worker: '" + request.worker + "' does not serve '" +
                              request.model + "'");
    }
  }
  std::string subject_fields = request.model + "|" + request.scope + "|" + request.worker;
  for (index::BlockKey key : span) subject_fields += "|" + std::to_string(key);
  directive.subject = DigestFields("kvgov.invalidation.subject.v1", {subject_fields});
  for (OwnerProgress& owner : directive.owners) {
    if (!owner.whole_worker) owner.target_count = owner.pending.size();
    owner.state = "planned";
    directive.target_count += owner.target_count;
  }

  // The referee, run before any call: a target, a final admission, an
  // admitter. The API caller is the admitter (an authenticated principal
  // once tokens exist); nothing is ever certified for zero targets.
  const bool has_target = !directive.owners.empty() && directive.target_count > 0;
  directive.state = has_target ? "planned" : "failed";
  if (!has_target) directive.failure = "referee_denied: no resident target";
  if (daemon_->replica != nullptr && has_target) {
    // Claimed before it is in the log, so no other replica takes it over
    // while its creator is alive.
    Result<bool> claimed = daemon_->replica->Claim(ClaimName(directive.id));
    if (!claimed.ok()) {
      return Status::Unavailable("governance writes are refused while Redis is unreachable: " +
                                 claimed.status().message());
    }
    if (!*claimed) return Status::Internal("a fresh directive id was already claimed");
    std::lock_guard lock(mu_);
    driving_.insert(directive.id);
  }
  if (Status recorded = Record(directive, "invalidation.planned"); !recorded.ok()) {
    if (daemon_->replica != nullptr) {
      daemon_->replica->ReleaseClaim(ClaimName(directive.id));
      std::lock_guard lock(mu_);
      driving_.erase(directive.id);
    }
    return recorded;
  }
  std::lock_guard lock(mu_);
  if (!has_target) {
    directives_[directive.id] = directive;
    return directive;
  }
  SyncGateLocked(nullptr, directive);
  directives_[directive.id] = directive;
  queue_.emplace_back(directive.id, false);
  wake_.notify_all();
  return directive;
}

void InvalidationManager::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    auto [id, certify] = queue_.front();
    queue_.pop_front();
    lock.unlock();
    if (certify) {
      Certify(id);
    } else {
      Dispatch(id);
    }
    lock.lock();
  }
}

void InvalidationManager::Dispatch(const std::string& id) {
  std::optional<Directive> directive = Get(id);
  if (!directive) return;
  bool any_failed = false;
  for (size_t i = 0; i < directive->owners.size(); ++i) {
    OwnerProgress owner = directive->owners[i];
    // A driver resuming a directive (a restarted kvgov, a replica taking it
    // over) calls again only the owners it has no acknowledgement from.
    if (!NeedsCall(owner)) continue;
    const ingest::EngineSpec* engine = EngineOf(*daemon_, owner.worker);
    connectors::ConnectorConfig config;
    if (engine != nullptr) {
      config.kind =
          engine->connector.empty() ? std::string(ToString(engine->kind)) : engine->connector;
      config.control = engine->control;
      config.webhook_path = engine->connector_path;
    }
    Result<std::unique_ptr<connectors::InvalidationConnector>> connector =
        engine == nullptr || engine->control.empty()
            ? Result<std::unique_ptr<connectors::InvalidationConnector>>(Status::FailedPrecondition(
                  "worker '" + owner.worker + "' has no control URL to send a directive to"))
            : connectors::MakeConnector(config);
    {
      std::lock_guard lock(mu_);
      OwnerProgress& live = directives_[id].owners[i];
      live.dispatch_seq = StreamSeq(*daemon_, owner.worker);
      live.state = "dispatched";
      directives_[id].state = "dispatched";
    }
    if (!connector.ok()) {
      std::lock_guard lock(mu_);
      OwnerProgress& live = directives_[id].owners[i];
      live.state = "failed";
      live.last_error = connector.status().message();
      any_failed = true;
      continue;
    }
    owner.connector = std::string((*connector)->name());
    connectors::EvictionRequest request{owner.worker, {}, directive->reason, id};
    for (index::BlockKey key : owner.pending) {
      char hex[17];
      std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(key));
      request.span_digests.push_back(hex);
    }
    Result<connectors::DispatchResult> result = (*connector)->Dispatch(request, cancel_);
    std::lock_guard lock(mu_);
    OwnerProgress& live = directives_[id].owners[i];
    live.connector = owner.connector;
    if (!result.ok()) {
      live.state = "failed";
      live.last_error = result.status().message();
      any_failed = true;
      continue;
    }
    // Cumulative: a replica taking the directive over adds its own calls.
    live.attempts += static_cast<int>(result->attempts.size());
    live.last_status = result->attempts.empty() ? 0 : result->attempts.back().http_status;
    live.scope = std::string(ToString(result->scope));
    live.degraded = result->degraded;
    live.degrade_reason = result->degrade_reason;
    // A whole-prefix flush clears everything: only AllBlocksCleared (or
    // every target's removal) witnesses it.
    if (live.state != "witnessed") live.state = "acknowledged";
  }
  Directive snapshot;
  {
    std::lock_guard lock(mu_);
    Directive& live = directives_[id];
    if (any_failed) {
      live.state = "failed";
      live.failure = "owner_unreachable";
    } else if (live.state != "witnessed") {
      live.state = "acknowledged";
    }
    snapshot = live;
  }
  if (snapshot.state == "witnessed") return;  // Certify journals it, as the anchor
  if (Status recorded = Record(snapshot, "invalidation." + snapshot.state); !recorded.ok()) {
    std::fprintf(stderr, "kvgov: directive %s not journaled: %s\n", id.c_str(),
                 recorded.ToString().c_str());
  }
}

void InvalidationManager::Observe(std::string_view worker, uint64_t seq,
                                  const EngineEvent& event) {
  std::vector<index::BlockKey> removed;
  const bool cleared = std::holds_alternative<AllBlocksCleared>(event);
  if (const auto* block_removed = std::get_if<BlockRemoved>(&event)) {
    // Resolved before the index applies the removal and forgets the hash.
    Result<std::vector<index::BlockKey>> keys = daemon_->index.KeysForEngineHashes(
        worker, block_removed->block_hashes, block_removed->group_idx);
    if (keys.ok()) removed = *keys;
  } else if (!cleared) {
    return;
  }
  std::lock_guard lock(mu_);
  for (auto& [id, directive] : directives_) {
    if (directive.state != "dispatched" && directive.state != "acknowledged") continue;
    if (!DrivesLocked(id)) continue;
    bool all_witnessed = true;
    for (OwnerProgress& owner : directive.owners) {
      // Only what the engine published after kvgov's call counts as proof.
      if (owner.worker == worker && owner.state != "witnessed" && owner.state != "failed" &&
          owner.state != "planned" && static_cast<int64_t>(seq) > owner.dispatch_seq) {
        std::vector<index::BlockKey> released;
        if (cleared) {
          released.assign(owner.pending.begin(), owner.pending.end());
          owner.pending.clear();
          owner.witness_kind = "all_blocks_cleared";
          owner.witness_seqs.push_back(seq);
          daemon_->gate.SetPending(owner.worker, released, owner.whole_worker, false);
          owner.whole_worker = false;
        } else if (!owner.whole_worker) {
          bool hit = false;
          for (index::BlockKey key : removed) {
            if (owner.pending.erase(key) > 0) {
              released.push_back(key);
              hit = true;
            }
          }
          if (hit) {
            owner.witness_kind = "block_removed";
            owner.witness_seqs.push_back(seq);
            daemon_->gate.SetPending(owner.worker, released, false, false);
          }
        }
        if (owner.pending.empty() && !owner.whole_worker) owner.state = "witnessed";
      }
      all_witnessed &= owner.state == "witnessed";
    }
    if (all_witnessed) {
      directive.state = "witnessed";
      queue_.emplace_back(id, true);
      wake_.notify_all();
    }
  }
}

void InvalidationManager::Certify(const std::string& id) {
  std::optional<Directive> directive = Get(id);
  if (!directive || directive->state != "witnessed") return;
  // The journal row recording the witness is the certificate's anchor: the
  // certificate can only exist after the removal was seen and recorded.
  const std::string record = EncodeDirectiveRecord(*directive);
  const store::WriteOp state{store::Column::kGovernance,
                             std::string(kDirectivePrefix) + directive->id, record};
  Result<journal::Row> anchor =
      RecordGovernance(*daemon_, "invalidation.witnessed", directive->id, record, {&state, 1});
  if (!anchor.ok()) {
    std::fprintf(stderr, "kvgov: directive %s witness not journaled: %s\n", id.c_str(),
                 anchor.status().ToString().c_str());
    CountCertificate("failed");
    return;
  }
  cert::CertificateInput input;
  input.subject = directive->subject;
  input.directive_id = directive->id;
  input.scope = directive->scope == "exact_span" ? KVEvictionScope::kExactSpan
                                                 : KVEvictionScope::kWholePrefixCache;
  for (const OwnerProgress& owner : directive->owners) {
    cert::CertOwner c;
    c.worker = owner.worker;
    Result<cert::CertConnector> connector = ParseEnum<cert::CertConnector>(owner.connector);
    c.connector = connector.ok() ? *connector : cert::CertConnector::kWebhook;
    c.scope = owner.scope == "exact_span" ? KVEvictionScope::kExactSpan
                                          : KVEvictionScope::kWholePrefixCache;
    c.degraded = owner.degraded;
    c.degrade_reason = owner.degrade_reason;
    c.witness.kind = owner.witness_kind == "all_blocks_cleared"
                         ? cert::WitnessKind::kAllBlocksCleared
                         : cert::WitnessKind::kBlockRemoved;
    c.witness.event_seqs = owner.witness_seqs;
    input.owners.push_back(std::move(c));
  }
  input.target_count = directive->target_count;
  input.anchor = {anchor->seq, anchor->prev_hash, anchor->hash};
  input.issued_at_ms = WallClockMillis();
  Result<cert::DeletionCertificate> certificate = cert::MintCertificate(input, *daemon_->issuer);
  Result<std::string> encoded = certificate.ok() ? cert::EncodeCertificateJson(*certificate)
                                                 : Result<std::string>(certificate.status());
  if (!encoded.ok()) {
    std::fprintf(stderr, "kvgov: directive %s not certified: %s\n", id.c_str(),
                 encoded.status().ToString().c_str());
    CountCertificate("failed");
    return;
  }
  // "certified" becomes visible only once the certificate is stored and
  // journaled: anyone who sees the state can fetch the certificate.
  Directive certified = *directive;
  certified.state = "certified";
  certified.certificate_id = certificate->certificate_id;
  const std::string certified_record = EncodeDirectiveRecord(certified);
  const std::array<store::WriteOp, 2> ops = {
      store::WriteOp{store::Column::kGovernance,
                     std::string(kCertificatePrefix) + certificate->certificate_id, *encoded},
      store::WriteOp{store::Column::kGovernance, std::string(kDirectivePrefix) + id,
                     certified_record}};
  if (Status recorded = RecordGovernance(*daemon_, "certificate", certificate->certificate_id,
                                         *encoded, ops)
                            .status();
      !recorded.ok()) {
    std::fprintf(stderr, "kvgov: certificate for %s not stored: %s\n", id.c_str(),
                 recorded.ToString().c_str());
    CountCertificate("failed");
    return;
  }
  {
    std::lock_guard lock(mu_);
    Directive& live = directives_[id];
    live.state = "certified";
    live.certificate_id = certificate->certificate_id;
  }
  CountCertificate("issued");
}

void InvalidationManager::CountCertificate(std::string_view outcome) {
  if (daemon_->certificates != nullptr) daemon_->certificates->WithLabels({outcome})->Inc();
}

void InvalidationManager::Tick(int64_t now_ms) {
  if (daemon_->replica != nullptr) TendClaims(now_ms);
  std::vector<Directive> timed_out;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, directive] : directives_) {
      if ((directive.state == "dispatched" || directive.state == "acknowledged") &&
          now_ms >= directive.deadline_ms && DrivesLocked(id)) {
        directive.state = "failed";
        directive.failure = "witness_timeout";
        // The targets stay without route credit: nobody saw them go.
        timed_out.push_back(directive);
      }
    }
  }
  for (const Directive& directive : timed_out) {
    (void)Record(directive, "invalidation.failed");
  }
}

void InvalidationManager::TendClaims(int64_t now_ms) {
  replication::Replica& replica = *daemon_->replica;
  std::vector<std::string> driven;
  std::vector<std::string> orphans;
  {
    std::lock_guard lock(mu_);
    // A third of the claim's life between rounds: a live driver renews
    // twice before its claim could lapse.
    if (now_ms < next_claim_round_ms_) return;
    next_claim_round_ms_ = now_ms + daemon_->options.claim_ttl_ms / 3;
    for (const auto& [id, directive] : directives_) {
      if (driving_.contains(id)) {
        driven.push_back(id);
      } else if (!Finished(directive)) {
        // Claimable only once its driver stopped renewing the claim.
        orphans.push_back(id);
      }
    }
  }
  for (const std::string& id : driven) {
    bool finished = false;
    {
      std::lock_guard lock(mu_);
      finished = Finished(directives_[id]);
    }
    if (finished) {
      replica.ReleaseClaim(ClaimName(id));
      std::lock_guard lock(mu_);
      driving_.erase(id);
      continue;
    }
    Result<bool> renewed = replica.RenewClaim(ClaimName(id));
    if (renewed.ok() && !*renewed) {
      // Another replica took it over: from now on its records are the truth.
      std::fprintf(stderr, "kvgov replica %s: lost the claim on directive %s\n",
                   replica.id().c_str(), id.c_str());
      std::lock_guard lock(mu_);
      driving_.erase(id);
    }
  }
  for (const std::string& id : orphans) {
    Result<bool> claimed = replica.Claim(ClaimName(id));
    if (!claimed.ok() || !*claimed) continue;
    std::lock_guard lock(mu_);
    Directive& directive = directives_[id];
    if (Finished(directive)) {
      replica.ReleaseClaim(ClaimName(id));
      continue;
    }
    std::fprintf(stderr, "kvgov replica %s: taking over directive %s (%s)\n",
                 replica.id().c_str(), id.c_str(), directive.state.c_str());
    driving_.insert(id);
    directive.deadline_ms = now_ms + witness_timeout_ms_;
    queue_.emplace_back(id, directive.state == "witnessed");
    wake_.notify_all();
  }
}

std::optional<Directive> InvalidationManager::Get(std::string_view id) const {
  std::lock_guard lock(mu_);
  auto it = directives_.find(id);
  if (it == directives_.end()) return std::nullopt;
  return it->second;
}

std::map<std::string, uint64_t, std::less<>> InvalidationManager::CountByState() const {
  std::map<std::string, uint64_t, std::less<>> counts;
  for (std::string_view state :
       {"planned", "dispatched", "acknowledged", "witnessed", "certified", "failed"}) {
    counts.emplace(state, 0);
  }
  std::lock_guard lock(mu_);
  for (const auto& [id, directive] : directives_) ++counts[directive.state];
  return counts;
}

void InvalidationManager::CallRecoveredOwners() {
  std::lock_guard lock(mu_);
  for (std::string& id : to_call_) queue_.emplace_back(std::move(id), false);
  to_call_.clear();
  wake_.notify_all();
}

Status InvalidationManager::Recover() {
  const int64_t now_ms = WallClockMillis();
  Status unreadable;
  KVGOV_RETURN_IF_ERROR(daemon_->store->Scan(
      store::Column::kGovernance, kDirectivePrefix, "invalidation0",
      [&](std::string_view key, std::string_view value) {
        Result<Directive> decoded = DecodeDirectiveRecord(value);
        if (!decoded.ok()) {
          unreadable = Status::Corruption(std::string(key) + ": " + decoded.status().message());
          return false;
        }
        Directive d = *std::move(decoded);
        std::lock_guard lock(mu_);
        SyncGateLocked(nullptr, d);
        // A single kvgov was the directive's only driver and drives it on:
        // owners not yet called are called, and every removal still counts
        // when the engines' streams show it, caught up through replay. A
        // replica's directive lives on with whichever replica claims it.
        if (!Finished(d) && !daemon_->replicated()) {
          d.deadline_ms = std::max(d.deadline_ms, now_ms + witness_timeout_ms_);
          if (std::any_of(d.owners.begin(), d.owners.end(), NeedsCall)) {
            to_call_.push_back(d.id);
          }
        }
        directives_[d.id] = d;
        return true;
      }));
  return unreadable;
}

}  // namespace kvgov::server
