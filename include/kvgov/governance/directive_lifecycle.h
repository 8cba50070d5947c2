#pragma once

// The rules that move an invalidation directive between its states, as a
// pure state machine: events and the time in, the next state and the
// effects to perform out. No I/O, no clock, no locks: the driver
// (src/server/invalidations.cc) calls the engines, journals, mints and
// keeps the directives; this decides what each of those steps means.
//
//   Plan ──► planned ──CallStarted──► dispatched ──CallsEnded──► acknowledged
//               │                         │  ▲ CallAnswered/CallFailed │
//               │ (no target)             │  └─ RemovalSeen/ClearSeen ─┤ (before
//               ▼                         ▼     (after the call's seq)  │  or after
//        failed: referee_denied    failed: owner_unreachable           ▼  the answer)
//                                  failed: witness_timeout ◄── Tick  witnessed
//                                                                      │ Certified
//                                                                      ▼
//                                                                  certified
//
// Failed and certified are final: no event changes a finished directive.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "kvgov/governance/directive.h"
#include "kvgov/index/block_key.h"
#include "kvgov/index/residency_index.h"

namespace kvgov::governance {

/// Targets on one worker, for the governance gate: while held they earn no
/// route credit there (SetPending(worker, keys, whole_worker, ...)).
struct WorkerTargets {
  std::string worker;
  std::vector<index::BlockKey> keys;
  bool whole_worker = false;
  friend bool operator==(const WorkerTargets&, const WorkerTargets&) = default;
};

/// What the driver must do after a transition, in this order: move the
/// gate's holds, journal the directive's record, call the owners, certify.
struct DirectiveEffects {
  std::vector<WorkerTargets> hold;     // withhold credit: planned targets
  std::vector<WorkerTargets> release;  // give credit back: targets seen gone
  /// Journal the directive's record (one synced write) under this kind,
  /// e.g. "invalidation.acknowledged".
  std::optional<std::string> journal;
  std::vector<size_t> call;  // owners to call, by index into Directive::owners
  /// Journal the witnessed record (the certificate's anchor), mint the
  /// certificate, store it with the certified record, then apply
  /// Certified.
  bool certify = false;

  bool empty() const {
    return hold.empty() && release.empty() && !journal && call.empty() && !certify;
  }
  friend bool operator==(const DirectiveEffects&, const DirectiveEffects&) = default;
};

/// The driver is about to call owner `owner`; the worker's stream was at
/// `stream_seq` (-1 when it has applied nothing): only removals published
/// after it count as its witness.
struct CallStarted {
  size_t owner = 0;
  int64_t stream_seq = -1;
};

/// The owner answered 2xx (the connector's DispatchResult).
struct CallAnswered {
  size_t owner = 0;
  std::string connector;
  int attempts = 0;  // this call's attempts; added to the owner's count
  int last_status = 0;
  KVEvictionScope scope = KVEvictionScope::kWholePrefixCache;
  bool degraded = false;
  std::string degrade_reason;
};

/// The owner could not be reached, refused, or has no control API.
struct CallFailed {
  size_t owner = 0;
  std::string connector;  // "" when no connector could be made
  std::string error;
};

/// Every owner of the round has answered or failed.
struct CallsEnded {};

/// Batch `seq` of `worker`'s stream removes `keys` (resolved before the
/// index forgets their engine hashes).
struct RemovalSeen {
  std::string worker;
  uint64_t seq = 0;
  std::vector<index::BlockKey> keys;
};

/// Batch `seq` of `worker`'s stream clears every block.
struct ClearSeen {
  std::string worker;
  uint64_t seq = 0;
};

/// `worker`'s engine restarted: its batches count from the start again
/// (batch `seq` is the first kvgov saw of the new process). The restart
/// emptied its cache, which witnesses every owner on it as a clear does;
/// and the new process's seqs, though smaller, all come after the calls
/// made to the old one.
struct RestartSeen {
  std::string worker;
  uint64_t seq = 0;
};

/// A tenant revocation's residue on `worker`, read from the residency
/// index after its stream's latest batches: blocks of the tenant's revoked
/// salts, and blocks whose salt cannot be told. Both at zero witness the
/// owner (after its flush, when one was asked for).
struct ResidueSeen {
  std::string worker;
  uint64_t residue = 0;
  uint64_t unattributed = 0;
  int64_t stream_seq = -1;  // the worker's stream when read: the witness's seq
};

/// Time passed: a directive not witnessed by its deadline fails.
struct Tick {};

/// The certificate is minted and stored with the certified record.
struct Certified {
  std::string certificate_id;
};

/// A driver takes the directive up again: a restarted single kvgov, or a
/// replica whose claim it now holds. The deadline is renewed; owners
/// without a recorded answer are called again; a witnessed directive is
/// certified.
struct DriverResumed {};

using DirectiveEvent =
    std::variant<CallStarted, CallAnswered, CallFailed, CallsEnded, RemovalSeen, ClearSeen,
                 RestartSeen, ResidueSeen, Tick, Certified, DriverResumed>;

/// A directive before planning: what it names and who holds it, resolved
/// against the residency index by the caller (OwnersOfSpan and friends).
struct DirectiveDraft {
  std::string id;
  std::string reason;
  std::string model;
  std::string tenant;
  KVEvictionScope scope = KVEvictionScope::kExactSpan;
  std::string subject;  // DirectiveSubject(...) or RevocationSubject(...)
  std::vector<OwnerProgress> owners;
  // A tenant revocation: its owners are the workers holding residue (their
  // residue and unattributed counts set), and it has no targets to hold.
  std::optional<Revocation> revocation;
};

/// Each worker holding a leading part of `span` owns that part.
std::vector<OwnerProgress> OwnersOfSpan(std::span<const index::BlockKey> span,
                                        std::span<const index::WorkerOverlap> holders);

/// `worker` owns exactly `keys`.
OwnerProgress OwnerOfKeys(std::string worker, std::span<const index::BlockKey> keys);

/// Each worker owns every block it holds.
std::vector<OwnerProgress> OwnersOfWorkers(std::span<const index::WorkerResidency> workers);

/// What the certificate names: 64 hex over the model, the requested scope
/// ("", "worker" or "model"), the worker and the span's keys in order.
std::string DirectiveSubject(std::string_view model, std::string_view requested_scope,
                             std::string_view worker, std::span<const index::BlockKey> span);

/// What a tenant revocation's certificate names: 64 hex over the model
/// ("" for every model), the tenant and the epochs it advanced to.
std::string RevocationSubject(std::string_view model, std::string_view tenant,
                              const Revocation& revocation);

/// True for an owner whose call may not have reached it: planned, or
/// dispatched without a recorded answer.
bool AwaitsCall(const OwnerProgress& owner);

/// True when owner `owner` is to be called now: the directive is neither
/// finished nor witnessed and the owner awaits a call. CallStarted applies
/// exactly then; a driver checks it before it calls.
bool MayCall(const Directive& directive, size_t owner);

/// Every target still pending, by worker (what the gate holds for it).
std::vector<WorkerTargets> PendingTargets(const Directive& directive);

/// The lifecycle. Stateless past its policy; thread-compatible (const).
class DirectiveLifecycle {
 public:
  explicit DirectiveLifecycle(int64_t witness_timeout_ms)
      : witness_timeout_ms_(witness_timeout_ms) {}

  struct Planned {
    Directive directive;
    DirectiveEffects effects;
  };

  /// The referee, run before any call: a directive with a resident target
  /// is planned (its targets held, journaled, every owner to call) with a
  /// deadline of now + the witness timeout; one without is failed
  /// "referee_denied: no resident target" and only journaled. Nothing is
  /// ever certified for zero targets, but a tenant revocation: its epoch
  /// took effect whatever was resident, so one with no residue is
  /// witnessed at once and certified. A revocation without a flush calls
  /// nobody and has no deadline: it is acknowledged (the epoch is in
  /// force) and waits for the engines to evict the residue.
  Planned Plan(DirectiveDraft draft, int64_t now_ms) const;

  /// Applies one event. An event that does not apply in the directive's
  /// state (or names no owner of it) changes nothing and asks for nothing.
  DirectiveEffects Apply(Directive& directive, const DirectiveEvent& event, int64_t now_ms) const;

  int64_t witness_timeout_ms() const { return witness_timeout_ms_; }

 private:
  const int64_t witness_timeout_ms_;
};

}  // namespace kvgov::governance
