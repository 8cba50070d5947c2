// ParseCertificateJson, then CheckCertificate and VerifyCertificate: what
// `kvgov cert verify` runs on a certificate document anyone may hand it.
// The trusted key is RFC 8032's TEST 1 key, which signed the seeds
// (fuzz/make_seeds.cc), so mutations of a valid certificate reach the
// signature check and beyond. Checked, beyond no crash, leak or exception:
//  - parsing: only the documented error codes, messages led by a path, the
//    size bound before anything else;
//  - a parsed certificate encodes (EncodeCertificateJson), the encoding
//    parses back to an equal certificate, and encoding that gives the same
//    bytes: the document form is canonical;
//  - CheckCertificate runs its five checks in their documented order with
//    their documented codes, and VerifyCertificate reports the first that
//    fails;
//  - a certificate that verifies stops verifying when any signed field is
//    changed (a tenant revocation's four included, and the revocation
//    added or taken away), and is then refused by both the certificate_id
//    and the signature check. A revocation's certificate may have no owner.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "kvgov/cert/certificate.h"

namespace kvgov::fuzz {
namespace {

// RFC 8032 section 7.1, TEST 1; the case of the hex must not matter.
const std::vector<std::string>& TrustedKeys() {
  static const std::vector<std::string> keys = {
      "D75A980182B10AB7D54BFED3C964073A0EE172F3DAA62325AF021A68F707511A"};
  return keys;
}

constexpr std::array<std::string_view, 5> kCheckNames = {"schema", "fields", "certificate_id",
                                                         "signature", "issuer"};

void CheckParseFailure(const Status& status, std::string_view text, size_t max_bytes) {
  FUZZ_CHECK(CodeIsOneOf(status, StatusCode::kInvalidArgument, StatusCode::kResourceExhausted),
             "parse: unexpected code: %s", Describe(status).c_str());
  FUZZ_CHECK(status.message().starts_with("$"), "parse error without a path: %s",
             Describe(status).c_str());
  if (text.size() > max_bytes) {
    FUZZ_CHECK(status.code() == StatusCode::kResourceExhausted, "oversized document: %s",
               Describe(status).c_str());
  }
}

// Parsing checks shape, so every value it returns has a canonical form.
void CheckEncoding(const cert::DeletionCertificate& certificate) {
  const Result<std::string> encoded = cert::EncodeCertificateJson(certificate);
  FUZZ_CHECK(encoded.ok(), "a parsed certificate does not encode: %s",
             Describe(encoded.status()).c_str());
  const Result<cert::DeletionCertificate> reparsed = cert::ParseCertificateJson(*encoded);
  FUZZ_CHECK(reparsed.ok(), "the encoding does not parse: %s\n  %s",
             Describe(reparsed.status()).c_str(), encoded->c_str());
  FUZZ_CHECK(*reparsed == certificate, "parse(encode(c)) != c\n  %s", encoded->c_str());
  const Result<std::string> again = cert::EncodeCertificateJson(*reparsed);
  FUZZ_CHECK(again.ok() && *again == *encoded, "the encoding is not canonical\n  %s\n  %s",
             encoded->c_str(), again.ok() ? again->c_str() : "(error)");
}

// Each check's documented outcome codes (include/kvgov/cert/certificate.h).
bool CodeAllowed(std::string_view check, const Status& status) {
  if (status.ok()) return true;
  if (check == "schema" || check == "fields") return status.code() == StatusCode::kInvalidArgument;
  if (check == "issuer") return status.code() == StatusCode::kPermissionDenied;
  return CodeIsOneOf(status, StatusCode::kPermissionDenied, StatusCode::kInvalidArgument);
}

Status CheckVerification(const cert::DeletionCertificate& certificate) {
  const std::vector<cert::CertificateCheck> checks =
      cert::CheckCertificate(certificate, TrustedKeys());
  FUZZ_CHECK(checks.size() == kCheckNames.size(), "%zu checks", checks.size());
  Status first_failure;
  for (size_t i = 0; i < checks.size(); ++i) {
    FUZZ_CHECK(checks[i].name == kCheckNames[i], "check %zu is '%s'", i, checks[i].name.c_str());
    FUZZ_CHECK(CodeAllowed(checks[i].name, checks[i].status), "check %s: %s",
               checks[i].name.c_str(), Describe(checks[i].status).c_str());
    if (first_failure.ok() && !checks[i].status.ok()) first_failure = checks[i].status;
  }
  const Status verified = cert::VerifyCertificate(certificate, TrustedKeys());
  FUZZ_CHECK(verified == first_failure, "VerifyCertificate %s, first failing check %s",
             Describe(verified).c_str(), Describe(first_failure).c_str());
  return verified;
}

// A verified certificate, with one signed field changed at a time, must be
// caught by the id and the signature (the fields mostly stay well formed,
// so the earlier checks may pass). A revocation's certificate may have no
// owner to edit; each of its revocation's members is edited instead, and
// it loses its revocation, while one without gains one.
void CheckTamperEvident(const cert::DeletionCertificate& certificate) {
  std::vector<cert::DeletionCertificate> edits(3, certificate);
  edits[0].directive_id += "x";
  edits[1].target_count += 1;
  edits[2].issued_at_ms += 1;
  if (!certificate.owners.empty()) {
    edits.push_back(certificate);
    edits.back().owners.back().witness.event_seqs.back() += 1;
  }
  if (certificate.revocation.has_value()) {
    const cert::CertRevocation& revocation = *certificate.revocation;
    for (int member = 0; member < 4; ++member) {
      edits.push_back(certificate);
      cert::CertRevocation& edited = *edits.back().revocation;
      switch (member) {
        case 0:
          edited.tenant += "x";
          break;
        case 1:
          // "" (every model) becomes one model, and one model another.
          edited.model += "x";
          break;
        case 2:
          // Earlier keeps the moments in order; from 0 the only way is up.
          edited.unreachable_since_ms += revocation.unreachable_since_ms > 0 ? -1 : 1;
          break;
        default:
          edited.removed_by_ms += 1;
          break;
      }
    }
    edits.push_back(certificate);
    edits.back().revocation.reset();
  } else {
    edits.push_back(certificate);
    edits.back().revocation =
        cert::CertRevocation{"acme", "", certificate.issued_at_ms, certificate.issued_at_ms};
  }
  for (size_t i = 0; i < edits.size(); ++i) {
    FUZZ_CHECK(!(edits[i] == certificate), "edit %zu changes nothing", i);
    const Status status = cert::VerifyCertificate(edits[i], TrustedKeys());
    FUZZ_CHECK(!status.ok(), "edit %zu still verifies", i);
    const std::vector<cert::CertificateCheck> checks =
        cert::CheckCertificate(edits[i], TrustedKeys());
    FUZZ_CHECK(!checks[2].status.ok() && !checks[3].status.ok(),
               "edit %zu passes the id (%s) or the signature (%s)", i,
               Describe(checks[2].status).c_str(), Describe(checks[3].status).c_str());
  }
}

}  // namespace
}  // namespace kvgov::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgov;
  using namespace kvgov::fuzz;
  const std::string_view text = AsText(data, size);

  // The bound is checked before the bytes are parsed, whatever they hold.
  if (!text.empty()) {
    const Result<cert::DeletionCertificate> bounded =
        cert::ParseCertificateJson(text, text.size() - 1);
    FUZZ_CHECK(!bounded.ok() && bounded.status().code() == StatusCode::kResourceExhausted,
               "a document over max_bytes: %s", Describe(bounded.status()).c_str());
  }

  const Result<cert::DeletionCertificate> parsed = cert::ParseCertificateJson(text);
  if (!parsed.ok()) {
    CheckParseFailure(parsed.status(), text, cert::kMaxCertificateBytes);
    return 0;
  }
  CheckEncoding(*parsed);
  if (CheckVerification(*parsed).ok()) CheckTamperEvident(*parsed);
  return 0;
}
