#include "kvgov/cert/certificate.h"

#include <algorithm>
#include <initializer_list>
#include <tuple>
#include <utility>

#include "cert/canonical_json.h"
#include "kvgov/core/digest.h"

namespace kvgov::cert {
namespace {

using cert_internal::ChildPath;
using cert_internal::IndexPath;
using cert_internal::Json;
using cert_internal::PathError;

constexpr size_t kDigestHex = 64;     // SHA-256
constexpr size_t kPublicKeyHex = 64;  // Ed25519 public key
constexpr size_t kKeyIdHex = 16;
constexpr size_t kSignatureHex = 128;  // Ed25519 signature

// ---------------------------------------------------------------------------
// The JSON form: written once, here, for every use (id, pre-image, document).

enum class Omit { kNothing, kSignature, kIdAndSignature };

Json WitnessToJson(const Witness& witness) {
  Json seqs = Json::array();
  for (uint64_t seq : witness.event_seqs) seqs.push_back(seq);
  return Json{{"kind", std::string(ToString(witness.kind))}, {"event_seqs", std::move(seqs)}};
}

Json OwnerToJson(const CertOwner& owner) {
  return Json{{"worker", owner.worker},
              {"connector", std::string(ToString(owner.connector))},
              {"scope", std::string(ToString(owner.scope))},
              {"degraded", owner.degraded},
              {"degrade_reason", owner.degrade_reason},
              {"witness", WitnessToJson(owner.witness)}};
}

Json CertificateToJson(const DeletionCertificate& c, Omit omit) {
  Json owners = Json::array();
  for (const CertOwner& owner : c.owners) owners.push_back(OwnerToJson(owner));
  Json out = Json::object();
  out["schema"] = c.schema;
  if (omit == Omit::kNothing || omit == Omit::kSignature) out["certificate_id"] = c.certificate_id;
  out["subject"] = c.subject;
  out["directive_id"] = c.directive_id;
  out["scope"] = std::string(ToString(c.scope));
  out["owners"] = std::move(owners);
  out["target_count"] = c.target_count;
  out["anchor"] = Json{{"journal_seq", c.anchor.journal_seq},
                       {"prev_hash", c.anchor.prev_hash},
                       {"hash", c.anchor.hash}};
  out["issued_at_ms"] = c.issued_at_ms;
  out["issuer"] = Json{{"key_id", c.issuer.key_id}, {"public_key", c.issuer.public_key}};
  // Absent, it has no key at all: a certificate without a revocation keeps
  // the bytes, id and signature it had before revocations existed.
  if (c.revocation) {
    out["revocation"] = Json{{"tenant", c.revocation->tenant},
                             {"model", c.revocation->model},
                             {"unreachable_since_ms", c.revocation->unreachable_since_ms},
                             {"removed_by_ms", c.revocation->removed_by_ms}};
  }
  if (omit == Omit::kNothing) out["signature"] = c.signature;
  return out;
}

// ---------------------------------------------------------------------------
// Field checks.

bool IsLowerHex(std::string_view text, size_t length) {
  return text.size() == length && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

Status CheckHex(std::string_view text, size_t length, std::string_view path) {
  if (IsLowerHex(text, length)) return Status::Ok();
  return PathError(path, "want " + std::to_string(length) + " lowercase hex digits, got " +
                             std::to_string(text.size()) + " characters" +
                             (text.size() == length ? " that are not all lowercase hex" : ""));
}

Status CheckInteger(uint64_t value, std::string_view path) {
  if (value <= kMaxCertificateInteger) return Status::Ok();
  return PathError(path, "integer " + std::to_string(value) + " is over 2^53-1");
}

Status CheckMillis(int64_t value, std::string_view path) {
  if (value >= 0 && static_cast<uint64_t>(value) <= kMaxCertificateInteger) return Status::Ok();
  return PathError(path, std::to_string(value) + " is outside [0, 2^53-1]");
}

Status CheckRevocation(const CertRevocation& r) {
  if (r.tenant.empty()) return PathError("$.revocation.tenant", "empty");
  KVGOV_RETURN_IF_ERROR(CheckMillis(r.unreachable_since_ms, "$.revocation.unreachable_since_ms"));
  KVGOV_RETURN_IF_ERROR(CheckMillis(r.removed_by_ms, "$.revocation.removed_by_ms"));
  if (r.removed_by_ms < r.unreachable_since_ms) {
    return PathError("$.revocation.removed_by_ms", std::to_string(r.removed_by_ms) +
                                                       " is before unreachable_since_ms " +
                                                       std::to_string(r.unreachable_since_ms));
  }
  return Status::Ok();
}

std::string Bytes(std::string_view hex) {
  std::string out;
  out.reserve(hex.size() / 2);
  const auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>((nibble(hex[i]) << 4) | nibble(hex[i + 1])));
  }
  return out;
}

std::string KeyIdOf(std::string_view public_key_hex) {
  return Sha256Hex(Bytes(public_key_hex)).substr(0, kKeyIdHex);
}

// The order owners are kept in, which makes the canonical form a function
// of the set of owners.
auto OwnerOrder(const CertOwner& owner) {
  return std::make_tuple(std::string_view(owner.worker), ToString(owner.connector));
}

Status CheckOwner(const CertOwner& owner, KVEvictionScope directive_scope, const std::string& path,
                  bool require_order) {
  if (owner.worker.empty()) return PathError(ChildPath(path, "worker"), "empty");
  if (owner.degraded != !owner.degrade_reason.empty()) {
    return PathError(ChildPath(path, "degraded"), owner.degraded
                                                      ? "true without a degrade_reason"
                                                      : "false but degrade_reason is set");
  }
  if (owner.scope != directive_scope && !owner.degraded) {
    return PathError(ChildPath(path, "scope"),
                     "'" + std::string(ToString(owner.scope)) + "' differs from the directive's '" +
                         std::string(ToString(directive_scope)) + "' without being degraded");
  }
  const std::string seqs_path = ChildPath(ChildPath(path, "witness"), "event_seqs");
  const std::vector<uint64_t>& seqs = owner.witness.event_seqs;
  if (seqs.empty()) return PathError(seqs_path, "empty: a witness names at least one event");
  for (size_t i = 0; i < seqs.size(); ++i) {
    KVGOV_RETURN_IF_ERROR(CheckInteger(seqs[i], IndexPath(seqs_path, i)));
    if (require_order && i > 0 && seqs[i] <= seqs[i - 1]) {
      return PathError(IndexPath(seqs_path, i), "not above the previous seq (want ascending)");
    }
  }
  return Status::Ok();
}

// Every rule that does not need the signature or the id to hold.
// `require_order` is off only for Mint's input, which Mint puts in order.
Status CheckBody(const DeletionCertificate& c, bool require_order) {
  KVGOV_RETURN_IF_ERROR(CheckHex(c.subject, kDigestHex, "$.subject"));
  if (c.directive_id.empty()) return PathError("$.directive_id", "empty");
  // A tenant revocation certifies its two moments even when none of the
  // tenant's old blocks was still resident: then no target and no owner.
  const bool revocation = c.revocation.has_value();
  if (c.target_count == 0 && !revocation) {
    return PathError("$.target_count", "0: a deletion of zero targets is never certified");
  }
  KVGOV_RETURN_IF_ERROR(CheckInteger(c.target_count, "$.target_count"));
  if (c.owners.empty() && !revocation) {
    return PathError("$.owners", "empty: at least one owner witnessed");
  }
  for (size_t i = 0; i < c.owners.size(); ++i) {
    const std::string path = IndexPath("$.owners", i);
    KVGOV_RETURN_IF_ERROR(CheckOwner(c.owners[i], c.scope, path, require_order));
    if (require_order && i > 0 && !(OwnerOrder(c.owners[i - 1]) < OwnerOrder(c.owners[i]))) {
      return PathError(path, "not after the previous owner (want ascending worker, connector)");
    }
  }
  if (revocation) KVGOV_RETURN_IF_ERROR(CheckRevocation(*c.revocation));
  if (c.anchor.journal_seq == 0) return PathError("$.anchor.journal_seq", "0: seqs start at 1");
  KVGOV_RETURN_IF_ERROR(CheckInteger(c.anchor.journal_seq, "$.anchor.journal_seq"));
  KVGOV_RETURN_IF_ERROR(CheckHex(c.anchor.prev_hash, kDigestHex, "$.anchor.prev_hash"));
  KVGOV_RETURN_IF_ERROR(CheckHex(c.anchor.hash, kDigestHex, "$.anchor.hash"));
  KVGOV_RETURN_IF_ERROR(CheckMillis(c.issued_at_ms, "$.issued_at_ms"));
  KVGOV_RETURN_IF_ERROR(CheckHex(c.issuer.public_key, kPublicKeyHex, "$.issuer.public_key"));
  KVGOV_RETURN_IF_ERROR(CheckHex(c.issuer.key_id, kKeyIdHex, "$.issuer.key_id"));
  if (c.issuer.key_id != KeyIdOf(c.issuer.public_key)) {
    return PathError("$.issuer.key_id", "is not the first 16 hex digits of SHA-256(public_key)");
  }
  return Status::Ok();
}

Status CheckFields(const DeletionCertificate& c) {
  KVGOV_RETURN_IF_ERROR(CheckBody(c, /*require_order=*/true));
  KVGOV_RETURN_IF_ERROR(CheckHex(c.certificate_id, kDigestHex, "$.certificate_id"));
  return CheckHex(c.signature, kSignatureHex, "$.signature");
}

// ---------------------------------------------------------------------------
// Strict reading of the parsed document.

Status TypeError(const std::string& path, std::string_view want, const Json& got) {
  return PathError(path, "want " + std::string(want) + ", got " + got.type_name());
}

// Unknown fields first (an unknown field beside a missing one is usually
// its misspelling), then missing ones. `optional` keys may be absent.
Status CheckKeys(const Json& object, const std::string& path,
                 std::initializer_list<std::string_view> keys,
                 std::initializer_list<std::string_view> optional = {}) {
  if (!object.is_object()) return TypeError(path, "an object", object);
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (std::find(keys.begin(), keys.end(), it.key()) == keys.end() &&
        std::find(optional.begin(), optional.end(), it.key()) == optional.end()) {
      return PathError(ChildPath(path, it.key()), "unknown field");
    }
  }
  for (std::string_view key : keys) {
    if (!object.contains(key)) return PathError(ChildPath(path, key), "missing required field");
  }
  return Status::Ok();
}

Status ReadString(const Json& json, const std::string& path, std::string& out) {
  if (!json.is_string()) return TypeError(path, "a string", json);
  out = json.get_ref<const std::string&>();
  return Status::Ok();
}

Status ReadBool(const Json& json, const std::string& path, bool& out) {
  if (!json.is_boolean()) return TypeError(path, "true or false", json);
  out = json.get<bool>();
  return Status::Ok();
}

// nlohmann keeps non-negative integers unsigned and negative ones signed;
// a fraction, an exponent or a value past 64 bits is a float.
Status ReadInteger(const Json& json, const std::string& path, uint64_t& out) {
  if (!json.is_number()) return TypeError(path, "an integer", json);
  if (json.is_number_unsigned() && json.get<uint64_t>() <= kMaxCertificateInteger) {
    out = json.get<uint64_t>();
    return Status::Ok();
  }
  if (json.is_number_integer() && !json.is_number_unsigned() && json.get<int64_t>() == 0) {
    out = 0;  // "-0"
    return Status::Ok();
  }
  return PathError(path, "want an integer in [0, 2^53-1], got " + json.dump());
}

Status ReadInteger(const Json& json, const std::string& path, int64_t& out) {
  uint64_t value = 0;
  KVGOV_RETURN_IF_ERROR(ReadInteger(json, path, value));
  out = static_cast<int64_t>(value);
  return Status::Ok();
}

template <typename E>
Status ReadEnum(const Json& json, const std::string& path, E& out) {
  std::string spelling;
  KVGOV_RETURN_IF_ERROR(ReadString(json, path, spelling));
  Result<E> parsed = ParseEnum<E>(spelling);
  if (!parsed.ok()) return PathError(path, parsed.status().message());
  out = *parsed;
  return Status::Ok();
}

Status ReadWitness(const Json& json, const std::string& path, Witness& out) {
  KVGOV_RETURN_IF_ERROR(CheckKeys(json, path, {"kind", "event_seqs"}));
  KVGOV_RETURN_IF_ERROR(ReadEnum(json["kind"], ChildPath(path, "kind"), out.kind));
  const std::string seqs_path = ChildPath(path, "event_seqs");
  const Json& seqs = json["event_seqs"];
  if (!seqs.is_array()) return TypeError(seqs_path, "an array", seqs);
  out.event_seqs.assign(seqs.size(), 0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    KVGOV_RETURN_IF_ERROR(ReadInteger(seqs[i], IndexPath(seqs_path, i), out.event_seqs[i]));
  }
  return Status::Ok();
}

Status ReadOwner(const Json& json, const std::string& path, CertOwner& out) {
  KVGOV_RETURN_IF_ERROR(CheckKeys(
      json, path, {"worker", "connector", "scope", "degraded", "degrade_reason", "witness"}));
  KVGOV_RETURN_IF_ERROR(ReadString(json["worker"], ChildPath(path, "worker"), out.worker));
  KVGOV_RETURN_IF_ERROR(ReadEnum(json["connector"], ChildPath(path, "connector"), out.connector));
  KVGOV_RETURN_IF_ERROR(ReadEnum(json["scope"], ChildPath(path, "scope"), out.scope));
  KVGOV_RETURN_IF_ERROR(ReadBool(json["degraded"], ChildPath(path, "degraded"), out.degraded));
  KVGOV_RETURN_IF_ERROR(
      ReadString(json["degrade_reason"], ChildPath(path, "degrade_reason"), out.degrade_reason));
  return ReadWitness(json["witness"], ChildPath(path, "witness"), out.witness);
}

Status ReadRevocation(const Json& json, const std::string& path, CertRevocation& out) {
  KVGOV_RETURN_IF_ERROR(
      CheckKeys(json, path, {"tenant", "model", "unreachable_since_ms", "removed_by_ms"}));
  KVGOV_RETURN_IF_ERROR(ReadString(json["tenant"], ChildPath(path, "tenant"), out.tenant));
  KVGOV_RETURN_IF_ERROR(ReadString(json["model"], ChildPath(path, "model"), out.model));
  KVGOV_RETURN_IF_ERROR(ReadInteger(json["unreachable_since_ms"],
                                    ChildPath(path, "unreachable_since_ms"),
                                    out.unreachable_since_ms));
  return ReadInteger(json["removed_by_ms"], ChildPath(path, "removed_by_ms"), out.removed_by_ms);
}

Status ReadCertificate(const Json& json, DeletionCertificate& out) {
  if (!json.is_object()) return TypeError("$", "an object", json);
  // The schema first: a document of another schema is reported as that,
  // not as whatever field of ours it lacks or adds.
  if (json.contains("schema")) {
    KVGOV_RETURN_IF_ERROR(ReadString(json["schema"], "$.schema", out.schema));
    if (out.schema != kCertificateSchema) {
      return PathError("$.schema",
                       "unknown schema; want \"" + std::string(kCertificateSchema) + "\"");
    }
  }
  KVGOV_RETURN_IF_ERROR(
      CheckKeys(json, "$",
                {"schema", "certificate_id", "subject", "directive_id", "scope", "owners",
                 "target_count", "anchor", "issued_at_ms", "issuer", "signature"},
                {"revocation"}));
  KVGOV_RETURN_IF_ERROR(ReadString(json["certificate_id"], "$.certificate_id", out.certificate_id));
  KVGOV_RETURN_IF_ERROR(ReadString(json["subject"], "$.subject", out.subject));
  KVGOV_RETURN_IF_ERROR(ReadString(json["directive_id"], "$.directive_id", out.directive_id));
  KVGOV_RETURN_IF_ERROR(ReadEnum(json["scope"], "$.scope", out.scope));
  const Json& owners = json["owners"];
  if (!owners.is_array()) return TypeError("$.owners", "an array", owners);
  out.owners.assign(owners.size(), CertOwner{});
  for (size_t i = 0; i < owners.size(); ++i) {
    KVGOV_RETURN_IF_ERROR(ReadOwner(owners[i], IndexPath("$.owners", i), out.owners[i]));
  }
  KVGOV_RETURN_IF_ERROR(ReadInteger(json["target_count"], "$.target_count", out.target_count));
  if (json.contains("revocation")) {
    KVGOV_RETURN_IF_ERROR(
        ReadRevocation(json["revocation"], "$.revocation", out.revocation.emplace()));
  }
  const Json& anchor = json["anchor"];
  KVGOV_RETURN_IF_ERROR(CheckKeys(anchor, "$.anchor", {"journal_seq", "prev_hash", "hash"}));
  KVGOV_RETURN_IF_ERROR(
      ReadInteger(anchor["journal_seq"], "$.anchor.journal_seq", out.anchor.journal_seq));
  KVGOV_RETURN_IF_ERROR(
      ReadString(anchor["prev_hash"], "$.anchor.prev_hash", out.anchor.prev_hash));
  KVGOV_RETURN_IF_ERROR(ReadString(anchor["hash"], "$.anchor.hash", out.anchor.hash));
  KVGOV_RETURN_IF_ERROR(ReadInteger(json["issued_at_ms"], "$.issued_at_ms", out.issued_at_ms));
  const Json& issuer = json["issuer"];
  KVGOV_RETURN_IF_ERROR(CheckKeys(issuer, "$.issuer", {"key_id", "public_key"}));
  KVGOV_RETURN_IF_ERROR(ReadString(issuer["key_id"], "$.issuer.key_id", out.issuer.key_id));
  KVGOV_RETURN_IF_ERROR(
      ReadString(issuer["public_key"], "$.issuer.public_key", out.issuer.public_key));
  return ReadString(json["signature"], "$.signature", out.signature);
}

std::string Lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace

Result<std::string> CanonicalCertificateBytes(const DeletionCertificate& certificate) {
  return cert_internal::CanonicalJson(CertificateToJson(certificate, Omit::kSignature));
}

Result<std::string> ComputeCertificateId(const DeletionCertificate& certificate) {
  KVGOV_ASSIGN_OR_RETURN(std::string body, cert_internal::CanonicalJson(CertificateToJson(
                                               certificate, Omit::kIdAndSignature)));
  return Sha256Hex(body);
}

Result<std::string> EncodeCertificateJson(const DeletionCertificate& certificate) {
  return cert_internal::CanonicalJson(CertificateToJson(certificate, Omit::kNothing));
}

Result<DeletionCertificate> MintCertificate(const CertificateInput& input, const IssuerKey& key) {
  DeletionCertificate c;
  c.schema = std::string(kCertificateSchema);
  c.subject = input.subject;
  c.directive_id = input.directive_id;
  c.scope = input.scope;
  c.owners = input.owners;
  c.target_count = input.target_count;
  c.anchor = input.anchor;
  c.issued_at_ms = input.issued_at_ms;
  c.issuer = CertIssuer{key.key_id(), key.public_key_hex()};
  c.revocation = input.revocation;
  // Checked in the caller's order, so an error's index names its owner.
  KVGOV_RETURN_IF_ERROR(CheckBody(c, /*require_order=*/false));

  for (CertOwner& owner : c.owners) {
    std::vector<uint64_t>& seqs = owner.witness.event_seqs;
    std::sort(seqs.begin(), seqs.end());
    seqs.erase(std::unique(seqs.begin(), seqs.end()), seqs.end());
  }
  std::stable_sort(c.owners.begin(), c.owners.end(), [](const CertOwner& a, const CertOwner& b) {
    return OwnerOrder(a) < OwnerOrder(b);
  });
  for (size_t i = 1; i < c.owners.size(); ++i) {
    if (OwnerOrder(c.owners[i - 1]) == OwnerOrder(c.owners[i])) {
      return PathError("$.owners", "worker '" + c.owners[i].worker + "' with connector '" +
                                       std::string(ToString(c.owners[i].connector)) +
                                       "' appears twice");
    }
  }

  // Every field is now in range, so the canonical forms exist; they can
  // still fail on invalid UTF-8 in a string.
  KVGOV_ASSIGN_OR_RETURN(c.certificate_id, ComputeCertificateId(c));
  KVGOV_ASSIGN_OR_RETURN(std::string signed_bytes, CanonicalCertificateBytes(c));
  c.signature = key.Sign(signed_bytes);
  return c;
}

Result<DeletionCertificate> ParseCertificateJson(std::string_view text, size_t max_bytes) {
  KVGOV_ASSIGN_OR_RETURN(Json json,
                         cert_internal::ParseJson(text, cert_internal::ParseLimits{max_bytes, 8}));
  DeletionCertificate certificate;
  KVGOV_RETURN_IF_ERROR(ReadCertificate(json, certificate));
  return certificate;
}

std::vector<CertificateCheck> CheckCertificate(
    const DeletionCertificate& certificate, std::span<const std::string> trusted_public_keys_hex) {
  std::vector<CertificateCheck> checks;
  checks.push_back(
      {"schema", certificate.schema == kCertificateSchema
                     ? Status::Ok()
                     : PathError("$.schema", "want \"" + std::string(kCertificateSchema) + "\"")});
  checks.push_back({"fields", CheckFields(certificate)});

  Result<std::string> id = ComputeCertificateId(certificate);
  Status id_status = id.status();
  if (id.ok() && *id != certificate.certificate_id) {
    id_status = Status::PermissionDenied(
        "$.certificate_id: does not match the fields (they hash to " + *id + ")");
  }
  checks.push_back({"certificate_id", id_status});

  Result<std::string> signed_bytes = CanonicalCertificateBytes(certificate);
  checks.push_back({"signature", !signed_bytes.ok()
                                     ? signed_bytes.status()
                                     : VerifySignature(certificate.issuer.public_key, *signed_bytes,
                                                       certificate.signature)});

  const std::string presented = Lowercase(certificate.issuer.public_key);
  const bool trusted =
      std::any_of(trusted_public_keys_hex.begin(), trusted_public_keys_hex.end(),
                  [&](const std::string& key) { return Lowercase(key) == presented; });
  checks.push_back({"issuer", trusted ? Status::Ok()
                                      : Status::PermissionDenied(
                                            "$.issuer.public_key: key " +
                                            certificate.issuer.key_id + " is not among the " +
                                            std::to_string(trusted_public_keys_hex.size()) +
                                            " trusted issuer key(s)")});
  return checks;
}

Status VerifyCertificate(const DeletionCertificate& certificate,
                         std::span<const std::string> trusted_public_keys_hex) {
  for (const CertificateCheck& check : CheckCertificate(certificate, trusted_public_keys_hex)) {
    if (!check.status.ok()) return check.status;
  }
  return Status::Ok();
}

Status VerifyAnchor(const DeletionCertificate& certificate, uint64_t seq,
                    std::string_view prev_hash, std::string_view hash,
                    std::optional<std::string_view> row_subject) {
  const JournalAnchor& anchor = certificate.anchor;
  if (anchor.journal_seq != seq) {
    return Status::PermissionDenied("$.anchor.journal_seq: certificate says " +
                                    std::to_string(anchor.journal_seq) +
                                    ", the journal row is seq " + std::to_string(seq));
  }
  if (anchor.prev_hash != prev_hash) {
    return Status::PermissionDenied("$.anchor.prev_hash: certificate says " + anchor.prev_hash +
                                    ", journal row " + std::to_string(seq) + " has " +
                                    std::string(prev_hash));
  }
  if (anchor.hash != hash) {
    return Status::PermissionDenied("$.anchor.hash: certificate says " + anchor.hash +
                                    ", journal row " + std::to_string(seq) + " has " +
                                    std::string(hash));
  }
  if (row_subject.has_value() && *row_subject != certificate.directive_id) {
    // The row is kvgov's own, but its subject may be any bytes: echo it
    // printable only.
    std::string subject;
    for (size_t i = 0; i < row_subject->size() && i < 80; ++i) {
      const char c = (*row_subject)[i];
      subject += (c >= 0x20 && c < 0x7f) ? c : '?';
    }
    return Status::PermissionDenied("$.directive_id: journal row " + std::to_string(seq) +
                                    " is about '" + subject + "', not this directive");
  }
  return Status::Ok();
}

}  // namespace kvgov::cert
