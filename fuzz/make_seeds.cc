// Writes the seeds of fuzz/corpus/ that are easier to mint than to write
// by hand: journal rows and signed certificates. Deterministic (fixed key,
// times and contents), so running it again rewrites the same bytes; run it
// after a change to either format and commit what changes:
//
//   build-fuzz/fuzz/kvgov_fuzz_seeds fuzz/corpus
//
// Each valid seed is checked against the published test vectors first, so
// a seed can never silently drift from the documented format.

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "kvgov/cert/certificate.h"
#include "kvgov/cert/issuer_key.h"
#include "kvgov/core/digest.h"
#include "kvgov/journal/journal.h"

namespace {

namespace fs = std::filesystem;
using kvgov::journal::Row;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "make_seeds: %s\n", what.c_str());
  std::exit(1);
}

void Write(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) Fail("cannot write " + path.string());
  std::printf("%s (%zu bytes)\n", path.c_str(), bytes.size());
}

// A format-2 row carries who made the write (`actor`, `origin`); a format-1
// row, as kvgov wrote them before attribution, has neither.
Row MakeRow(uint32_t format_version, uint64_t seq, int64_t time_ms, std::string kind,
            std::string subject, std::string actor, std::string origin, std::string payload,
            std::string prev_hash) {
  Row row;
  row.format_version = format_version;
  row.seq = seq;
  row.time_ms = time_ms;
  row.kind = std::move(kind);
  row.subject = std::move(subject);
  row.actor = std::move(actor);
  row.origin = std::move(origin);
  row.payload = std::move(payload);
  row.payload_digest = kvgov::Sha256Hex(row.payload);
  row.prev_hash = std::move(prev_hash);
  row.hash = kvgov::journal::RowHash(row);
  return row;
}

// docs/formats/journal.md section 6 (its format-1 vectors, and row 1 of
// format 2), and the bytes around them that a decoder must refuse.
void WriteJournalRows(const fs::path& dir) {
  const Row row1 = MakeRow(1, 1, 1700000000000, "worker.drain", "w1", "", "", "{\"drain\":true}",
                           std::string(64, '0'));
  if (row1.hash != "f47d7e76dd59e4a9a93379ded263d26de3d2f0fb26ac6f336338141e5724eb90") {
    Fail("row 1 does not match the journal.md format-1 test vector: " + row1.hash);
  }
  const Row row2 = MakeRow(1, 2, -5, "config", "", "", "", "{}", row1.hash);
  if (row2.hash != "ba6a3b43c85c8e02daabb161dfc22f180f75c0224b684ba773f874777c10f299") {
    Fail("row 2 does not match the journal.md format-1 test vector: " + row2.hash);
  }
  const Row attributed = MakeRow(2, 1, 1700000000000, "worker.drain", "w1", "token:ops", "",
                                 "{\"drain\":true}", std::string(64, '0'));
  if (attributed.hash != "c0e1bf0a00ab17ce97fbb41b00d5d703a1b8c89c39b33a42fb3aa4d673a60e57") {
    Fail("row 1 does not match the journal.md format-2 test vector: " + attributed.hash);
  }
  const std::string encoded1 = kvgov::journal::EncodeRow(row1);
  Write(dir / "row1_worker_drain.bin", encoded1);
  Write(dir / "row2_negative_time.bin", kvgov::journal::EncodeRow(row2));
  Write(dir / "row1_v2_attributed.bin", kvgov::journal::EncodeRow(attributed));
  // The smallest row: format 1, every field empty (41 bytes).
  Row empty;
  empty.format_version = 1;
  Write(dir / "row_empty_fields.bin", kvgov::journal::EncodeRow(empty));
  Write(dir / "invalid_truncated.bin", encoded1.substr(0, encoded1.size() - 1));
  Write(dir / "invalid_trailing_byte.bin", encoded1 + '\0');
  // A format-1 body under the format-2 version byte: actor and origin are
  // missing, so the lengths that follow are misread.
  std::string version2 = encoded1;
  version2[0] = '\x02';
  Write(dir / "invalid_v1_fields_under_version_2.bin", version2);
  std::string long_field = encoded1;
  long_field[20] = '\x7f';  // the low byte of kind's length: past the end
  Write(dir / "invalid_field_past_end.bin", long_field);
}

std::unique_ptr<kvgov::cert::IssuerKey> LoadRfcKey(const fs::path& scratch) {
  // RFC 8032 section 7.1, TEST 1: the key certificate.md's test vector uses.
  static constexpr unsigned char kSeed[32] = {0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60,
                                              0xba, 0x84, 0x4a, 0xf4, 0x92, 0xec, 0x2c, 0xc4,
                                              0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32, 0x69, 0x19,
                                              0x70, 0x3b, 0xac, 0x03, 0x1c, 0xae, 0x7f, 0x60};
  const fs::path path = scratch / "rfc8032-test1.key";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(kSeed), sizeof(kSeed));
    if (!out) Fail("cannot write " + path.string());
  }
  // IssuerKey refuses a seed that group or others can read.
  ::chmod(path.c_str(), 0600);
  auto key = kvgov::cert::IssuerKey::LoadOrCreate(path.string());
  if (!key.ok()) Fail("issuer key: " + key.status().ToString());
  return std::move(key).value();
}

std::string Encode(const kvgov::cert::DeletionCertificate& certificate) {
  auto encoded = kvgov::cert::EncodeCertificateJson(certificate);
  if (!encoded.ok()) Fail("encode: " + encoded.status().ToString());
  return *encoded;
}

// docs/formats/certificate.md section 7 (both test vectors), a one-owner
// certificate, a tenant revocation with one owner, and two that parse but
// do not verify.
void WriteCertificates(const fs::path& dir, const kvgov::cert::IssuerKey& key) {
  using namespace kvgov::cert;
  CertificateInput input;
  input.subject = std::string("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  input.directive_id = "dir-7";
  input.scope = kvgov::KVEvictionScope::kExactSpan;
  input.owners = {
      CertOwner{"w2", CertConnector::kSglang, kvgov::KVEvictionScope::kWholePrefixCache, true,
                "exact_span_unsupported_whole_prefix_flush",
                Witness{WitnessKind::kAllBlocksCleared, {41}}},
      CertOwner{"w1", CertConnector::kVllm, kvgov::KVEvictionScope::kExactSpan, false, "",
                Witness{WitnessKind::kBlockRemoved, {12, 10, 11, 10}}},
  };
  input.target_count = 3;
  input.anchor = JournalAnchor{17, std::string(64, 'a'), std::string(64, 'b')};
  input.issued_at_ms = 1700000000000;
  auto golden = MintCertificate(input, key);
  if (!golden.ok()) Fail("mint: " + golden.status().ToString());
  if (golden->certificate_id !=
      "f41ec24cecb38c0e50382e5fd1775e704bffb0e1f222d2e0daeb188f82297a6c") {
    Fail("the certificate does not match the certificate.md test vector: " +
         golden->certificate_id);
  }
  Write(dir / "golden_two_owners.json", Encode(*golden));

  input.owners = {CertOwner{"w1", CertConnector::kWebhook, kvgov::KVEvictionScope::kExactSpan,
                            false, "", Witness{WitnessKind::kBlockRemoved, {1}}}};
  input.directive_id = "d";
  input.target_count = 1;
  input.anchor.journal_seq = 1;
  input.issued_at_ms = 0;
  auto single = MintCertificate(input, key);
  if (!single.ok()) Fail("mint: " + single.status().ToString());
  Write(dir / "single_owner.json", Encode(*single));

  // A tenant revocation (certificate.md section 2) that still found two of
  // the tenant's old blocks, on one owner.
  input.subject = std::string("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  input.directive_id = "d";
  input.scope = kvgov::KVEvictionScope::kWholePrefixCache;
  input.owners = {CertOwner{"w1", CertConnector::kVllm, kvgov::KVEvictionScope::kWholePrefixCache,
                            false, "", Witness{WitnessKind::kBlockRemoved, {5, 9}}}};
  input.target_count = 2;
  input.anchor = JournalAnchor{2, std::string(64, 'a'), std::string(64, 'b')};
  input.issued_at_ms = 1700000000500;
  input.revocation = CertRevocation{"acme", "llama", 1700000000000, 1700000000400};
  auto revocation = MintCertificate(input, key);
  if (!revocation.ok()) Fail("mint: " + revocation.status().ToString());
  Write(dir / "revocation_one_owner.json", Encode(*revocation));

  // Section 7's second test vector: a revocation that found nothing
  // resident, so no owner and no target.
  input.subject = std::string("fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210");
  input.directive_id = "dir-9";
  input.scope = kvgov::KVEvictionScope::kExactSpan;
  input.owners.clear();
  input.target_count = 0;
  input.anchor = JournalAnchor{23, std::string(64, 'c'), std::string(64, 'd')};
  input.issued_at_ms = 1700000000250;
  input.revocation = CertRevocation{"acme", "", 1700000000000, 1700000000000};
  auto no_residue = MintCertificate(input, key);
  if (!no_residue.ok()) Fail("mint: " + no_residue.status().ToString());
  if (no_residue->certificate_id !=
          "a4f2084a2dd0d3143af9e60b4a5cf2db0bb72de30112f36b35d0816f4b2361c7" ||
      no_residue->signature !=
          "26f95d1b75eceaf2fcb63301b5b803a0cd60f8b3b4259e66ea8a8a7f4503cf94"
          "e9d70979d990752068053670f6a9c4b4cef66415d03e5ce2ad2a98b9ae680c04") {
    Fail("the revocation does not match the certificate.md test vector: " +
         no_residue->certificate_id);
  }
  Write(dir / "revocation_no_owners.json", Encode(*no_residue));

  DeletionCertificate edited = *golden;
  edited.target_count = 4;
  Write(dir / "invalid_edited_target_count.json", Encode(edited));
  DeletionCertificate other_schema = *golden;
  other_schema.schema = "kvgov.deletioncert/v2";
  Write(dir / "invalid_other_schema.json", Encode(other_schema));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const fs::path corpus = argv[1];
  const fs::path journal = corpus / "journal_row_fuzzer";
  const fs::path certificate = corpus / "certificate_fuzzer";
  fs::create_directories(journal);
  fs::create_directories(certificate);
  WriteJournalRows(journal);

  const fs::path scratch =
      fs::temp_directory_path() / ("kvgov_fuzz_seeds_" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  auto key = LoadRfcKey(scratch);
  fs::remove_all(scratch);
  WriteCertificates(certificate, *key);
  return 0;
}
