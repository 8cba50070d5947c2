#include "cli/cert_verify.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "kvgov/cert/certificate.h"
#include "kvgov/cert/issuer_key.h"
#include "kvgov/journal/journal.h"
#include "kvgov/store/store.h"

#include "testing/scratch_dir.h"

namespace kvgov::cli {
namespace {

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

class CertVerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_dir_ = (root_ / "data").string();
    std::filesystem::create_directories(data_dir_);

    Result<std::unique_ptr<store::Store>> store = store::Store::Open(data_dir_ + "/store");
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    Result<std::unique_ptr<journal::Journal>> journal = journal::Journal::Open(store->get());
    ASSERT_TRUE(journal.ok()) << journal.status().ToString();
    for (int i = 1; i <= 3; ++i) {
      Result<journal::Row> row =
          (*journal)->Append("directive.transition", "dir-" + std::to_string(i), {"kvgov", ""},
                             "{\"state\":\"witnessed\"}", 1000 + i);
      ASSERT_TRUE(row.ok()) << row.status().ToString();
      rows_.push_back(*row);
    }
    Result<std::unique_ptr<cert::IssuerKey>> key =
        cert::IssuerKey::LoadOrCreate(data_dir_ + "/issuer.key");
    ASSERT_TRUE(key.ok()) << key.status().ToString();
    key_ = std::move(key).value();
    // The journal and store close here, as they would when the daemon stops.
  }

  cert::CertificateInput Input(const journal::Row& row) const {
    cert::CertificateInput input;
    input.subject = std::string(64, 'c');
    input.directive_id = row.subject;
    input.scope = KVEvictionScope::kExactSpan;
    input.owners = {cert::CertOwner{"w1", cert::CertConnector::kVllm, KVEvictionScope::kExactSpan,
                                    false, "",
                                    cert::Witness{cert::WitnessKind::kBlockRemoved, {7}}}};
    input.target_count = 1;
    input.anchor = cert::JournalAnchor{row.seq, row.prev_hash, row.hash};
    input.issued_at_ms = 1700000000000;
    return input;
  }

  std::string WriteCertificate(const cert::CertificateInput& input) {
    Result<cert::DeletionCertificate> minted = cert::MintCertificate(input, *key_);
    EXPECT_TRUE(minted.ok()) << minted.status().ToString();
    Result<std::string> document = cert::EncodeCertificateJson(*minted);
    EXPECT_TRUE(document.ok());
    const std::string path = (root_ / "cert.json").string();
    WriteFile(path, *document);
    return path;
  }

  // Runs the verifier; returns its exit code and sets `output_`.
  int Verify(const std::string& file, const std::vector<std::string>& keys,
             const std::string& data_dir) {
    ::testing::internal::CaptureStdout();
    const int code = RunCertVerify(file, keys, data_dir);
    output_ = ::testing::internal::GetCapturedStdout();
    return code;
  }

  bool Has(const std::string& text) const { return output_.find(text) != std::string::npos; }

  test_support::ScratchDir root_{"kvgov_cert_verify_test"};
  std::string data_dir_;
  std::vector<journal::Row> rows_;
  std::unique_ptr<cert::IssuerKey> key_;
  std::string output_;
};

TEST_F(CertVerifyTest, GenuineCertificateVerifiesAgainstTheDataDir) {
  const std::string file = WriteCertificate(Input(rows_[1]));
  EXPECT_EQ(Verify(file, {}, data_dir_), 0) << output_;
  for (const char* line : {"ok   read:", "ok   parse:", "ok   schema:", "ok   fields:",
                           "ok   certificate_id:", "ok   signature:", "ok   issuer:",
                           "ok   anchor: journal row 2 (kind 'directive.transition', subject "
                           "'dir-2') matches; the chain verifies through row 3"}) {
    EXPECT_TRUE(Has(line)) << line << "\n" << output_;
  }
  EXPECT_FALSE(Has("FAIL")) << output_;
}

// A tenant revocation's certificate, with no owner and no target, verifies
// the same way, and the parse line states its two moments.
TEST_F(CertVerifyTest, RevocationCertificateVerifiesAndShowsItsMoments) {
  cert::CertificateInput input = Input(rows_[1]);
  input.owners.clear();
  input.target_count = 0;
  input.revocation = cert::CertRevocation{"acme", "", 1700000000000, 1700000000400};
  EXPECT_EQ(Verify(WriteCertificate(input), {}, data_dir_), 0) << output_;
  EXPECT_TRUE(
      Has("0 target(s), 0 owner(s); revokes tenant 'acme' for every model: unreachable "
          "since 1700000000000 ms, removed by 1700000000400 ms"))
      << output_;
  for (const char* line : {"ok   fields:", "ok   certificate_id:", "ok   signature:",
                           "ok   issuer:", "ok   anchor: journal row 2"}) {
    EXPECT_TRUE(Has(line)) << line << "\n" << output_;
  }
  EXPECT_FALSE(Has("FAIL")) << output_;

  input.revocation->model = "llama";
  EXPECT_EQ(Verify(WriteCertificate(input), {key_->public_key_hex()}, ""), 0) << output_;
  EXPECT_TRUE(Has("revokes tenant 'acme' for model 'llama'")) << output_;
}

TEST_F(CertVerifyTest, IssuerKeyFlagWithoutDataDirSkipsTheAnchor) {
  const std::string file = WriteCertificate(Input(rows_[0]));
  EXPECT_EQ(Verify(file, {key_->public_key_hex()}, ""), 0) << output_;
  EXPECT_TRUE(Has("ok   issuer: key " + key_->key_id() + " is trusted (--issuer-key)")) << output_;
  EXPECT_TRUE(Has("skip anchor:")) << output_;

  // No trusted key at all: the certificate is genuine but proves nothing.
  EXPECT_EQ(Verify(file, {}, ""), 1) << output_;
  EXPECT_TRUE(Has("FAIL issuer:")) << output_;
  EXPECT_TRUE(Has("ok   signature:")) << output_;

  // Another key, and a malformed one.
  EXPECT_EQ(Verify(file, {std::string(64, 'a'), "xyz"}, ""), 1) << output_;
  EXPECT_TRUE(Has("FAIL issuer-key: --issuer-key 'xyz'")) << output_;
  EXPECT_TRUE(Has("FAIL issuer:")) << output_;
}

TEST_F(CertVerifyTest, AnchorThatDoesNotMatchTheJournalFails) {
  cert::CertificateInput input = Input(rows_[1]);
  input.anchor.hash = rows_[2].hash;  // a real hash, of another row
  EXPECT_EQ(Verify(WriteCertificate(input), {}, data_dir_), 1) << output_;
  EXPECT_TRUE(Has("FAIL anchor: permission_denied: $.anchor.hash: certificate says")) << output_;
  EXPECT_TRUE(Has("ok   signature:")) << output_;

  // A genuine row of this journal, but the witness row of another directive.
  input = Input(rows_[1]);
  input.directive_id = "dir-3";
  EXPECT_EQ(Verify(WriteCertificate(input), {}, data_dir_), 1) << output_;
  EXPECT_TRUE(
      Has("FAIL anchor: permission_denied: $.directive_id: journal row 2 is about 'dir-2', "
          "not this directive"))
      << output_;

  input = Input(rows_[2]);
  input.anchor.journal_seq = 9;
  EXPECT_EQ(Verify(WriteCertificate(input), {}, data_dir_), 1) << output_;
  EXPECT_TRUE(Has("FAIL anchor: not_found: the journal has 3 rows; the anchor row 9 is not there"))
      << output_;
}

TEST_F(CertVerifyTest, RunningDaemonsLockIsReportedClearly) {
  const std::string file = WriteCertificate(Input(rows_[1]));
  Result<std::unique_ptr<store::Store>> held = store::Store::Open(data_dir_ + "/store");
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(Verify(file, {}, data_dir_), 1) << output_;
  EXPECT_TRUE(Has("FAIL anchor:")) << output_;
  EXPECT_TRUE(Has("a kvgov daemon on this data dir?) holds its lock")) << output_;
  EXPECT_TRUE(Has("ok   issuer:")) << output_;
}

TEST_F(CertVerifyTest, NeverCreatesAStoreOrAnIssuerKey) {
  const std::string file = WriteCertificate(Input(rows_[1]));
  const std::string empty = (root_ / "empty").string();
  std::filesystem::create_directories(empty);
  EXPECT_EQ(Verify(file, {key_->public_key_hex()}, empty), 1) << output_;
  EXPECT_TRUE(Has("FAIL anchor: not_found: no kvgov store at " + empty + "/store")) << output_;
  EXPECT_TRUE(Has("ok   issuer:")) << output_;
  EXPECT_TRUE(std::filesystem::is_empty(empty));

  EXPECT_EQ(Verify(file, {}, empty), 1) << output_;
  EXPECT_TRUE(Has("there is no " + empty + "/issuer.key")) << output_;
  EXPECT_TRUE(std::filesystem::is_empty(empty));
}

TEST_F(CertVerifyTest, BadFilesFailEarly) {
  const std::string file = WriteCertificate(Input(rows_[1]));
  std::ifstream in(file);
  std::string document((std::istreambuf_iterator<char>(in)), {});

  std::string tampered = document;
  tampered.replace(tampered.find("\"target_count\":1"), 16, "\"target_count\":2");
  WriteFile(file, tampered);
  EXPECT_EQ(Verify(file, {}, data_dir_), 1) << output_;
  EXPECT_TRUE(Has("FAIL signature: permission_denied")) << output_;
  EXPECT_TRUE(Has("FAIL certificate_id: permission_denied")) << output_;

  WriteFile(file, document.substr(0, 50));
  EXPECT_EQ(Verify(file, {}, data_dir_), 1) << output_;
  EXPECT_TRUE(Has("FAIL parse: invalid_argument: $: malformed JSON")) << output_;

  WriteFile(file, std::string((size_t{1} << 20) + 1, ' '));
  EXPECT_EQ(Verify(file, {}, data_dir_), 1) << output_;
  EXPECT_TRUE(Has("FAIL read: resource_exhausted:")) << output_;

  EXPECT_EQ(Verify((root_ / "missing.json").string(), {}, data_dir_), 1) << output_;
  EXPECT_TRUE(Has("FAIL read:")) << output_;
}

}  // namespace
}  // namespace kvgov::cli
