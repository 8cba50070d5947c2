#include "kvgov/governance/directive_lifecycle.h"

#include <algorithm>
#include <utility>

#include "kvgov/core/digest.h"

namespace kvgov::governance {
namespace {

std::string JournalKind(DirectiveState state) {
  return "invalidation." + std::string(ToString(state));
}

// Dispatched or acknowledged: called, answers and removals still to come.
bool AwaitsWitness(DirectiveState state) {
  return state == DirectiveState::kDispatched || state == DirectiveState::kAcknowledged;
}

// One event against one directive. Each handler leaves a directive it does
// not apply to untouched.
class Transition {
 public:
  Transition(Directive& directive, int64_t now_ms, int64_t witness_timeout_ms)
      : d_(directive), now_ms_(now_ms), witness_timeout_ms_(witness_timeout_ms) {}

  DirectiveEffects operator()(const CallStarted& event) {
    if (!MayCall(d_, event.owner)) return {};
    OwnerProgress* owner = &d_.owners[event.owner];
    owner->state = OwnerState::kDispatched;
    owner->dispatch_seq = event.stream_seq;
    d_.state = DirectiveState::kDispatched;
    return {};
  }

  DirectiveEffects operator()(const CallAnswered& event) {
    OwnerProgress* owner = Owner(event.owner);
    // An owner may have been witnessed while its answer was on the way
    // (a witnessed owner without a scope has not answered yet).
    const bool awaited =
        owner != nullptr && (owner->state == OwnerState::kDispatched ||
                             (owner->state == OwnerState::kWitnessed && !owner->scope));
    if (!awaited) return {};
    owner->connector = event.connector;
    // Cumulative: a driver resuming the directive adds its own calls.
    owner->attempts += event.attempts;
    owner->last_status = event.last_status;
    owner->scope = event.scope;
    owner->degraded = event.degraded;
    owner->degrade_reason = event.degrade_reason;
    // A whole-prefix flush clears everything: only ClearSeen (or every
    // target's removal) witnesses it, never the answer.
    if (owner->state != OwnerState::kWitnessed) owner->state = OwnerState::kAcknowledged;
    return {};
  }

  DirectiveEffects operator()(const CallFailed& event) {
    OwnerProgress* owner = Owner(event.owner);
    if (owner == nullptr || owner->state != OwnerState::kDispatched) return {};
    owner->connector = event.connector;
    owner->state = OwnerState::kFailed;
    owner->last_error = event.error;
    return {};
  }

  DirectiveEffects operator()(const CallsEnded&) {
    if (d_.state != DirectiveState::kDispatched) return {};
    const bool any_failed =
        std::any_of(d_.owners.begin(), d_.owners.end(),
                    [](const OwnerProgress& owner) { return owner.state == OwnerState::kFailed; });
    if (any_failed) {
      d_.state = DirectiveState::kFailed;
      d_.failure = "owner_unreachable";
    } else {
      d_.state = DirectiveState::kAcknowledged;
    }
    DirectiveEffects effects;
    effects.journal = JournalKind(d_.state);
    return effects;
  }

  DirectiveEffects operator()(const RemovalSeen& event) {
    // A revocation's residue is counted, not named: ResidueSeen witnesses it.
    if (d_.revocation) return {};
    return Witness(event.worker, event.seq, [&](OwnerProgress& owner) {
      WorkerTargets released{owner.worker, {}, false};
      if (owner.whole_worker) return released;  // only a clear witnesses a whole worker
      for (index::BlockKey key : event.keys) {
        if (owner.pending.erase(key) > 0) released.keys.push_back(key);
      }
      if (!released.keys.empty()) {
        owner.witness_kind = WitnessKind::kBlockRemoved;
        owner.witness_seqs.push_back(event.seq);
      }
      return released;
    });
  }

  DirectiveEffects operator()(const ClearSeen& event) {
    return Cleared(event.worker, event.seq, WitnessKind::kAllBlocksCleared);
  }

  DirectiveEffects operator()(const RestartSeen& event) {
    // The new process numbers its batches from the start: each of them
    // comes after the calls made to the old one.
    for (OwnerProgress& owner : d_.owners) {
      if (owner.worker == event.worker && Called(owner)) owner.dispatch_seq = -1;
    }
    return Cleared(event.worker, event.seq, WitnessKind::kEngineRestart);
  }

  DirectiveEffects operator()(const ResidueSeen& event) {
    DirectiveEffects effects;
    if (!d_.revocation || !AwaitsWitness(d_.state)) return effects;
    bool all_witnessed = true;
    for (OwnerProgress& owner : d_.owners) {
      // With a flush, only what is gone after the owner was called counts.
      const bool watched =
          d_.revocation->flush ? Called(owner) : owner.state == OwnerState::kPlanned;
      if (owner.worker == event.worker && watched) {
        owner.residue = event.residue;
        owner.unattributed = event.unattributed;
        if (owner.residue == 0 && owner.unattributed == 0) {
          owner.state = OwnerState::kWitnessed;
          if (!owner.witness_kind) owner.witness_kind = WitnessKind::kBlockRemoved;
          // The batch after which the count was read: the removals that
          // emptied it are at or before it.
          if (event.stream_seq >= 0) {
            owner.witness_seqs.push_back(static_cast<uint64_t>(event.stream_seq));
          }
        }
      }
      all_witnessed &= owner.state == OwnerState::kWitnessed;
    }
    if (all_witnessed) {
      d_.state = DirectiveState::kWitnessed;
      // Not before the epoch's own moment, whatever another replica's clock says.
      d_.revocation->removed_by_ms = std::max(now_ms_, d_.revocation->unreachable_since_ms);
      effects.certify = true;
    }
    return effects;
  }

  DirectiveEffects operator()(const Tick&) {
    // deadline 0: a revocation left to the engines' own evictions.
    if (!AwaitsWitness(d_.state) || d_.deadline_ms == 0 || now_ms_ < d_.deadline_ms) return {};
    // The targets stay held: nobody saw them go.
    d_.state = DirectiveState::kFailed;
    d_.failure = "witness_timeout";
    DirectiveEffects effects;
    effects.journal = JournalKind(d_.state);
    return effects;
  }

  DirectiveEffects operator()(const Certified& event) {
    if (d_.state != DirectiveState::kWitnessed) return {};
    d_.state = DirectiveState::kCertified;
    d_.certificate_id = event.certificate_id;
    return {};
  }

  DirectiveEffects operator()(const DriverResumed&) {
    if (IsFinished(d_.state)) return {};
    if (d_.deadline_ms != 0)
      d_.deadline_ms = std::max(d_.deadline_ms, now_ms_ + witness_timeout_ms_);
    DirectiveEffects effects;
    if (d_.state == DirectiveState::kWitnessed) {
      effects.certify = true;
      return effects;
    }
    for (size_t i = 0; i < d_.owners.size(); ++i) {
      if (MayCall(d_, i)) effects.call.push_back(i);
    }
    return effects;
  }

 private:
  OwnerProgress* Owner(size_t index) {
    if (IsFinished(d_.state) || index >= d_.owners.size()) return nullptr;
    return &d_.owners[index];
  }

  static bool Called(const OwnerProgress& owner) {
    return owner.state == OwnerState::kDispatched || owner.state == OwnerState::kAcknowledged;
  }

  // Every block of `worker` is gone as of batch `seq` (a clear, or a
  // restart): witnesses its owners called before it.
  DirectiveEffects Cleared(std::string_view worker, uint64_t seq, WitnessKind kind) {
    if (d_.revocation) {
      // The flush's own proof, kept for the certificate; the residue count
      // still decides (a clear empties everything, so it follows).
      for (OwnerProgress& owner : d_.owners) {
        if (owner.worker == worker && Called(owner) &&
            static_cast<int64_t>(seq) > owner.dispatch_seq) {
          RecordWitness(owner, seq, kind);
        }
      }
      return {};
    }
    return Witness(worker, seq, [&](OwnerProgress& owner) {
      WorkerTargets released{
          owner.worker, {owner.pending.begin(), owner.pending.end()}, owner.whole_worker};
      owner.pending.clear();
      owner.whole_worker = false;
      RecordWitness(owner, seq, kind);
      return released;
    });
  }

  // A restart's seq is the new process's: the old one's seqs witnessed
  // before it are not comparable, and the restart alone shows every block
  // gone, so it is the whole witness.
  static void RecordWitness(OwnerProgress& owner, uint64_t seq, WitnessKind kind) {
    owner.witness_kind = kind;
    if (kind == WitnessKind::kEngineRestart) owner.witness_seqs.clear();
    owner.witness_seqs.push_back(seq);
  }

  // Folds one batch of `worker`'s stream into every owner on it that was
  // called before the batch: only what the engine published after kvgov's
  // call counts as proof. `take` removes what the batch shows gone and
  // returns it.
  template <typename Take>
  DirectiveEffects Witness(std::string_view worker, uint64_t seq, Take take) {
    DirectiveEffects effects;
    if (!AwaitsWitness(d_.state)) return effects;
    bool all_witnessed = true;
    for (OwnerProgress& owner : d_.owners) {
      if (owner.worker == worker && Called(owner) &&
          static_cast<int64_t>(seq) > owner.dispatch_seq) {
        WorkerTargets released = take(owner);
        if (!released.keys.empty() || released.whole_worker) {
          effects.release.push_back(std::move(released));
        }
        if (owner.pending.empty() && !owner.whole_worker) owner.state = OwnerState::kWitnessed;
      }
      all_witnessed &= owner.state == OwnerState::kWitnessed;
    }
    if (all_witnessed) {
      // Journaled by the certify step, as the certificate's anchor.
      d_.state = DirectiveState::kWitnessed;
      effects.certify = true;
    }
    return effects;
  }

  Directive& d_;
  const int64_t now_ms_;
  const int64_t witness_timeout_ms_;
};

}  // namespace

std::vector<OwnerProgress> OwnersOfSpan(std::span<const index::BlockKey> span,
                                        std::span<const index::WorkerOverlap> holders) {
  std::vector<OwnerProgress> owners;
  for (const index::WorkerOverlap& holder : holders) {
    const size_t blocks = std::min<size_t>(holder.blocks, span.size());
    owners.push_back(OwnerOfKeys(holder.worker, span.first(blocks)));
  }
  return owners;
}

OwnerProgress OwnerOfKeys(std::string worker, std::span<const index::BlockKey> keys) {
  OwnerProgress owner;
  owner.worker = std::move(worker);
  owner.pending.insert(keys.begin(), keys.end());
  owner.target_count = owner.pending.size();
  return owner;
}

std::vector<OwnerProgress> OwnersOfWorkers(std::span<const index::WorkerResidency> workers) {
  std::vector<OwnerProgress> owners;
  for (const index::WorkerResidency& worker : workers) {
    OwnerProgress owner;
    owner.worker = worker.id;
    owner.whole_worker = true;
    for (uint64_t blocks : worker.blocks) owner.target_count += blocks;
    owners.push_back(std::move(owner));
  }
  return owners;
}

std::string DirectiveSubject(std::string_view model, std::string_view requested_scope,
                             std::string_view worker, std::span<const index::BlockKey> span) {
  std::string fields =
      std::string(model) + "|" + std::string(requested_scope) + "|" + std::string(worker);
  for (index::BlockKey key : span) fields += "|" + std::to_string(key);
  return DigestFields("kvgov.invalidation.subject.v1", {fields});
}

std::string RevocationSubject(std::string_view model, std::string_view tenant,
                              const Revocation& revocation) {
  return DigestFields("kvgov.revocation.subject.v1",
                      {model, tenant, std::to_string(revocation.all_models_epoch),
                       std::to_string(revocation.model_epoch)});
}

bool AwaitsCall(const OwnerProgress& owner) {
  return owner.state == OwnerState::kPlanned || owner.state == OwnerState::kDispatched;
}

bool MayCall(const Directive& directive, size_t owner) {
  // A revocation without a flush has nobody to call: the epoch does it.
  if (directive.revocation && !directive.revocation->flush) return false;
  return !IsFinished(directive.state) && directive.state != DirectiveState::kWitnessed &&
         owner < directive.owners.size() && AwaitsCall(directive.owners[owner]);
}

std::vector<WorkerTargets> PendingTargets(const Directive& directive) {
  std::vector<WorkerTargets> targets;
  for (const OwnerProgress& owner : directive.owners) {
    if (owner.pending.empty() && !owner.whole_worker) continue;
    targets.push_back(
        {owner.worker, {owner.pending.begin(), owner.pending.end()}, owner.whole_worker});
  }
  return targets;
}

DirectiveLifecycle::Planned DirectiveLifecycle::Plan(DirectiveDraft draft, int64_t now_ms) const {
  Planned planned;
  Directive& d = planned.directive;
  d.id = std::move(draft.id);
  d.reason = std::move(draft.reason);
  d.model = std::move(draft.model);
  d.tenant = std::move(draft.tenant);
  d.scope = draft.scope;
  d.subject = std::move(draft.subject);
  d.owners = std::move(draft.owners);
  d.created_ms = now_ms;
  d.deadline_ms = now_ms + witness_timeout_ms_;
  for (OwnerProgress& owner : d.owners) {
    owner.state = OwnerState::kPlanned;
    d.target_count += owner.target_count;
  }
  if (draft.revocation) {
    d.revocation = draft.revocation;
    planned.effects.journal = JournalKind(DirectiveState::kPlanned);
    if (d.owners.empty()) {
      // Nothing of the old epochs is resident: gone as of its own moment.
      d.state = DirectiveState::kWitnessed;
      d.revocation->removed_by_ms = now_ms;
      d.deadline_ms = 0;
      planned.effects.certify = true;
    } else if (d.revocation->flush) {
      d.state = DirectiveState::kPlanned;
      for (size_t i = 0; i < d.owners.size(); ++i) planned.effects.call.push_back(i);
    } else {
      d.state = DirectiveState::kAcknowledged;
      d.deadline_ms = 0;
    }
    return planned;
  }
  // The referee: a target, a final admission, an admitter. The API caller
  // is the admitter (an authenticated principal where tokens are on).
  const bool has_target = !d.owners.empty() && d.target_count > 0;
  d.state = has_target ? DirectiveState::kPlanned : DirectiveState::kFailed;
  if (!has_target) d.failure = "referee_denied: no resident target";
  // Journaled as planned even when denied: the row records the request.
  planned.effects.journal = JournalKind(DirectiveState::kPlanned);
  if (has_target) {
    planned.effects.hold = PendingTargets(d);
    for (size_t i = 0; i < d.owners.size(); ++i) planned.effects.call.push_back(i);
  }
  return planned;
}

DirectiveEffects DirectiveLifecycle::Apply(Directive& directive, const DirectiveEvent& event,
                                           int64_t now_ms) const {
  return std::visit(Transition(directive, now_ms, witness_timeout_ms_), event);
}

}  // namespace kvgov::governance
