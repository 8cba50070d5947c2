#pragma once

// The closed vocabularies of the governance envelope, with their exact wire
// spellings. Spellings follow docs/formats/envelope.md; an empty spelling is
// the explicit "unknown" value of an optional field and is never a default
// that makes something servable.

#include <array>
#include <string_view>
#include <utility>

#include "kvgov/core/enum_spelling.h"

namespace kvgov {

#define KVGOV_ENUM_SPELLING(Enum, name, ...)                                           \
  template <>                                                                          \
  struct EnumSpelling<Enum> {                                                          \
    static constexpr std::string_view kName = name;                                    \
    static constexpr auto kValues = std::to_array<std::pair<Enum, std::string_view>>({ \
        __VA_ARGS__});                                                                 \
  }

/// What kind of object an entry identifies.
enum class MediaType {
  kBytes,
  kTokenIds,
  kKVSpan,
  kPromptPrefix,
  kRecallPage,
  kMemoryView,
  kPlanTemplate,
  kIntentKey,
  kAttentionIndex,
};
KVGOV_ENUM_SPELLING(MediaType, "media type", {MediaType::kBytes, "bytes"},
                    {MediaType::kTokenIds, "token_ids"}, {MediaType::kKVSpan, "kv_span"},
                    {MediaType::kPromptPrefix, "prompt_prefix"},
                    {MediaType::kRecallPage, "recall_page"},
                    {MediaType::kMemoryView, "memory_view"},
                    {MediaType::kPlanTemplate, "plan_template"},
                    {MediaType::kIntentKey, "intent_key"},
                    {MediaType::kAttentionIndex, "attention_index"});

/// The unit an entry's length is counted in.
enum class LengthUnit { kBytes, kTokens, kPositions };
KVGOV_ENUM_SPELLING(LengthUnit, "length unit", {LengthUnit::kBytes, "bytes"},
                    {LengthUnit::kTokens, "tokens"}, {LengthUnit::kPositions, "positions"});

/// Which cache plane made or serves the entry.
enum class Plane {
  kBlob,
  kToolResult,
  kContextPage,
  kKVPrefix,
  kKVArtifact,
  kKVTransfer,
  kPromptPrefix,
  kPolicy,
  kProvider,
  kPlanTemplate,
  kSemanticIntent,
  kMemoryView,
  kAttentionIndex,
};
KVGOV_ENUM_SPELLING(Plane, "plane", {Plane::kBlob, "blob"}, {Plane::kToolResult, "tool_result"},
                    {Plane::kContextPage, "context_page"}, {Plane::kKVPrefix, "kv_prefix"},
                    {Plane::kKVArtifact, "kv_artifact"}, {Plane::kKVTransfer, "kv_transfer"},
                    {Plane::kPromptPrefix, "prompt_prefix"}, {Plane::kPolicy, "policy"},
                    {Plane::kProvider, "provider"}, {Plane::kPlanTemplate, "plan_template"},
                    {Plane::kSemanticIntent, "semantic_intent"},
                    {Plane::kMemoryView, "memory_view"},
                    {Plane::kAttentionIndex, "attention_index"});

/// Whose reuse an entry accounts for. Savings from different sources are
/// never added together: a provider's prompt-cache read is not a kvgov win.
enum class Source {
  kProvider,    // a hosted provider's prompt cache (OpenAI, Anthropic, ...)
  kRideEngine,  // an engine kvgov rides (vLLM, SGLang, LMCache, Mooncake, NIXL)
  kNative,      // kvgov's own plane (its prefix index, its own records)
  kToolResult,  // a tool-result value cache (vDSO key tool:args_digest:epoch)
};
KVGOV_ENUM_SPELLING(Source, "source", {Source::kProvider, "provider"},
                    {Source::kRideEngine, "ride_engine"}, {Source::kNative, "native"},
                    {Source::kToolResult, "tool_result"});

/// How a KV span's positions relate to where it can be reused.
enum class PositionMode { kUnknown, kPrefixAligned, kRelocatable, kRecomputeRequired };
KVGOV_ENUM_SPELLING(PositionMode, "position mode", {PositionMode::kUnknown, ""},
                    {PositionMode::kPrefixAligned, "prefix_aligned"},
                    {PositionMode::kRelocatable, "relocatable"},
                    {PositionMode::kRecomputeRequired, "recompute_required"});

/// Trust label. Not an ordered lattice: compare by equality only.
enum class Taint { kTainted, kTrusted, kQuarantined };
KVGOV_ENUM_SPELLING(Taint, "taint", {Taint::kTainted, "tainted"}, {Taint::kTrusted, "trusted"},
                    {Taint::kQuarantined, "quarantined"});

/// Who may share the entry. `agent` (private) is the fail-closed default.
enum class Scope { kAgent, kFleet, kTenant };
KVGOV_ENUM_SPELLING(Scope, "scope", {Scope::kAgent, "agent"}, {Scope::kFleet, "fleet"},
                    {Scope::kTenant, "tenant"});

/// The admission decision over an entry; unknown means nobody admitted it.
enum class AdmissionVerdict {
  kUnknown,
  kAllow,
  kTransform,
  kQuarantine,
  kRequireWitness,
  kDeny,
  kDefer,
};
KVGOV_ENUM_SPELLING(AdmissionVerdict, "admission verdict", {AdmissionVerdict::kUnknown, ""},
                    {AdmissionVerdict::kAllow, "allow"},
                    {AdmissionVerdict::kTransform, "transform"},
                    {AdmissionVerdict::kQuarantine, "quarantine"},
                    {AdmissionVerdict::kRequireWitness, "require_witness"},
                    {AdmissionVerdict::kDeny, "deny"}, {AdmissionVerdict::kDefer, "defer"});

/// Where the bytes of an entry live now (advisory).
enum class ResidencyTier {
  kUnknown,
  kHBM,
  kDRAM,
  kNumaFar,
  kCXL,
  kDisk,
  kRemote,
  kProvider,
  kRecompute,
};
KVGOV_ENUM_SPELLING(ResidencyTier, "residency tier", {ResidencyTier::kUnknown, ""},
                    {ResidencyTier::kHBM, "hbm"}, {ResidencyTier::kDRAM, "dram"},
                    {ResidencyTier::kNumaFar, "numa_far"}, {ResidencyTier::kCXL, "cxl"},
                    {ResidencyTier::kDisk, "disk"}, {ResidencyTier::kRemote, "remote"},
                    {ResidencyTier::kProvider, "provider"},
                    {ResidencyTier::kRecompute, "recompute"});

/// What makes an entry stale.
enum class InvalidationMode {
  kNone,
  kLRU,
  kTTL,
  kWriteEpoch,
  kExternalRefutation,
  kPolicy,
};
KVGOV_ENUM_SPELLING(InvalidationMode, "invalidation mode", {InvalidationMode::kNone, ""},
                    {InvalidationMode::kLRU, "lru"}, {InvalidationMode::kTTL, "ttl"},
                    {InvalidationMode::kWriteEpoch, "write_epoch"},
                    {InvalidationMode::kExternalRefutation, "external_refutation"},
                    {InvalidationMode::kPolicy, "policy"});

/// The kind of a lookup verdict. There is no "abstain": abstaining is a miss
/// or a revalidate.
enum class LookupKind { kHit, kMiss, kRevalidate, kTransform, kQuarantine, kFault };
KVGOV_ENUM_SPELLING(LookupKind, "lookup kind", {LookupKind::kHit, "hit"},
                    {LookupKind::kMiss, "miss"}, {LookupKind::kRevalidate, "revalidate"},
                    {LookupKind::kTransform, "transform"},
                    {LookupKind::kQuarantine, "quarantine"}, {LookupKind::kFault, "fault"});

/// Why a verdict is not a plain hit. `evicted` and `diverted` are kvgov's
/// additions: an engine's own eviction lowers to a typed miss, never a hit;
/// a request that crosses a quarantined span is sent under a salt that
/// cannot reach the quarantined KV (docs/adr/0028).
enum class LookupReason {
  kNone,
  kAbsent,
  kCold,
  kStale,
  kExpiredTTL,
  kRefutedWitness,
  kScopeDenied,
  kTaintDenied,
  kModelMismatch,
  kTokenizerMismatch,
  kSerializerMismatch,
  kPositionMismatch,
  kPolicyMismatch,
  kAdmitterMismatch,
  kApproximateFault,
  kResidencyFault,
  kRestoreMiss,
  kManifestMismatch,
  kUnsignedArtifact,
  kMissingProvenance,
  kAccessControlRequired,
  kIncompleteBinding,
  kIndexMismatch,
  kNonCausalIndex,
  kLeaseReleased,
  kEvicted,
  kDiverted,
};
KVGOV_ENUM_SPELLING(LookupReason, "lookup reason", {LookupReason::kNone, ""},
                    {LookupReason::kAbsent, "absent"}, {LookupReason::kCold, "cold"},
                    {LookupReason::kStale, "stale"}, {LookupReason::kExpiredTTL, "expired_ttl"},
                    {LookupReason::kRefutedWitness, "refuted_witness"},
                    {LookupReason::kScopeDenied, "scope_denied"},
                    {LookupReason::kTaintDenied, "taint_denied"},
                    {LookupReason::kModelMismatch, "model_mismatch"},
                    {LookupReason::kTokenizerMismatch, "tokenizer_mismatch"},
                    {LookupReason::kSerializerMismatch, "serializer_mismatch"},
                    {LookupReason::kPositionMismatch, "position_mismatch"},
                    {LookupReason::kPolicyMismatch, "policy_mismatch"},
                    {LookupReason::kAdmitterMismatch, "admitter_mismatch"},
                    {LookupReason::kApproximateFault, "approximate_fault"},
                    {LookupReason::kResidencyFault, "residency_fault"},
                    {LookupReason::kRestoreMiss, "restore_miss"},
                    {LookupReason::kManifestMismatch, "manifest_mismatch"},
                    {LookupReason::kUnsignedArtifact, "unsigned_artifact"},
                    {LookupReason::kMissingProvenance, "missing_provenance"},
                    {LookupReason::kAccessControlRequired, "access_control_required"},
                    {LookupReason::kIncompleteBinding, "incomplete_binding"},
                    {LookupReason::kIndexMismatch, "index_mismatch"},
                    {LookupReason::kNonCausalIndex, "non_causal_index"},
                    {LookupReason::kLeaseReleased, "lease_released"},
                    {LookupReason::kEvicted, "evicted"},
                    {LookupReason::kDiverted, "diverted"});

/// Direction of a KV transfer. `store` and `evict` are an engine's own cache
/// fill and eviction; the four others are the transport directions.
enum class KVTransferDirection { kOffload, kRestore, kRoute, kMigrate, kStore, kEvict };
KVGOV_ENUM_SPELLING(KVTransferDirection, "kv transfer direction",
                    {KVTransferDirection::kOffload, "offload"},
                    {KVTransferDirection::kRestore, "restore"},
                    {KVTransferDirection::kRoute, "route"},
                    {KVTransferDirection::kMigrate, "migrate"},
                    {KVTransferDirection::kStore, "store"},
                    {KVTransferDirection::kEvict, "evict"});

/// How a KV transfer ended.
enum class KVTransferOutcome { kOk, kMissed, kFault };
KVGOV_ENUM_SPELLING(KVTransferOutcome, "kv transfer outcome", {KVTransferOutcome::kOk, "ok"},
                    {KVTransferOutcome::kMissed, "missed"},
                    {KVTransferOutcome::kFault, "fault"});

/// The part a NIXL lease plays in disaggregated prefill.
enum class NIXLTransferRole { kPrefillPin, kDecodePull, kPushWrite };
KVGOV_ENUM_SPELLING(NIXLTransferRole, "nixl role", {NIXLTransferRole::kPrefillPin, "prefill_pin"},
                    {NIXLTransferRole::kDecodePull, "decode_pull"},
                    {NIXLTransferRole::kPushWrite, "push_write"});

/// Who saw a NIXL lease begin: a transport or engine that reported it over
/// the events API, or kvgov's gateway, which ran the handoff itself and
/// read the pin from the prefill worker's answer.
enum class NIXLLeaseWitness { kReported, kHandoff };
KVGOV_ENUM_SPELLING(NIXLLeaseWitness, "nixl lease witness",
                    {NIXLLeaseWitness::kReported, "reported"},
                    {NIXLLeaseWitness::kHandoff, "handoff"});

/// An observed event in a NIXL lease's life.
enum class NIXLLeaseEvent { kCreate, kHeartbeat, kTransferComplete, kExpiry, kAbort };
KVGOV_ENUM_SPELLING(NIXLLeaseEvent, "nixl lease event", {NIXLLeaseEvent::kCreate, "create"},
                    {NIXLLeaseEvent::kHeartbeat, "heartbeat"},
                    {NIXLLeaseEvent::kTransferComplete, "transfer_complete"},
                    {NIXLLeaseEvent::kExpiry, "expiry"}, {NIXLLeaseEvent::kAbort, "abort"});

/// A NIXL lease's state at a given time.
enum class NIXLLeaseState { kActive, kCompleted, kExpired, kFailed, kUnidentified };
KVGOV_ENUM_SPELLING(NIXLLeaseState, "nixl lease state", {NIXLLeaseState::kActive, "active"},
                    {NIXLLeaseState::kCompleted, "completed"},
                    {NIXLLeaseState::kExpired, "expired"}, {NIXLLeaseState::kFailed, "failed"},
                    {NIXLLeaseState::kUnidentified, "unidentified"});

/// What a clear of a NIXL span proves.
enum class NIXLClearKind { kExactSpan, kWholePrefix, kNone };
KVGOV_ENUM_SPELLING(NIXLClearKind, "nixl clear kind", {NIXLClearKind::kExactSpan, "exact_span"},
                    {NIXLClearKind::kWholePrefix, "whole_prefix"}, {NIXLClearKind::kNone, "none"});

/// The scope an eviction actually had.
enum class KVEvictionScope { kWholePrefixCache, kExactSpan };
KVGOV_ENUM_SPELLING(KVEvictionScope, "kv eviction scope",
                    {KVEvictionScope::kWholePrefixCache, "whole_prefix_cache"},
                    {KVEvictionScope::kExactSpan, "exact_span"});

/// What an owner's own event stream showed after kvgov's eviction directive:
/// the named blocks removed, or every block cleared.
enum class WitnessKind { kBlockRemoved, kAllBlocksCleared, kEngineRestart };
KVGOV_ENUM_SPELLING(WitnessKind, "witness kind", {WitnessKind::kBlockRemoved, "block_removed"},
                    {WitnessKind::kAllBlocksCleared, "all_blocks_cleared"},
                    {WitnessKind::kEngineRestart, "engine_restart"});

/// Mooncake store and transfer-engine operations (seed section 2.2, plus the
/// store's own put and remove).
enum class MooncakeOperation { kPut, kRemove, kTransfer, kLookup, kMaterialize };
KVGOV_ENUM_SPELLING(MooncakeOperation, "mooncake operation", {MooncakeOperation::kPut, "put"},
                    {MooncakeOperation::kRemove, "remove"},
                    {MooncakeOperation::kTransfer, "transfer"},
                    {MooncakeOperation::kLookup, "lookup"},
                    {MooncakeOperation::kMaterialize, "materialize"});

/// LMCache operations (seed section 2.3, plus its KVEvictMsg).
enum class LMCacheOperation { kOffload, kRestore, kEvict };
KVGOV_ENUM_SPELLING(LMCacheOperation, "lmcache operation", {LMCacheOperation::kOffload, "offload"},
                    {LMCacheOperation::kRestore, "restore"}, {LMCacheOperation::kEvict, "evict"});

/// Hosted providers whose prompt-cache telemetry kvgov records.
enum class Provider { kOpenAI, kAnthropic, kGemini, kBedrock };
KVGOV_ENUM_SPELLING(Provider, "provider", {Provider::kOpenAI, "openai"},
                    {Provider::kAnthropic, "anthropic"}, {Provider::kGemini, "gemini"},
                    {Provider::kBedrock, "bedrock"});

/// How the provider cache breakpoint was placed.
enum class BreakpointMode { kUnknown, kAuto, kExplicit, kImplicit };
KVGOV_ENUM_SPELLING(BreakpointMode, "breakpoint mode", {BreakpointMode::kUnknown, ""},
                    {BreakpointMode::kAuto, "auto"}, {BreakpointMode::kExplicit, "explicit"},
                    {BreakpointMode::kImplicit, "implicit"});

/// What happened to a tool-result cache value.
enum class ToolResultEvent { kFill, kHit, kEvict, kRevoke, kMiss };
KVGOV_ENUM_SPELLING(ToolResultEvent, "tool result event", {ToolResultEvent::kFill, "fill"},
                    {ToolResultEvent::kHit, "hit"}, {ToolResultEvent::kEvict, "evict"},
                    {ToolResultEvent::kRevoke, "revoke"}, {ToolResultEvent::kMiss, "miss"});

#undef KVGOV_ENUM_SPELLING

}  // namespace kvgov
