#pragma once

// The governance envelope: one metadata record for every cache or serving
// event kvgov sees, whatever produced it. It never holds a payload. Wire form:
// docs/formats/envelope.md.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvgov/core/vocabulary.h"

namespace kvgov {

/// Names one cacheable object. Two ids name the same object only when all
/// four fields are equal.
struct EntryId {
  std::string digest;
  MediaType media_type = MediaType::kBytes;
  int64_t length = 0;
  LengthUnit unit = LengthUnit::kBytes;

  /// A usable handle: a non-empty digest and a non-negative length.
  bool Valid() const { return !digest.empty() && length >= 0; }
  friend bool operator==(const EntryId&, const EntryId&) = default;
};

/// How the object was made.
struct Derivation {
  std::string producer;
  std::string tool;
  std::string args_digest;
  std::string model_id;
  std::string tokenizer_id;
  std::string serializer_id;
  PositionMode position_mode = PositionMode::kUnknown;
  std::vector<EntryId> source_refs;
  friend bool operator==(const Derivation&, const Derivation&) = default;
};

/// What keeps the object valid.
struct Validity {
  std::string witness;
  std::string admitted_at_epoch;
  uint64_t trust_epoch = 0;
  int64_t ttl_millis = 0;  // 0 = no TTL observed
  std::string policy_version;
  friend bool operator==(const Validity&, const Validity&) = default;
};

/// A reference to a signed deletion certificate. Usable only when all three
/// fields are set.
struct DeletionCertificateRef {
  std::string schema;
  std::string subject;
  std::string digest;

  bool Valid() const { return !schema.empty() && !subject.empty() && !digest.empty(); }
  friend bool operator==(const DeletionCertificateRef&, const DeletionCertificateRef&) = default;
};

/// Trust over the object. The zero value is the fail-closed one: tainted,
/// private to one agent, and admitted by nobody.
struct Security {
  Taint taint = Taint::kTainted;
  Scope scope = Scope::kAgent;
  AdmissionVerdict admission_verdict = AdmissionVerdict::kUnknown;
  std::string admitted_by;
  std::string reason;
  DeletionCertificateRef deletion_certificate;
  friend bool operator==(const Security&, const Security&) = default;
};

/// Where the object's bytes live now, and under whose lease. Advisory.
struct Residency {
  ResidencyTier tier = ResidencyTier::kUnknown;
  std::string owner;
  std::string lease;
  friend bool operator==(const Residency&, const Residency&) = default;
};

/// Who reads the object.
struct Consumer {
  std::string kind;
  std::string id;
  std::string agent_id;
  std::string trace_id;
  friend bool operator==(const Consumer&, const Consumer&) = default;
};

/// What the object depends on and how it goes stale.
struct Coherence {
  std::vector<Consumer> consumers;
  std::vector<EntryId> parents;
  InvalidationMode invalidation_mode = InvalidationMode::kNone;
  friend bool operator==(const Coherence&, const Coherence&) = default;
};

/// Observed counters. Zero means "not observed".
struct EntryMetrics {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t fills = 0;
  uint64_t evictions = 0;
  uint64_t false_hit_faults = 0;
  int64_t prefill_tokens_saved = 0;
  int64_t bytes_transferred = 0;
  double quality_delta_probe = 0;
  double coverage = 0;
  double faithfulness_probe = 0;
  friend bool operator==(const EntryMetrics&, const EntryMetrics&) = default;
};

/// The envelope. `source` is always the one SourceForPlane(plane) gives: the
/// lowerings set both, and the JSON decoder rejects a mismatch.
struct Entry {
  EntryId id;
  Plane plane = Plane::kBlob;
  Source source = Source::kNative;
  Derivation derivation;
  Validity validity;
  Security security;
  Residency residency;
  Coherence coherence;
  EntryMetrics metrics;
  std::map<std::string, std::string> labels;
  friend bool operator==(const Entry&, const Entry&) = default;
};

/// The source a plane accounts for: provider -> provider, kv_transfer ->
/// ride_engine, tool_result -> tool_result, every other plane -> native.
constexpr Source SourceForPlane(Plane plane) {
  switch (plane) {
    case Plane::kProvider:
      return Source::kProvider;
    case Plane::kKVTransfer:
      return Source::kRideEngine;
    case Plane::kToolResult:
      return Source::kToolResult;
    case Plane::kBlob:
    case Plane::kContextPage:
    case Plane::kKVPrefix:
    case Plane::kKVArtifact:
    case Plane::kPromptPrefix:
    case Plane::kPolicy:
    case Plane::kPlanTemplate:
    case Plane::kSemanticIntent:
    case Plane::kMemoryView:
    case Plane::kAttentionIndex:
      return Source::kNative;
  }
  return Source::kNative;
}

/// Checks the envelope's own invariants: source matches plane, the length is
/// not negative, and every label key is non-empty. Returns InvalidArgument
/// whose message starts with the field's path relative to the entry and
/// ": " ("source: ..."), which the JSON codec turns into "$.source: ...".
Status ValidateEntry(const Entry& entry);

}  // namespace kvgov
