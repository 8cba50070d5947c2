#include "cli/cert_verify.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "kvgov/cert/certificate.h"
#include "kvgov/cert/issuer_key.h"
#include "kvgov/journal/journal.h"
#include "kvgov/store/store.h"

namespace kvgov::cli {
namespace {

// Certificate fields and journal rows are untrusted text on a terminal:
// printable ASCII only, at most `max` bytes.
std::string Printable(std::string_view text, size_t max = 80) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < max; ++i) {
    const char c = text[i];
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (text.size() > max) out += "...";
  return out;
}

class Report {
 public:
  void Ok(std::string_view check, const std::string& detail) { Line(true, check, detail); }
  void Fail(std::string_view check, const std::string& why) { Line(false, check, why); }
  void Skip(std::string_view check, const std::string& why) {
    std::printf("skip %.*s: %s\n", static_cast<int>(check.size()), check.data(), why.c_str());
  }
  void Check(std::string_view check, const Status& status, const std::string& ok_detail) {
    status.ok() ? Ok(check, ok_detail) : Fail(check, status.ToString());
  }
  bool failed() const { return failed_; }

 private:
  void Line(bool ok, std::string_view check, const std::string& text) {
    failed_ = failed_ || !ok;
    std::printf("%-4s %.*s: %s\n", ok ? "ok" : "FAIL", static_cast<int>(check.size()), check.data(),
                text.c_str());
  }
  bool failed_ = false;
};

Result<std::string> ReadBounded(const std::string& file) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(file, error)) {
    return Status::IOError("'" + file + "' is not a readable regular file" +
                           (error ? ": " + error.message() : ""));
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return Status::IOError("cannot open '" + file + "'");
  std::string bytes(cert::kMaxCertificateBytes + 1, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (in.bad()) return Status::IOError("cannot read '" + file + "'");
  bytes.resize(static_cast<size_t>(in.gcount()));
  if (bytes.size() > cert::kMaxCertificateBytes) {
    return Status::ResourceExhausted("'" + file + "' is over the 1 MiB certificate limit");
  }
  return bytes;
}

std::string Lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool IsHexKey(std::string_view key) {
  if (key.size() != 64) return false;
  for (const char c : key) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
      return false;
    }
  }
  return true;
}

// The anchor against the journal in DATA_DIR/store. Fails with why.
Status CheckAnchor(const cert::DeletionCertificate& certificate, const std::string& data_dir,
                   std::string* detail) {
  const std::string store_dir = data_dir + "/store";
  std::error_code error;
  // Store::Open creates a store where there is none; a verifier must not.
  if (!std::filesystem::exists(store_dir + "/CURRENT", error)) {
    return Status::NotFound("no kvgov store at " + store_dir);
  }
  Result<std::unique_ptr<store::Store>> opened = store::Store::Open(store_dir);
  if (!opened.ok()) {
    return Status::Unavailable("cannot open " + store_dir + ": " + opened.status().ToString());
  }
  const store::Store& store = **opened;

  const uint64_t seq = certificate.anchor.journal_seq;
  Result<journal::VerifyReport> report = journal::Verify(store);
  if (!report.ok()) return report.status().WithContext("journal verify");
  if (report->first_broken_seq.has_value() && *report->first_broken_seq <= seq) {
    return Status::Corruption(
        "the journal chain is broken at seq " + std::to_string(*report->first_broken_seq) + " (" +
        Printable(report->problem, 200) + "), at or before the anchor row " + std::to_string(seq));
  }
  if (report->rows < seq) {
    return Status::NotFound("the journal has " + std::to_string(report->rows) +
                            " rows; the anchor row " + std::to_string(seq) + " is not there");
  }
  Result<std::optional<std::string>> value = store.Get(store::Column::kJournal, store::KeyU64(seq));
  if (!value.ok()) return value.status().WithContext("journal row " + std::to_string(seq));
  if (!value->has_value()) {
    return Status::NotFound("journal row " + std::to_string(seq) + " vanished while reading");
  }
  Result<journal::Row> row = journal::DecodeRow(**value);
  if (!row.ok()) return row.status().WithContext("journal row " + std::to_string(seq));
  KVGOV_RETURN_IF_ERROR(
      cert::VerifyAnchor(certificate, row->seq, row->prev_hash, row->hash, row->subject));
  *detail = "journal row " + std::to_string(seq) + " (kind '" + Printable(row->kind) +
            "', subject '" + Printable(row->subject) +
            "') matches; the chain verifies through row " + std::to_string(report->rows);
  if (report->first_broken_seq.has_value()) {
    *detail += " (it breaks later, at seq " + std::to_string(*report->first_broken_seq) + ")";
  }
  return Status::Ok();
}

}  // namespace

int RunCertVerify(const std::string& file, const std::vector<std::string>& issuer_keys_hex,
                  const std::string& data_dir) {
  Report report;
  Result<std::string> text = ReadBounded(file);
  if (!text.ok()) {
    report.Fail("read", text.status().ToString());
    return 1;
  }
  report.Ok("read", file + " (" + std::to_string(text->size()) + " bytes)");

  Result<cert::DeletionCertificate> parsed = cert::ParseCertificateJson(*text);
  if (!parsed.ok()) {
    report.Fail("parse", parsed.status().ToString());
    return 1;
  }
  const cert::DeletionCertificate& certificate = *parsed;
  std::string revocation;
  if (const std::optional<cert::CertRevocation>& r = certificate.revocation) {
    revocation = "; revokes tenant '" + Printable(r->tenant) + "' for " +
                 (r->model.empty() ? "every model" : "model '" + Printable(r->model) + "'") +
                 ": unreachable since " + std::to_string(r->unreachable_since_ms) +
                 " ms, removed by " + std::to_string(r->removed_by_ms) + " ms";
  }
  report.Ok("parse", "certificate " + Printable(certificate.certificate_id) + ", subject " +
                         Printable(certificate.subject) + ", directive '" +
                         Printable(certificate.directive_id) + "', " +
                         std::to_string(certificate.target_count) + " target(s), " +
                         std::to_string(certificate.owners.size()) + " owner(s)" + revocation);

  // The trusted issuer keys, and where each came from.
  std::vector<std::string> trusted;
  std::vector<std::string> sources;
  for (const std::string& key : issuer_keys_hex) {
    if (!IsHexKey(key)) {
      report.Fail("issuer-key", "--issuer-key '" + Printable(key) +
                                    "' is not an Ed25519 public key (want 64 hex digits)");
      continue;
    }
    trusted.push_back(key);
    sources.emplace_back("--issuer-key");
  }
  std::string key_file_note;
  if (!data_dir.empty()) {
    const std::string key_path = data_dir + "/issuer.key";
    std::error_code error;
    // LoadOrCreate would create a missing key: only call it on a file that
    // is there.
    if (std::filesystem::is_regular_file(key_path, error)) {
      Result<std::unique_ptr<cert::IssuerKey>> key = cert::IssuerKey::LoadOrCreate(key_path);
      if (key.ok()) {
        trusted.push_back((*key)->public_key_hex());
        sources.push_back(key_path);
      } else {
        key_file_note = "; " + key_path + " could not be read: " + key.status().ToString();
      }
    } else {
      key_file_note = "; there is no " + key_path;
    }
  }

  for (const cert::CertificateCheck& check : cert::CheckCertificate(certificate, trusted)) {
    if (check.name == "issuer") {
      if (check.status.ok()) {
        std::string source;
        for (size_t i = 0; i < trusted.size() && source.empty(); ++i) {
          if (Lowercase(trusted[i]) == certificate.issuer.public_key) source = sources[i];
        }
        report.Ok("issuer", "key " + certificate.issuer.key_id + " is trusted (" + source + ")");
      } else {
        std::string why = check.status.ToString() + key_file_note;
        if (trusted.empty()) {
          why += "; pass --issuer-key HEX (the daemon's GET /v1/issuer) or --data-dir DIR";
        }
        report.Fail("issuer", why);
      }
      continue;
    }
    std::string detail = "holds";
    if (check.name == "schema") detail = certificate.schema;
    if (check.name == "certificate_id") detail = "recomputes from the fields";
    if (check.name == "signature") {
      detail = "Ed25519 over the canonical bytes verifies under key " + certificate.issuer.key_id;
    }
    report.Check(check.name, check.status, detail);
  }

  if (data_dir.empty()) {
    report.Skip("anchor", "no --data-dir, so the journal anchor was not checked");
  } else {
    std::string detail;
    Status anchored = CheckAnchor(certificate, data_dir, &detail);
    report.Check("anchor", anchored, detail);
  }
  return report.failed() ? 1 : 0;
}

}  // namespace kvgov::cli
