#include "kvgov/cert/certificate.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "testing/scratch_dir.h"

namespace kvgov::cert {
namespace {

using Json = nlohmann::json;

// RFC 8032 section 7.1, TEST 1: an Ed25519 key pair known independently of
// kvgov, so the golden values below were computed by other tools
// (python3's json and hashlib, `openssl pkeyutl -sign`).
constexpr char kRfcSeedHex[] = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
constexpr char kRfcPublicKey[] = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
constexpr char kRfcKeyId[] = "21fe31dfa154a261";

std::string Repeat(std::string_view text, size_t times) {
  std::string out;
  for (size_t i = 0; i < times; ++i) out += text;
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string HexToBytes(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

// Runs a shell command; returns its exit status and its stdout+stderr.
std::pair<int, std::string> RunShell(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  char buffer[512];
  size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, got);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

class CertificateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string seed_path = Path("rfc.key");
    WriteFile(seed_path, HexToBytes(kRfcSeedHex));
    ::chmod(seed_path.c_str(), 0600);
    Result<std::unique_ptr<IssuerKey>> rfc = IssuerKey::LoadOrCreate(seed_path);
    ASSERT_TRUE(rfc.ok()) << rfc.status().ToString();
    key_ = std::move(rfc).value();
    Result<std::unique_ptr<IssuerKey>> other = IssuerKey::LoadOrCreate(Path("other.key"));
    ASSERT_TRUE(other.ok()) << other.status().ToString();
    other_key_ = std::move(other).value();
    trusted_ = {key_->public_key_hex()};
  }

  std::string Path(std::string_view name) const { return (dir_ / name).string(); }

  // Owners deliberately out of order and with a repeated, unsorted event seq:
  // Mint puts both in order.
  static CertificateInput Input() {
    CertificateInput input;
    input.subject = Repeat("0123456789abcdef", 4);
    input.directive_id = "dir-7";
    input.scope = KVEvictionScope::kExactSpan;
    input.owners = {
        CertOwner{"w2", CertConnector::kSglang, KVEvictionScope::kWholePrefixCache, true,
                  "exact_span_unsupported_whole_prefix_flush",
                  Witness{WitnessKind::kAllBlocksCleared, {41}}},
        CertOwner{"w1", CertConnector::kVllm, KVEvictionScope::kExactSpan, false, "",
                  Witness{WitnessKind::kBlockRemoved, {12, 10, 11, 10}}},
    };
    input.target_count = 3;
    input.anchor = JournalAnchor{17, Repeat("a", 64), Repeat("b", 64)};
    input.issued_at_ms = 1700000000000;
    return input;
  }

  DeletionCertificate Mint(const CertificateInput& input) const {
    Result<DeletionCertificate> minted = MintCertificate(input, *key_);
    EXPECT_TRUE(minted.ok()) << minted.status().ToString();
    return minted.ok() ? *minted : DeletionCertificate{};
  }

  static Status SignatureCheck(const DeletionCertificate& certificate,
                               const std::vector<std::string>& trusted) {
    for (const CertificateCheck& check : CheckCertificate(certificate, trusted)) {
      if (check.name == "signature") return check.status;
    }
    return Status::Internal("no signature check");
  }

  test_support::ScratchDir dir_{"kvgov_cert_test"};
  std::unique_ptr<IssuerKey> key_;
  std::unique_ptr<IssuerKey> other_key_;
  std::vector<std::string> trusted_;
};

// The golden bytes, checked by hand against the canonicalisation rules
// (sorted keys at every level, no whitespace, integers as digits), and
// cross-checked with python3's json.dumps(sort_keys=True,
// separators=(",", ":"), ensure_ascii=False), hashlib.sha256 for the id, and
// `openssl pkeyutl -sign -rawin` with the RFC 8032 key for the signature.
constexpr char kGoldenSigned[] =
    R"({"anchor":{"hash":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",)"
    R"("journal_seq":17,)"
    R"("prev_hash":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},)"
    R"("certificate_id":"f41ec24cecb38c0e50382e5fd1775e704bffb0e1f222d2e0daeb188f82297a6c",)"
    R"("directive_id":"dir-7","issued_at_ms":1700000000000,)"
    R"("issuer":{"key_id":"21fe31dfa154a261",)"
    R"("public_key":"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"},)"
    R"("owners":[{"connector":"vllm","degrade_reason":"","degraded":false,"scope":"exact_span",)"
    R"("witness":{"event_seqs":[10,11,12],"kind":"block_removed"},"worker":"w1"},)"
    R"({"connector":"sglang","degrade_reason":"exact_span_unsupported_whole_prefix_flush",)"
    R"("degraded":true,"scope":"whole_prefix_cache",)"
    R"("witness":{"event_seqs":[41],"kind":"all_blocks_cleared"},"worker":"w2"}],)"
    R"("schema":"kvgov.deletioncert/v1","scope":"exact_span",)"
    R"("subject":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",)"
    R"("target_count":3})";
constexpr char kGoldenId[] = "f41ec24cecb38c0e50382e5fd1775e704bffb0e1f222d2e0daeb188f82297a6c";
constexpr char kGoldenSignature[] =
    "acc1d0edaa3e487626e129c419ccd5f6c552b2d1da77864fbc692b1a551b634c"
    "c6bff48282e9ff4101fcfb52524d1ad9df2ba4a484627f80a9bfd74daa960f06";

TEST_F(CertificateTest, GoldenCanonicalBytesIdAndSignature) {
  ASSERT_EQ(key_->public_key_hex(), kRfcPublicKey);
  ASSERT_EQ(key_->key_id(), kRfcKeyId);
  const DeletionCertificate certificate = Mint(Input());
  EXPECT_EQ(certificate.schema, "kvgov.deletioncert/v1");
  EXPECT_EQ(certificate.certificate_id, kGoldenId);
  EXPECT_EQ(certificate.signature, kGoldenSignature);
  Result<std::string> signed_bytes = CanonicalCertificateBytes(certificate);
  ASSERT_TRUE(signed_bytes.ok());
  EXPECT_EQ(*signed_bytes, kGoldenSigned);

  // The document is the same canonical form with the signature in its
  // sorted place ("signature" < "subject").
  Result<std::string> document = EncodeCertificateJson(certificate);
  ASSERT_TRUE(document.ok());
  std::string expected = kGoldenSigned;
  const size_t subject = expected.find(",\"subject\"");
  expected.insert(subject, std::string(",\"signature\":\"") + kGoldenSignature + "\"");
  EXPECT_EQ(*document, expected);
}

TEST_F(CertificateTest, MintPutsOwnersAndSeqsInOrder) {
  const DeletionCertificate certificate = Mint(Input());
  ASSERT_EQ(certificate.owners.size(), 2u);
  EXPECT_EQ(certificate.owners[0].worker, "w1");
  EXPECT_EQ(certificate.owners[0].witness.event_seqs, (std::vector<uint64_t>{10, 11, 12}));
  EXPECT_EQ(certificate.owners[1].worker, "w2");
  EXPECT_EQ(certificate.issuer.public_key, key_->public_key_hex());
  EXPECT_EQ(certificate.issuer.key_id, key_->key_id());

  // The same set of owners in another order mints the same certificate.
  CertificateInput swapped = Input();
  std::swap(swapped.owners[0], swapped.owners[1]);
  EXPECT_EQ(Mint(swapped), certificate);
}

TEST_F(CertificateTest, MintEncodeParseVerifyRoundTrip) {
  const DeletionCertificate certificate = Mint(Input());
  Result<std::string> document = EncodeCertificateJson(certificate);
  ASSERT_TRUE(document.ok());
  Result<DeletionCertificate> parsed = ParseCertificateJson(*document);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, certificate);
  EXPECT_TRUE(VerifyCertificate(*parsed, trusted_).ok())
      << VerifyCertificate(*parsed, trusted_).ToString();
  for (const CertificateCheck& check : CheckCertificate(*parsed, trusted_)) {
    EXPECT_TRUE(check.status.ok()) << check.name << ": " << check.status.ToString();
  }
  EXPECT_EQ(CheckCertificate(*parsed, trusted_).size(), 5u);
  EXPECT_TRUE(VerifyAnchor(*parsed, 17, Repeat("a", 64), Repeat("b", 64)).ok());

  // Layout is not part of the signature: the same fields pretty-printed, in
  // another key order, still verify, because the signed bytes are
  // recomputed from the parsed fields.
  Json reordered = Json::parse(*document);
  const std::string pretty = reordered.dump(2);
  ASSERT_NE(pretty, *document);
  Result<DeletionCertificate> reparsed = ParseCertificateJson(pretty);
  ASSERT_TRUE(reparsed.ok());
  EXPECT_TRUE(VerifyCertificate(*reparsed, trusted_).ok());
}

TEST_F(CertificateTest, NonAsciiAndControlCharactersRoundTrip) {
  CertificateInput input = Input();
  input.directive_id = "dir/\xc3\xa9\xe2\x82\xac\t\"quoted\"\\\x01\x7f";
  input.owners[0].degrade_reason = "r\xf0\x9f\x98\x80\n";
  const DeletionCertificate certificate = Mint(input);
  Result<std::string> document = EncodeCertificateJson(certificate);
  ASSERT_TRUE(document.ok());
  Result<DeletionCertificate> parsed = ParseCertificateJson(*document);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, certificate);
  EXPECT_TRUE(VerifyCertificate(*parsed, trusted_).ok());
}

// Every field, edited to another well-formed value, breaks the signature
// check (and with it VerifyCertificate), even when the edited key is
// trusted too.
TEST_F(CertificateTest, TamperingWithEveryFieldFailsTheSignature) {
  const DeletionCertificate genuine = Mint(Input());
  const std::vector<std::string> both = {key_->public_key_hex(), other_key_->public_key_hex()};
  const std::vector<std::pair<std::string, std::function<void(DeletionCertificate&)>>> edits = {
      {"schema", [](DeletionCertificate& c) { c.schema = "kvgov.deletioncert/v2"; }},
      {"certificate_id", [](DeletionCertificate& c) { c.certificate_id[0] = 'e'; }},
      {"subject", [](DeletionCertificate& c) { c.subject[63] = 'e'; }},
      {"directive_id", [](DeletionCertificate& c) { c.directive_id = "dir-8"; }},
      {"scope", [](DeletionCertificate& c) { c.scope = KVEvictionScope::kWholePrefixCache; }},
      {"owners (one dropped)", [](DeletionCertificate& c) { c.owners.pop_back(); }},
      {"owners (one added)",
       [](DeletionCertificate& c) {
         c.owners.push_back(c.owners.back());
         c.owners.back().worker = "w3";
       }},
      {"owners[].worker", [](DeletionCertificate& c) { c.owners[0].worker = "w0"; }},
      {"owners[].connector",
       [](DeletionCertificate& c) { c.owners[0].connector = CertConnector::kLmcache; }},
      {"owners[].scope",
       [](DeletionCertificate& c) { c.owners[1].scope = KVEvictionScope::kExactSpan; }},
      {"owners[].degraded",
       [](DeletionCertificate& c) {
         c.owners[1].degraded = false;
         c.owners[1].degrade_reason.clear();
         c.owners[1].scope = KVEvictionScope::kExactSpan;
       }},
      {"owners[].degrade_reason",
       [](DeletionCertificate& c) { c.owners[1].degrade_reason = "other"; }},
      {"owners[].witness.kind",
       [](DeletionCertificate& c) { c.owners[0].witness.kind = WitnessKind::kAllBlocksCleared; }},
      {"owners[].witness.event_seqs (changed)",
       [](DeletionCertificate& c) { c.owners[0].witness.event_seqs[2] = 13; }},
      {"owners[].witness.event_seqs (added)",
       [](DeletionCertificate& c) { c.owners[1].witness.event_seqs.push_back(42); }},
      {"target_count", [](DeletionCertificate& c) { c.target_count = 4; }},
      {"anchor.journal_seq", [](DeletionCertificate& c) { c.anchor.journal_seq = 18; }},
      {"anchor.prev_hash", [](DeletionCertificate& c) { c.anchor.prev_hash[0] = 'c'; }},
      {"anchor.hash", [](DeletionCertificate& c) { c.anchor.hash[0] = 'c'; }},
      {"issued_at_ms", [](DeletionCertificate& c) { c.issued_at_ms += 1; }},
      {"issuer.key_id", [](DeletionCertificate& c) { c.issuer.key_id[0] = 'f'; }},
      {"issuer (both swapped to another trusted key)",
       [this](DeletionCertificate& c) {
         c.issuer = CertIssuer{other_key_->key_id(), other_key_->public_key_hex()};
       }},
      {"signature",
       [](DeletionCertificate& c) { c.signature[5] = c.signature[5] == '0' ? '1' : '0'; }},
  };
  ASSERT_TRUE(VerifyCertificate(genuine, both).ok());
  for (const auto& [name, edit] : edits) {
    DeletionCertificate tampered = genuine;
    edit(tampered);
    ASSERT_NE(tampered, genuine) << name;
    EXPECT_FALSE(VerifyCertificate(tampered, both).ok()) << name;
    EXPECT_EQ(SignatureCheck(tampered, both).code(), StatusCode::kPermissionDenied)
        << name << ": " << SignatureCheck(tampered, both).ToString();
    // And the same through the document: encode, parse, verify.
    Result<std::string> document = EncodeCertificateJson(tampered);
    ASSERT_TRUE(document.ok()) << name;
    Result<DeletionCertificate> parsed = ParseCertificateJson(*document);
    EXPECT_TRUE(!parsed.ok() || !VerifyCertificate(*parsed, both).ok()) << name;
  }
}

// Walks the document and edits every value in it: each scalar changed, each
// key removed, each array element removed. Every edit is refused, by the
// parser or by VerifyCertificate.
TEST_F(CertificateTest, EditingAnyValueOfTheDocumentIsRefused) {
  Result<std::string> document = EncodeCertificateJson(Mint(Input()));
  ASSERT_TRUE(document.ok());
  const Json original = Json::parse(*document);
  const Json flat = original.flatten();  // "/owners/0/witness/event_seqs/1" -> 11, ...

  const auto refused = [&](const Json& edited) {
    Result<DeletionCertificate> parsed = ParseCertificateJson(edited.dump());
    return !parsed.ok() || !VerifyCertificate(*parsed, trusted_).ok();
  };
  size_t edits = 0;
  for (auto it = flat.begin(); it != flat.end(); ++it) {
    const Json::json_pointer pointer(it.key());
    Json edited = original;
    Json& value = edited[pointer];
    if (value.is_string()) {
      std::string text = value.get<std::string>();
      if (text.empty()) {
        text = "x";
      } else {
        char& last = text.back();
        last = last == '0' ? '1' : last == 'a' ? 'b' : last == 'b' ? 'c' : '0';
      }
      value = text;
    } else if (value.is_boolean()) {
      value = !value.get<bool>();
    } else if (value.is_number_unsigned()) {
      value = value.get<uint64_t>() + 1;
    } else {
      ADD_FAILURE() << "unexpected leaf " << it.key();
    }
    EXPECT_TRUE(refused(edited)) << "changed " << it.key();
    ++edits;

    // Remove the leaf, and each enclosing value up to the root's member.
    for (Json::json_pointer at = pointer; !at.empty(); at = at.parent_pointer()) {
      Json removed = original;
      Json& parent = removed[at.parent_pointer()];
      if (parent.is_array()) {
        parent.erase(std::stoul(at.back()));
      } else {
        parent.erase(at.back());
      }
      EXPECT_TRUE(refused(removed)) << "removed " << at.to_string();
      ++edits;
    }
  }
  EXPECT_GT(edits, 60u);

  // An extra field anywhere is refused too.
  for (const char* where : {"", "/anchor", "/issuer", "/owners/0", "/owners/1/witness"}) {
    Json added = original;
    added[Json::json_pointer(where)]["extra"] = 1;
    EXPECT_TRUE(refused(added)) << "added at " << where;
  }
}

TEST_F(CertificateTest, UntrustedIssuerFails) {
  const DeletionCertificate certificate = Mint(Input());
  const std::vector<std::string> none;
  Status status = VerifyCertificate(certificate, none);
  EXPECT_EQ(status.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(status.message().find("$.issuer.public_key"), std::string::npos) << status.message();
  const std::vector<std::string> other = {other_key_->public_key_hex()};
  EXPECT_EQ(VerifyCertificate(certificate, other).code(), StatusCode::kPermissionDenied);
  // Only the issuer check fails: the certificate is genuine, just not from
  // a key this verifier trusts.
  for (const CertificateCheck& check : CheckCertificate(certificate, other)) {
    EXPECT_EQ(check.status.ok(), check.name != "issuer") << check.name;
  }
  // Trusted keys compare as hex, in either case.
  std::string upper = key_->public_key_hex();
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::vector<std::string> upper_trusted = {other_key_->public_key_hex(), upper};
  EXPECT_TRUE(VerifyCertificate(certificate, upper_trusted).ok());

  // A forger who re-signs with their own key passes every check but trust.
  CertificateInput input = Input();
  Result<DeletionCertificate> forged = MintCertificate(input, *other_key_);
  ASSERT_TRUE(forged.ok());
  EXPECT_TRUE(VerifyCertificate(*forged, other).ok());
  EXPECT_EQ(VerifyCertificate(*forged, trusted_).code(), StatusCode::kPermissionDenied);
}

TEST_F(CertificateTest, MintRefusesZeroTargetsAndMalformedInput) {
  struct Case {
    std::string name;
    std::function<void(CertificateInput&)> edit;
    std::string error;  // the message's prefix
  };
  const std::vector<Case> cases = {
      {"zero targets", [](CertificateInput& in) { in.target_count = 0; },
       "$.target_count: 0: a deletion of zero targets is never certified"},
      {"target_count over 2^53-1",
       [](CertificateInput& in) { in.target_count = kMaxCertificateInteger + 1; },
       "$.target_count: integer 9007199254740992 is over 2^53-1"},
      {"empty subject", [](CertificateInput& in) { in.subject.clear(); }, "$.subject: want 64"},
      {"uppercase subject", [](CertificateInput& in) { in.subject[0] = 'A'; },
       "$.subject: want 64 lowercase hex digits, got 64 characters that are not all"},
      {"empty directive", [](CertificateInput& in) { in.directive_id.clear(); },
       "$.directive_id: empty"},
      {"no owners", [](CertificateInput& in) { in.owners.clear(); }, "$.owners: empty"},
      {"empty worker", [](CertificateInput& in) { in.owners[1].worker.clear(); },
       "$.owners[1].worker: empty"},
      {"degraded without reason", [](CertificateInput& in) { in.owners[0].degrade_reason.clear(); },
       "$.owners[0].degraded: true without a degrade_reason"},
      {"reason without degraded", [](CertificateInput& in) { in.owners[1].degrade_reason = "x"; },
       "$.owners[1].degraded: false but degrade_reason is set"},
      {"other scope, not degraded",
       [](CertificateInput& in) { in.owners[1].scope = KVEvictionScope::kWholePrefixCache; },
       "$.owners[1].scope: 'whole_prefix_cache' differs from the directive's 'exact_span'"},
      {"no witness events", [](CertificateInput& in) { in.owners[1].witness.event_seqs.clear(); },
       "$.owners[1].witness.event_seqs: empty"},
      {"event seq over 2^53-1",
       [](CertificateInput& in) {
         in.owners[1].witness.event_seqs[2] = kMaxCertificateInteger + 1;
       },
       "$.owners[1].witness.event_seqs[2]: integer 9007199254740992 is over 2^53-1"},
      {"anchor seq 0", [](CertificateInput& in) { in.anchor.journal_seq = 0; },
       "$.anchor.journal_seq: 0"},
      {"anchor seq over 2^53-1",
       [](CertificateInput& in) { in.anchor.journal_seq = uint64_t{1} << 60; },
       "$.anchor.journal_seq: integer"},
      {"short anchor hash", [](CertificateInput& in) { in.anchor.hash = "abc"; },
       "$.anchor.hash: want 64 lowercase hex digits, got 3 characters"},
      {"bad prev_hash", [](CertificateInput& in) { in.anchor.prev_hash[3] = 'g'; },
       "$.anchor.prev_hash: want 64"},
      {"negative time", [](CertificateInput& in) { in.issued_at_ms = -1; },
       "$.issued_at_ms: -1 is outside [0, 2^53-1]"},
      {"repeated owner",
       [](CertificateInput& in) {
         in.owners[0] = in.owners[1];
         in.owners[0].witness.event_seqs = {99};
       },
       "$.owners: worker 'w1' with connector 'vllm' appears twice"},
      {"invalid UTF-8", [](CertificateInput& in) { in.directive_id = "d\xc0\x80"; },
       "$.directive_id: invalid UTF-8 at byte 1"},
  };
  for (const Case& c : cases) {
    CertificateInput input = Input();
    c.edit(input);
    Result<DeletionCertificate> minted = MintCertificate(input, *key_);
    ASSERT_FALSE(minted.ok()) << c.name;
    EXPECT_EQ(minted.status().code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_EQ(minted.status().message().rfind(c.error, 0), 0u)
        << c.name << ": " << minted.status().message();
  }
  // Same owner name through two connectors is two owners, not a repeat.
  CertificateInput two_connectors = Input();
  two_connectors.owners[0].worker = "w1";
  EXPECT_TRUE(MintCertificate(two_connectors, *key_).ok());
}

TEST_F(CertificateTest, ParseErrorsNameThePath) {
  Result<std::string> document = EncodeCertificateJson(Mint(Input()));
  ASSERT_TRUE(document.ok());
  const Json original = Json::parse(*document);
  struct Case {
    std::string name;
    std::function<void(Json&)> edit;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"unknown top-level field", [](Json& j) { j["tiemstamp"] = 1; },
       "$.tiemstamp: unknown field"},
      {"unknown nested field", [](Json& j) { j["owners"][1]["witness"]["kinds"] = "x"; },
       "$.owners[1].witness.kinds: unknown field"},
      {"missing field", [](Json& j) { j["anchor"].erase("hash"); },
       "$.anchor.hash: missing required field"},
      {"u64 over 2^53-1",
       [](Json& j) { j["owners"][0]["witness"]["event_seqs"][1] = uint64_t{1} << 53; },
       "$.owners[0].witness.event_seqs[1]: want an integer in [0, 2^53-1], got 9007199254740992"},
      {"u64 max", [](Json& j) { j["target_count"] = ~uint64_t{0}; },
       "$.target_count: want an integer in [0, 2^53-1], got 18446744073709551615"},
      {"negative", [](Json& j) { j["issued_at_ms"] = -5; },
       "$.issued_at_ms: want an integer in [0, 2^53-1], got -5"},
      {"float", [](Json& j) { j["anchor"]["journal_seq"] = 17.0; },
       "$.anchor.journal_seq: want an integer in [0, 2^53-1], got 17.0"},
      {"string for integer", [](Json& j) { j["target_count"] = "3"; },
       "$.target_count: want an integer, got string"},
      {"string for bool", [](Json& j) { j["owners"][0]["degraded"] = "false"; },
       "$.owners[0].degraded: want true or false, got string"},
      {"object for array", [](Json& j) { j["owners"] = Json::object(); },
       "$.owners: want an array, got object"},
      {"array for object", [](Json& j) { j["issuer"] = Json::array(); },
       "$.issuer: want an object, got array"},
      {"null", [](Json& j) { j["subject"] = nullptr; }, "$.subject: want a string, got null"},
      {"misspelt connector", [](Json& j) { j["owners"][0]["connector"] = "VLLM"; },
       "$.owners[0].connector: unknown certificate connector 'VLLM'"},
      {"unknown scope", [](Json& j) { j["scope"] = "everything"; },
       "$.scope: unknown kv eviction scope 'everything'"},
      {"unknown witness kind", [](Json& j) { j["owners"][1]["witness"]["kind"] = "evicted"; },
       "$.owners[1].witness.kind: unknown witness kind 'evicted'"},
      {"other schema", [](Json& j) { j["schema"] = "fak.deletioncert/v1"; },
       "$.schema: unknown schema; want \"kvgov.deletioncert/v1\""},
      {"not an object", [](Json& j) { j = Json::array({1}); }, "$: want an object, got array"},
  };
  for (const Case& c : cases) {
    Json edited = original;
    c.edit(edited);
    Result<DeletionCertificate> parsed = ParseCertificateJson(edited.dump());
    ASSERT_FALSE(parsed.ok()) << c.name;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_EQ(parsed.status().message().rfind(c.error, 0), 0u)
        << c.name << ": " << parsed.status().message();
  }

  // Text-level problems.
  std::string duplicate = *document;
  duplicate.insert(1, "\"target_count\":3,");
  Result<DeletionCertificate> dup = ParseCertificateJson(duplicate);
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().message(), "$.target_count: duplicate key");

  EXPECT_EQ(ParseCertificateJson(*document + "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCertificateJson(document->substr(0, 100)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCertificateJson(*document, document->size() - 1).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_TRUE(ParseCertificateJson(*document, document->size()).ok());
}

TEST_F(CertificateTest, VerifyReportsMalformedFieldsByPath) {
  DeletionCertificate certificate = Mint(Input());
  std::swap(certificate.owners[0], certificate.owners[1]);
  Status status = VerifyCertificate(certificate, trusted_);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message().rfind("$.owners[1]: not after the previous owner", 0), 0u)
      << status.message();

  certificate = Mint(Input());
  certificate.owners[0].witness.event_seqs = {10, 12, 11};
  status = VerifyCertificate(certificate, trusted_);
  EXPECT_EQ(status.message().rfind("$.owners[0].witness.event_seqs[2]: not above", 0), 0u)
      << status.message();

  certificate = Mint(Input());
  certificate.target_count = 0;
  EXPECT_EQ(VerifyCertificate(certificate, trusted_).message().rfind("$.target_count: 0", 0), 0u);

  certificate = Mint(Input());
  certificate.signature = "00";
  EXPECT_EQ(VerifyCertificate(certificate, trusted_).message().rfind("$.signature: want 128", 0),
            0u);
}

TEST_F(CertificateTest, VerifyAnchorComparesTheJournalRow) {
  const DeletionCertificate certificate = Mint(Input());
  const std::string a = Repeat("a", 64);
  const std::string b = Repeat("b", 64);
  EXPECT_TRUE(VerifyAnchor(certificate, 17, a, b).ok());

  Status seq = VerifyAnchor(certificate, 18, a, b);
  EXPECT_EQ(seq.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(seq.message().rfind("$.anchor.journal_seq:", 0), 0u) << seq.message();
  Status prev = VerifyAnchor(certificate, 17, b, b);
  EXPECT_EQ(prev.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(prev.message().rfind("$.anchor.prev_hash:", 0), 0u) << prev.message();
  Status hash = VerifyAnchor(certificate, 17, a, a);
  EXPECT_EQ(hash.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(hash.message().rfind("$.anchor.hash:", 0), 0u) << hash.message();

  // With the row's subject: it must name the certificate's directive.
  EXPECT_TRUE(VerifyAnchor(certificate, 17, a, b, "dir-7").ok());
  Status subject = VerifyAnchor(certificate, 17, a, b, "dir-8\n");
  EXPECT_EQ(subject.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(subject.message(),
            "$.directive_id: journal row 17 is about 'dir-8?', not this directive");
}

// ---------------------------------------------------------------------------
// Tenant revocations.

// docs/formats/certificate.md section 7's second vector: a revocation of a
// tenant none of whose old blocks was still resident, so no owner and no
// target.
CertificateInput RevocationInput() {
  CertificateInput input;
  input.subject = Repeat("fedcba9876543210", 4);
  input.directive_id = "dir-9";
  input.scope = KVEvictionScope::kExactSpan;
  input.target_count = 0;
  input.anchor = JournalAnchor{23, Repeat("c", 64), Repeat("d", 64)};
  input.issued_at_ms = 1700000000250;
  input.revocation = CertRevocation{"acme", "", 1700000000000, 1700000000000};
  return input;
}

// Computed independently of kvgov, as the first vector: python3's json and
// hashlib for the id, `openssl pkeyutl -sign -rawin` for the signature.
constexpr char kGoldenRevocationSigned[] =
    R"({"anchor":{"hash":"dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd",)"
    R"("journal_seq":23,)"
    R"("prev_hash":"cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"},)"
    R"("certificate_id":"a4f2084a2dd0d3143af9e60b4a5cf2db0bb72de30112f36b35d0816f4b2361c7",)"
    R"("directive_id":"dir-9","issued_at_ms":1700000000250,)"
    R"("issuer":{"key_id":"21fe31dfa154a261",)"
    R"("public_key":"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"},)"
    R"("owners":[],)"
    R"("revocation":{"model":"","removed_by_ms":1700000000000,"tenant":"acme",)"
    R"("unreachable_since_ms":1700000000000},)"
    R"("schema":"kvgov.deletioncert/v1","scope":"exact_span",)"
    R"("subject":"fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",)"
    R"("target_count":0})";
constexpr char kGoldenRevocationId[] =
    "a4f2084a2dd0d3143af9e60b4a5cf2db0bb72de30112f36b35d0816f4b2361c7";
constexpr char kGoldenRevocationSignature[] =
    "26f95d1b75eceaf2fcb63301b5b803a0cd60f8b3b4259e66ea8a8a7f4503cf94"
    "e9d70979d990752068053670f6a9c4b4cef66415d03e5ce2ad2a98b9ae680c04";

TEST_F(CertificateTest, GoldenRevocationBytesIdAndSignature) {
  const DeletionCertificate certificate = Mint(RevocationInput());
  EXPECT_EQ(certificate.certificate_id, kGoldenRevocationId);
  EXPECT_EQ(certificate.signature, kGoldenRevocationSignature);
  Result<std::string> signed_bytes = CanonicalCertificateBytes(certificate);
  ASSERT_TRUE(signed_bytes.ok());
  EXPECT_EQ(*signed_bytes, kGoldenRevocationSigned);
  EXPECT_EQ(std::string_view(kGoldenRevocationSigned).size(), 706u);  // as certificate.md says
}

// No owner and no target: allowed with a revocation, and the certificate
// mints, encodes, parses back equal and verifies.
TEST_F(CertificateTest, ARevocationWithZeroOwnersMintsAndVerifies) {
  const DeletionCertificate certificate = Mint(RevocationInput());
  EXPECT_TRUE(certificate.owners.empty());
  EXPECT_EQ(certificate.target_count, 0u);
  ASSERT_TRUE(certificate.revocation.has_value());
  EXPECT_EQ(*certificate.revocation, (CertRevocation{"acme", "", 1700000000000, 1700000000000}));

  Result<std::string> document = EncodeCertificateJson(certificate);
  ASSERT_TRUE(document.ok());
  Result<DeletionCertificate> parsed = ParseCertificateJson(*document);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, certificate);
  for (const CertificateCheck& check : CheckCertificate(*parsed, trusted_)) {
    EXPECT_TRUE(check.status.ok()) << check.name << ": " << check.status.ToString();
  }
  EXPECT_TRUE(VerifyAnchor(*parsed, 23, Repeat("c", 64), Repeat("d", 64), "dir-9").ok());

  // With owners and targets, a model and two distinct moments, too.
  CertificateInput with_owners = Input();
  with_owners.revocation = CertRevocation{"acme", "llama", 1700000000000, 1700000000400};
  const DeletionCertificate held = Mint(with_owners);
  EXPECT_TRUE(VerifyCertificate(held, trusted_).ok())
      << VerifyCertificate(held, trusted_).ToString();
  Result<std::string> held_document = EncodeCertificateJson(held);
  ASSERT_TRUE(held_document.ok());
  Result<DeletionCertificate> held_parsed = ParseCertificateJson(*held_document);
  ASSERT_TRUE(held_parsed.ok()) << held_parsed.status().ToString();
  EXPECT_EQ(*held_parsed, held);
}

// The relaxed rules are the revocation's only: the same certificate without
// its revocation is refused for its zero owners and targets.
TEST_F(CertificateTest, ZeroOwnersAndTargetsNeedARevocation) {
  CertificateInput input = RevocationInput();
  input.revocation.reset();
  Result<DeletionCertificate> minted = MintCertificate(input, *key_);
  ASSERT_FALSE(minted.ok());
  EXPECT_EQ(minted.status().message().rfind("$.target_count: 0", 0), 0u)
      << minted.status().message();
  input.target_count = 1;
  minted = MintCertificate(input, *key_);
  ASSERT_FALSE(minted.ok());
  EXPECT_EQ(minted.status().message().rfind("$.owners: empty", 0), 0u) << minted.status().message();
}

// Each revocation field, edited to another well-formed value, and the
// block removed or added, breaks the id and the signature.
TEST_F(CertificateTest, TamperingWithTheRevocationFailsVerification) {
  CertificateInput with_owners = Input();
  with_owners.revocation = CertRevocation{"acme", "llama", 1700000000000, 1700000000400};
  for (const DeletionCertificate& genuine : {Mint(RevocationInput()), Mint(with_owners)}) {
    ASSERT_TRUE(VerifyCertificate(genuine, trusted_).ok());
    const std::vector<std::pair<std::string, std::function<void(DeletionCertificate&)>>> edits = {
        {"revocation.tenant", [](DeletionCertificate& c) { c.revocation->tenant = "acmf"; }},
        {"revocation.model (changed)", [](DeletionCertificate& c) { c.revocation->model += "x"; }},
        {"revocation.model (to every model)",
         [](DeletionCertificate& c) {
           c.revocation->model = c.revocation->model.empty() ? "m" : "";
         }},
        {"revocation.unreachable_since_ms",
         [](DeletionCertificate& c) { c.revocation->unreachable_since_ms -= 1; }},
        {"revocation.removed_by_ms",
         [](DeletionCertificate& c) { c.revocation->removed_by_ms += 1; }},
    };
    for (const auto& [name, edit] : edits) {
      DeletionCertificate tampered = genuine;
      edit(tampered);
      ASSERT_NE(tampered, genuine) << name;
      const std::vector<CertificateCheck> checks = CheckCertificate(tampered, trusted_);
      EXPECT_TRUE(checks[1].status.ok()) << name << ": " << checks[1].status.ToString();
      EXPECT_EQ(checks[2].status.code(), StatusCode::kPermissionDenied) << name;
      EXPECT_EQ(checks[3].status.code(), StatusCode::kPermissionDenied) << name;
      EXPECT_FALSE(VerifyCertificate(tampered, trusted_).ok()) << name;
    }

    // The block removed: without owners the fields check refuses it; with
    // them, the id and the signature do.
    DeletionCertificate removed = genuine;
    removed.revocation.reset();
    EXPECT_FALSE(VerifyCertificate(removed, trusted_).ok());
    if (!genuine.owners.empty()) {
      EXPECT_EQ(SignatureCheck(removed, trusted_).code(), StatusCode::kPermissionDenied);
    }
    // The same through the document.
    Result<std::string> document = EncodeCertificateJson(genuine);
    ASSERT_TRUE(document.ok());
    Json edited = Json::parse(*document);
    ASSERT_TRUE(edited.contains("revocation"));
    edited.erase("revocation");
    Result<DeletionCertificate> parsed = ParseCertificateJson(edited.dump());
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_FALSE(VerifyCertificate(*parsed, trusted_).ok());
  }

  // And a revocation added to a certificate that had none.
  DeletionCertificate added = Mint(Input());
  added.revocation = CertRevocation{"acme", "", 1, 2};
  EXPECT_EQ(SignatureCheck(added, trusted_).code(), StatusCode::kPermissionDenied);
  EXPECT_FALSE(VerifyCertificate(added, trusted_).ok());
}

// The generic walk of EditingAnyValueOfTheDocumentIsRefused, over a
// revocation's document: every value changed or removed is refused.
TEST_F(CertificateTest, EditingAnyValueOfARevocationDocumentIsRefused) {
  CertificateInput with_owners = Input();
  with_owners.revocation = CertRevocation{"acme", "", 1700000000000, 1700000000400};
  Result<std::string> document = EncodeCertificateJson(Mint(with_owners));
  ASSERT_TRUE(document.ok());
  const Json original = Json::parse(*document);
  const auto refused = [&](const Json& edited) {
    Result<DeletionCertificate> parsed = ParseCertificateJson(edited.dump());
    return !parsed.ok() || !VerifyCertificate(*parsed, trusted_).ok();
  };
  ASSERT_FALSE(refused(original));
  for (const char* field : {"tenant", "model", "unreachable_since_ms", "removed_by_ms"}) {
    const Json::json_pointer pointer(std::string("/revocation/") + field);
    Json changed = original;
    Json& value = changed[pointer];
    value =
        value.is_string() ? Json(value.get<std::string>() + "x") : Json(value.get<uint64_t>() - 1);
    EXPECT_TRUE(refused(changed)) << "changed " << field;
    Json removed = original;
    removed["revocation"].erase(field);
    EXPECT_TRUE(refused(removed)) << "removed " << field;
  }
  Json added = original;
  added["revocation"]["extra"] = 1;
  EXPECT_TRUE(refused(added));
  Json removed = original;
  removed.erase("revocation");
  EXPECT_TRUE(refused(removed));
}

TEST_F(CertificateTest, MintRefusesAMalformedRevocation) {
  struct Case {
    std::string name;
    std::function<void(CertRevocation&)> edit;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"empty tenant", [](CertRevocation& r) { r.tenant.clear(); }, "$.revocation.tenant: empty"},
      {"negative unreachable_since_ms", [](CertRevocation& r) { r.unreachable_since_ms = -1; },
       "$.revocation.unreachable_since_ms: -1 is outside [0, 2^53-1]"},
      {"removed_by_ms over 2^53-1", [](CertRevocation& r) { r.removed_by_ms = int64_t{1} << 53; },
       "$.revocation.removed_by_ms: 9007199254740992 is outside [0, 2^53-1]"},
      {"removed before unreachable", [](CertRevocation& r) { r.removed_by_ms = 1699999999999; },
       "$.revocation.removed_by_ms: 1699999999999 is before unreachable_since_ms 1700000000000"},
      {"invalid UTF-8 tenant", [](CertRevocation& r) { r.tenant = "a\xff"; },
       "$.revocation.tenant: invalid UTF-8"},
  };
  for (const Case& c : cases) {
    CertificateInput input = RevocationInput();
    c.edit(*input.revocation);
    Result<DeletionCertificate> minted = MintCertificate(input, *key_);
    ASSERT_FALSE(minted.ok()) << c.name;
    EXPECT_EQ(minted.status().code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_EQ(minted.status().message().rfind(c.error, 0), 0u)
        << c.name << ": " << minted.status().message();
  }
  // The same rules hold at verification, whoever signed.
  DeletionCertificate certificate = Mint(RevocationInput());
  certificate.revocation->removed_by_ms = 0;
  Status status = VerifyCertificate(certificate, trusted_);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message().rfind("$.revocation.removed_by_ms: 0 is before", 0), 0u)
      << status.message();
}

TEST_F(CertificateTest, RevocationParseErrorsNameThePath) {
  Result<std::string> document = EncodeCertificateJson(Mint(RevocationInput()));
  ASSERT_TRUE(document.ok());
  const Json original = Json::parse(*document);
  const std::vector<std::pair<std::function<void(Json&)>, std::string>> cases = {
      {[](Json& j) { j["revocation"] = nullptr; }, "$.revocation: want an object, got null"},
      {[](Json& j) { j["revocation"] = Json::object(); },
       "$.revocation.tenant: missing required field"},
      {[](Json& j) { j["revocation"].erase("model"); },
       "$.revocation.model: missing required field"},
      {[](Json& j) { j["revocation"]["tenants"] = "acme"; }, "$.revocation.tenants: unknown field"},
      {[](Json& j) { j["revocation"]["tenant"] = 7; },
       "$.revocation.tenant: want a string, got number"},
      {[](Json& j) { j["revocation"]["model"] = nullptr; },
       "$.revocation.model: want a string, got null"},
      {[](Json& j) { j["revocation"]["unreachable_since_ms"] = -1; },
       "$.revocation.unreachable_since_ms: want an integer in [0, 2^53-1], got -1"},
      {[](Json& j) { j["revocation"]["removed_by_ms"] = 1.5; },
       "$.revocation.removed_by_ms: want an integer in [0, 2^53-1], got 1.5"},
      {[](Json& j) { j["revocation"]["removed_by_ms"] = "1700000000000"; },
       "$.revocation.removed_by_ms: want an integer, got string"},
      {[](Json& j) { j["revocations"] = j["revocation"]; }, "$.revocations: unknown field"},
  };
  for (const auto& [edit, error] : cases) {
    Json edited = original;
    edit(edited);
    Result<DeletionCertificate> parsed = ParseCertificateJson(edited.dump());
    ASSERT_FALSE(parsed.ok()) << error;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << error;
    EXPECT_EQ(parsed.status().message().rfind(error, 0), 0u)
        << error << " <- " << parsed.status().message();
  }
  std::string duplicate = *document;
  duplicate.insert(duplicate.find("\"revocation\":{") + 14, "\"tenant\":\"x\",");
  EXPECT_EQ(ParseCertificateJson(duplicate).status().message(),
            "$.revocation.tenant: duplicate key");
}

// docs/formats/certificate.md section 6, run for real: extract the signed
// bytes with python3's standard library, build the PEM from the raw public
// key, and let OpenSSL alone check the Ed25519 signature.
TEST_F(CertificateTest, OpenSslVerifiesTheDocumentedProcedure) {
  if (::access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "/usr/bin/openssl is missing";
  CertificateInput input = Input();
  // Strings that stress the escaping rules, so the extracted bytes are only
  // right if the extraction is JCS for them too.
  input.directive_id = "dir/\xc3\xa9\xe2\x82\xac\t\"q\"\\\x01\x7f\xe2\x80\xa8";
  const DeletionCertificate certificate = Mint(input);
  Result<std::string> document = EncodeCertificateJson(certificate);
  Result<std::string> signed_bytes = CanonicalCertificateBytes(certificate);
  ASSERT_TRUE(document.ok() && signed_bytes.ok());
  const std::string d = dir_.string();
  WriteFile(d + "/cert.json", *document);

  const bool have_python = ::access("/usr/bin/python3", X_OK) == 0;
  if (have_python) {
    // The one-liner of the documentation, verbatim.
    const std::string extract =
        "cd " + d +
        " && python3 -c 'import json,sys; c=json.load(open(sys.argv[1],encoding=\"utf-8\")); "
        "s=c.pop(\"signature\"); "
        "open(\"canon.bin\",\"wb\").write(json.dumps(c,sort_keys=True,separators=(\",\",\":\"),"
        "ensure_ascii=False).encode()); "
        "open(\"sig.bin\",\"wb\").write(bytes.fromhex(s)); "
        "open(\"pub.der\",\"wb\").write(bytes.fromhex(\"302a300506032b6570032100\"+c[\"issuer\"]"
        "[\"public_key\"]))' cert.json";
    auto [code, output] = RunShell(extract);
    ASSERT_EQ(code, 0) << output;
    EXPECT_EQ(ReadFile(d + "/canon.bin"), *signed_bytes)
        << "python3's extraction differs from the canonical bytes";
  } else {
    WriteFile(d + "/canon.bin", *signed_bytes);
    WriteFile(d + "/sig.bin", HexToBytes(certificate.signature));
    WriteFile(d + "/pub.der",
              HexToBytes("302a300506032b6570032100" + certificate.issuer.public_key));
  }
  {
    auto [code, output] = RunShell("/usr/bin/openssl pkey -pubin -inform DER -in " + d +
                                   "/pub.der -out " + d + "/pub.pem");
    ASSERT_EQ(code, 0) << output;
  }
  const std::string verify = "/usr/bin/openssl pkeyutl -verify -pubin -inkey " + d +
                             "/pub.pem -rawin -in " + d + "/canon.bin -sigfile " + d + "/sig.bin";
  {
    auto [code, output] = RunShell(verify);
    EXPECT_EQ(code, 0) << output;
    EXPECT_NE(output.find("Signature Verified Successfully"), std::string::npos) << output;
  }

  // One byte changed in the canonical bytes: OpenSSL refuses.
  std::string tampered = *signed_bytes;
  const size_t at = tampered.find("\"target_count\":3");
  ASSERT_NE(at, std::string::npos);
  tampered[at + 15] = '4';
  WriteFile(d + "/canon.bin", tampered);
  {
    auto [code, output] = RunShell(verify);
    EXPECT_NE(code, 0) << output;
    EXPECT_EQ(output.find("Signature Verified Successfully"), std::string::npos) << output;
    EXPECT_NE(output.find("Signature Verification Failure"), std::string::npos) << output;
  }
}

}  // namespace
}  // namespace kvgov::cert
