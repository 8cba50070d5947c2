#pragma once

// An invalidation directive's state, as the store, the replicated log and
// the API carry it (JSON: include/kvgov/codec/directive_record.h). Plain
// data; the rules that move it between states are directive_lifecycle.h.

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvgov/core/vocabulary.h"
#include "kvgov/index/block_key.h"

namespace kvgov::governance {

/// planned -> dispatched -> acknowledged -> witnessed -> certified, or
/// failed with a reason (Directive::failure).
enum class DirectiveState { kPlanned, kDispatched, kAcknowledged, kWitnessed, kCertified, kFailed };

/// One owner's part: planned -> dispatched (called, no answer recorded yet)
/// -> acknowledged (answered 2xx) -> witnessed (seen gone), or failed
/// (unreachable, or no control API). A removal can be witnessed before the
/// owner's answer arrives.
enum class OwnerState { kPlanned, kDispatched, kAcknowledged, kWitnessed, kFailed };

/// True for the states a directive never leaves.
constexpr bool IsFinished(DirectiveState state) {
  return state == DirectiveState::kCertified || state == DirectiveState::kFailed;
}

/// One owner's part of a directive.
struct OwnerProgress {
  std::string worker;
  std::string connector;                 // vllm, sglang, ... ("" until a connector was made for it)
  std::optional<KVEvictionScope> scope;  // what the owner did, once it answered
  bool degraded = false;
  std::string degrade_reason;
  int attempts = 0;
  int last_status = 0;
  std::string last_error;
  OwnerState state = OwnerState::kPlanned;
  bool whole_worker = false;          // every block of the worker is a target
  std::set<index::BlockKey> pending;  // targets not yet seen removed
  uint64_t target_count = 0;
  int64_t dispatch_seq = -1;                // the worker's stream seq when dispatched
  std::vector<uint64_t> witness_seqs;       // the event seqs that showed the removal
  std::optional<WitnessKind> witness_kind;  // the last event that showed one
  // A tenant revocation's owner: blocks of the tenant's revoked salts it
  // held when last looked at, and blocks whose salt cannot be told
  // (brought back by a restart of kvgov before they were attributed), which
  // count as residue too: fail-closed.
  uint64_t residue = 0;
  uint64_t unattributed = 0;

  friend bool operator==(const OwnerProgress&, const OwnerProgress&) = default;
};

/// What a tenant revocation (a directive of requested scope "tenant") did:
/// the tenant's salt epochs after it, and when its old blocks became
/// unreachable and were seen gone (docs/adr/0028).
struct Revocation {
  uint64_t all_models_epoch = 0;  // the tenant's epoch for every model, after it
  uint64_t model_epoch = 0;       // its epoch for Directive::model ("": 0)
  // When the new epoch was recorded: from then on no salt kvgov forwards or
  // hands out reaches a block of the tenant's earlier salts.
  int64_t unreachable_since_ms = 0;
  bool flush = false;  // the owners' prefix caches are reset too (as for scope "model")
  // When the residue was seen gone on every owner's stream; 0 until then.
  int64_t removed_by_ms = 0;

  friend bool operator==(const Revocation&, const Revocation&) = default;
};

/// An invalidation directive: planned over the residency index, dispatched
/// to each owning engine's control API, witnessed in the engine's own event
/// stream, then certified. Failure reasons: "referee_denied: ...",
/// "owner_unreachable", "witness_timeout".
struct Directive {
  std::string id;
  DirectiveState state = DirectiveState::kPlanned;
  std::string failure;
  std::string reason;
  std::string model;
  std::string tenant;   // whose span (named by tokens under a tenant), or who is revoked
  std::string subject;  // 64 hex: what the certificate names
  KVEvictionScope scope = KVEvictionScope::kExactSpan;  // as asked
  uint64_t target_count = 0;
  std::vector<OwnerProgress> owners;
  std::string certificate_id;
  int64_t created_ms = 0;
  int64_t deadline_ms = 0;  // witnessed by then, or failed; 0: no deadline
  // Set for a tenant revocation (then `model` is "" for every model).
  std::optional<Revocation> revocation;

  friend bool operator==(const Directive&, const Directive&) = default;
};

}  // namespace kvgov::governance

namespace kvgov {
template <>
struct EnumSpelling<governance::DirectiveState> {
  static constexpr std::string_view kName = "directive state";
  static constexpr auto kValues =
      std::to_array<std::pair<governance::DirectiveState, std::string_view>>(
          {{governance::DirectiveState::kPlanned, "planned"},
           {governance::DirectiveState::kDispatched, "dispatched"},
           {governance::DirectiveState::kAcknowledged, "acknowledged"},
           {governance::DirectiveState::kWitnessed, "witnessed"},
           {governance::DirectiveState::kCertified, "certified"},
           {governance::DirectiveState::kFailed, "failed"}});
};
template <>
struct EnumSpelling<governance::OwnerState> {
  static constexpr std::string_view kName = "directive owner state";
  static constexpr auto kValues =
      std::to_array<std::pair<governance::OwnerState, std::string_view>>(
          {{governance::OwnerState::kPlanned, "planned"},
           {governance::OwnerState::kDispatched, "dispatched"},
           {governance::OwnerState::kAcknowledged, "acknowledged"},
           {governance::OwnerState::kWitnessed, "witnessed"},
           {governance::OwnerState::kFailed, "failed"}});
};
}  // namespace kvgov
