#pragma once

// kvgov's signed deletion certificate (schema "kvgov.deletioncert/v1"):
// what it says, how it is minted, encoded, parsed and verified. Format:
// docs/formats/certificate.md.
//
// Order of events (the certificate comes last, never first): kvgov journals
// a deletion directive, sends it to the engines that own the span, watches
// their own KV-event streams until each shows the blocks gone
// (BlockRemoved / AllBlocksCleared), journals the directive reaching
// `witnessed`, and only then mints a certificate anchored at that journal
// row. Nothing here reads a clock, a journal or a store: the caller passes
// the time and the anchor row in.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvgov/cert/issuer_key.h"
#include "kvgov/core/enum_spelling.h"
#include "kvgov/core/status.h"
#include "kvgov/core/vocabulary.h"

namespace kvgov::cert {

/// The schema string every v1 certificate carries.
inline constexpr std::string_view kCertificateSchema = "kvgov.deletioncert/v1";

/// The largest value of any integer field: 2^53 - 1, so that the RFC 8785
/// canonical form (whose numbers are IEEE-754 doubles) is exact.
inline constexpr uint64_t kMaxCertificateInteger = (uint64_t{1} << 53) - 1;

/// The largest certificate document ParseCertificateJson reads by default.
inline constexpr size_t kMaxCertificateBytes = size_t{1} << 20;

/// How kvgov reached the engine that owned the span.
enum class CertConnector { kVllm, kSglang, kLmcache, kWebhook };

using kvgov::WitnessKind;

}  // namespace kvgov::cert

namespace kvgov {
template <>
struct EnumSpelling<cert::CertConnector> {
  static constexpr std::string_view kName = "certificate connector";
  static constexpr auto kValues = std::to_array<std::pair<cert::CertConnector, std::string_view>>(
      {{cert::CertConnector::kVllm, "vllm"},
       {cert::CertConnector::kSglang, "sglang"},
       {cert::CertConnector::kLmcache, "lmcache"},
       {cert::CertConnector::kWebhook, "webhook"}});
};
}  // namespace kvgov

namespace kvgov::cert {

/// The events of one owner's stream that showed the removal.
struct Witness {
  WitnessKind kind = WitnessKind::kBlockRemoved;
  std::vector<uint64_t> event_seqs;  // the engine's event seqs; strictly ascending, non-empty
  friend bool operator==(const Witness&, const Witness&) = default;
};

/// One engine that held (part of) the span, and what it did.
struct CertOwner {
  std::string worker;  // kvgov's worker id; non-empty
  CertConnector connector = CertConnector::kVllm;
  KVEvictionScope scope = KVEvictionScope::kExactSpan;  // what this owner actually did
  bool degraded = false;       // true exactly when degrade_reason is non-empty
  std::string degrade_reason;  // e.g. "exact_span_unsupported_whole_prefix_flush"
  Witness witness;
  friend bool operator==(const CertOwner&, const CertOwner&) = default;
};

/// The journal row that recorded the directive reaching `witnessed`.
struct JournalAnchor {
  uint64_t journal_seq = 0;  // >= 1
  std::string prev_hash;     // 64 lowercase hex
  std::string hash;          // 64 lowercase hex
  friend bool operator==(const JournalAnchor&, const JournalAnchor&) = default;
};

/// Who signed: the issuer key's id and public key.
struct CertIssuer {
  std::string key_id;      // 16 lowercase hex: SHA-256 of the raw public key, first 8 bytes
  std::string public_key;  // 64 lowercase hex: the raw 32-byte Ed25519 public key
  friend bool operator==(const CertIssuer&, const CertIssuer&) = default;
};

/// A tenant revocation's two moments: from `unreachable_since_ms` no salt
/// kvgov forwards reaches the tenant's earlier KV; by `removed_by_ms` the
/// engines' own streams showed all of it gone. Both are the issuer's wall
/// clock, ms since the Unix epoch.
struct CertRevocation {
  std::string tenant;                // non-empty, as the directive names it
  std::string model;                 // "" for every model
  int64_t unreachable_since_ms = 0;  // >= 0
  int64_t removed_by_ms = 0;         // >= unreachable_since_ms
  friend bool operator==(const CertRevocation&, const CertRevocation&) = default;
};

/// What the caller knows when it mints: everything but the derived fields.
struct CertificateInput {
  std::string subject;       // the span digest: 64 lowercase hex (SHA-256)
  std::string directive_id;  // non-empty
  KVEvictionScope scope = KVEvictionScope::kExactSpan;  // what the directive asked for
  std::vector<CertOwner> owners;                        // non-empty unless a revocation
  uint64_t target_count = 0;                            // > 0 unless a revocation (then >= 0)
  JournalAnchor anchor;
  int64_t issued_at_ms = 0;  // the issuer's wall clock, ms since the Unix epoch; >= 0
  // Set exactly for a tenant revocation; absent, the certificate's bytes
  // are those of a certificate from before revocations existed.
  std::optional<CertRevocation> revocation;
};

/// A deletion certificate. A plain value; every field is in the signed
/// canonical bytes except `signature`.
struct DeletionCertificate {
  std::string schema;          // kCertificateSchema
  std::string certificate_id;  // 64 lowercase hex, derived (docs/formats/certificate.md)
  std::string subject;
  std::string directive_id;
  KVEvictionScope scope = KVEvictionScope::kExactSpan;
  std::vector<CertOwner> owners;  // strictly ascending by (worker, connector spelling)
  uint64_t target_count = 0;
  JournalAnchor anchor;
  int64_t issued_at_ms = 0;
  CertIssuer issuer;
  std::optional<CertRevocation> revocation;  // signed, and in the id, when present
  std::string signature;  // 128 lowercase hex: Ed25519 over CanonicalCertificateBytes
  friend bool operator==(const DeletionCertificate&, const DeletionCertificate&) = default;
};

/// Mints a certificate: checks the input, puts owners in (worker, connector)
/// order and each witness's event seqs in ascending order (dropping
/// repeats), derives certificate_id and signs. Reads no clock.
/// InvalidArgument naming the field ("$.target_count: ...") for zero
/// targets or no owners (both allowed with a revocation), a missing or
/// malformed field, a revocation with an empty tenant or removed_by_ms
/// before unreachable_since_ms, a repeated (worker, connector) owner, an
/// integer over kMaxCertificateInteger, or invalid UTF-8.
Result<DeletionCertificate> MintCertificate(const CertificateInput& input, const IssuerKey& key);

/// The bytes the signature covers: the RFC 8785 canonical JSON of every
/// field but `signature`. InvalidArgument when a field has no canonical form
/// (invalid UTF-8, an integer over kMaxCertificateInteger).
Result<std::string> CanonicalCertificateBytes(const DeletionCertificate& certificate);

/// The certificate_id `certificate` should carry: lowercase hex SHA-256 of
/// the canonical JSON of every field but `certificate_id` and `signature`.
Result<std::string> ComputeCertificateId(const DeletionCertificate& certificate);

/// The certificate document: the canonical JSON of every field, signature
/// included (so a minted document is itself canonical). Errors as for
/// CanonicalCertificateBytes.
Result<std::string> EncodeCertificateJson(const DeletionCertificate& certificate);

/// Parses a certificate document, strictly: a document over `max_bytes` is
/// ResourceExhausted; malformed JSON, a repeated key, an unknown or missing
/// field, a wrong type, an enum value that is not an exact spelling, a
/// float or an integer outside [0, 2^53-1] is InvalidArgument naming the
/// path ("$.owners[0].witness.event_seqs[2]: ..."). `revocation` is the
/// one optional field; when present, all four of its members are
/// required. Parsing checks shape, not meaning: run VerifyCertificate next.
Result<DeletionCertificate> ParseCertificateJson(std::string_view text,
                                                 size_t max_bytes = kMaxCertificateBytes);

/// One named check of a certificate and its outcome.
struct CertificateCheck {
  std::string name;  // "schema", "fields", "certificate_id", "signature", "issuer"
  Status status;
};

/// Runs every check, in this order, and returns each outcome:
///  - schema: `schema` is kCertificateSchema (InvalidArgument);
///  - fields: every field is well formed and consistent, errors naming the
///    path: hex fields are lowercase hex of their length, target_count > 0
///    and owners non-empty (unless there is a revocation), owners ordered,
///    a revocation's tenant non-empty and its moments in order, degraded
///    iff degrade_reason, an owner whose scope differs from the
///    directive's is degraded, event seqs ascending, key_id matches
///    public_key (InvalidArgument);
///  - certificate_id: recomputes from the fields (PermissionDenied);
///  - signature: verifies under issuer.public_key over the canonical bytes
///    recomputed from the fields, so editing any field fails it
///    (PermissionDenied; InvalidArgument when it cannot be computed);
///  - issuer: issuer.public_key is one of `trusted_public_keys_hex` (hex,
///    either case) (PermissionDenied). A certificate is only as good as the
///    key that signed it: any key verifies its own signatures.
std::vector<CertificateCheck> CheckCertificate(
    const DeletionCertificate& certificate, std::span<const std::string> trusted_public_keys_hex);

/// The first failing check of CheckCertificate, or OK when all hold.
Status VerifyCertificate(const DeletionCertificate& certificate,
                         std::span<const std::string> trusted_public_keys_hex);

/// Checks the certificate's anchor against the journal row the caller read
/// at anchor.journal_seq (from a chain it has verified up to that row):
/// seq, prev_hash and hash must be equal and, when `row_subject` is given,
/// it must be the certificate's directive_id (kvgov journals the witness row
/// with the directive id as its subject). PermissionDenied naming the field
/// that differs.
Status VerifyAnchor(const DeletionCertificate& certificate, uint64_t seq,
                    std::string_view prev_hash, std::string_view hash,
                    std::optional<std::string_view> row_subject = std::nullopt);

}  // namespace kvgov::cert
