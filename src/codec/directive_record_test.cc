#include "kvgov/codec/directive_record.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvgov {
namespace {

governance::Directive Sample() {
  governance::Directive d;
  d.id = "0123456789abcdef0123456789abcdef";
  d.state = governance::DirectiveState::kAcknowledged;
  d.reason = "poisoned_kv";
  d.model = "llama";
  d.tenant = "acme";
  d.subject = std::string(64, 'a');
  d.scope = KVEvictionScope::kExactSpan;
  d.target_count = 2;
  d.created_ms = 1764576000000;
  d.deadline_ms = 1764576030000;
  governance::OwnerProgress owner;
  owner.worker = "w1";
  owner.connector = "vllm";
  owner.scope = KVEvictionScope::kWholePrefixCache;
  owner.degraded = true;
  owner.degrade_reason = "exact_span_unsupported_whole_prefix_flush";
  owner.attempts = 1;
  owner.last_status = 200;
  owner.state = governance::OwnerState::kAcknowledged;
  owner.pending = {7, 0xfffffffffffffff0ULL};
  owner.target_count = 2;
  owner.dispatch_seq = 41;
  d.owners.push_back(owner);
  return d;
}

// What the store and the replicated log keep reads back to the same record.
TEST(DirectiveRecordTest, TheRecordRoundTripsWithPendingKeysAndDispatchSeqs) {
  const std::string record = EncodeDirectiveRecord(Sample());
  Result<governance::Directive> decoded = DecodeDirectiveRecord(record);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, Sample());
  EXPECT_EQ(EncodeDirectiveRecord(*decoded), record);
  ASSERT_EQ(decoded->owners.size(), 1u);
  EXPECT_EQ(decoded->owners[0].pending, (std::set<index::BlockKey>{7, 0xfffffffffffffff0ULL}));
  EXPECT_EQ(decoded->owners[0].dispatch_seq, 41);
  EXPECT_EQ(decoded->deadline_ms, 1764576030000);
}

// The API's view leaves out what only the store needs.
TEST(DirectiveRecordTest, TheApiViewHasNoPendingKeysDispatchSeqsOrDeadline) {
  const nlohmann::json json = nlohmann::json::parse(EncodeDirectiveJson(Sample()));
  EXPECT_EQ(json["owners"][0]["pending"], 2);
  EXPECT_FALSE(json["owners"][0].contains("pending_keys"));
  EXPECT_FALSE(json["owners"][0].contains("dispatch_seq"));
  EXPECT_FALSE(json.contains("deadline_ms"));
  EXPECT_EQ(json["state"], "acknowledged");
}

TEST(DirectiveRecordTest, ARecordOfTheWrongShapeIsRefused) {
  EXPECT_EQ(DecodeDirectiveRecord("[]").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeDirectiveRecord(R"({"state":"planned"})").status().message(),
            "directive record: not an object with an id");
  EXPECT_EQ(DecodeDirectiveRecord(R"({"id":"x","targets":"two"})").status().code(),
            StatusCode::kInvalidArgument);
  // Written before owners were kept whole: no owners, as always.
  Result<governance::Directive> old =
      DecodeDirectiveRecord(R"({"id":"x","state":"planned","scope":"exact_span",)"
                            R"("owners":[{"worker":"w1","state":"planned"}]})");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_TRUE(old->owners.empty());
}

// A tenant revocation: no model (every model), its epochs and two moments,
// and owners holding residue, some of it unattributed.
governance::Directive RevocationSample() {
  governance::Directive d;
  d.id = "fedcba9876543210fedcba9876543210";
  d.state = governance::DirectiveState::kWitnessed;
  d.reason = "offboarded";
  d.tenant = "acme";
  d.subject = std::string(64, 'b');
  d.scope = KVEvictionScope::kWholePrefixCache;
  d.target_count = 5;
  d.created_ms = 1764576000000;
  d.revocation = governance::Revocation{.all_models_epoch = 3,
                                        .model_epoch = 0,
                                        .unreachable_since_ms = 1764576000001,
                                        .flush = true,
                                        .removed_by_ms = 1764576004321};
  governance::OwnerProgress w1;
  w1.worker = "w1";
  w1.connector = "vllm";
  w1.state = governance::OwnerState::kWitnessed;
  w1.target_count = 3;
  w1.witness_kind = WitnessKind::kBlockRemoved;
  w1.witness_seqs = {8, 9};
  w1.residue = 0;
  w1.unattributed = 0;
  governance::OwnerProgress w2 = w1;
  w2.worker = "w2";
  w2.connector = "sglang";
  w2.state = governance::OwnerState::kAcknowledged;
  w2.target_count = 2;
  w2.residue = 0xfffffffffffffff0ULL;  // the whole uint64 range survives
  w2.unattributed = 7;
  d.owners = {w1, w2};
  return d;
}

TEST(DirectiveRecordTest, ARevocationRoundTripsExactly) {
  const std::string record = EncodeDirectiveRecord(RevocationSample());
  Result<governance::Directive> decoded = DecodeDirectiveRecord(record);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, RevocationSample());
  EXPECT_EQ(EncodeDirectiveRecord(*decoded), record);

  // Both forms carry the revocation; the owners' counts are always there.
  for (const std::string& text : {record, EncodeDirectiveJson(RevocationSample())}) {
    const nlohmann::json json = nlohmann::json::parse(text);
    EXPECT_EQ(json["revocation"],
              nlohmann::json::parse(R"({"all_models_epoch":3,"model_epoch":0,)"
                                    R"("unreachable_since_ms":1764576000001,"flush":true,)"
                                    R"("removed_by_ms":1764576004321})"));
    EXPECT_EQ(json["model"], "");
    EXPECT_EQ(json["owners"][0]["residue"], 0);
    EXPECT_EQ(json["owners"][0]["unattributed"], 0);
    EXPECT_EQ(json["owners"][1]["residue"], 0xfffffffffffffff0ULL);
    EXPECT_EQ(json["owners"][1]["unattributed"], 7);
  }

  // A revocation not yet removed (removed_by_ms 0) and without a flush.
  governance::Directive pending = RevocationSample();
  pending.revocation->removed_by_ms = 0;
  pending.revocation->flush = false;
  pending.model = "llama";
  pending.revocation->model_epoch = 2;
  Result<governance::Directive> again = DecodeDirectiveRecord(EncodeDirectiveRecord(pending));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, pending);
}

TEST(DirectiveRecordTest, ADirectiveWithoutARevocationWritesNone) {
  const nlohmann::json json = nlohmann::json::parse(EncodeDirectiveRecord(Sample()));
  EXPECT_FALSE(json.contains("revocation"));
  EXPECT_EQ(json["owners"][0]["residue"], 0);
  EXPECT_EQ(json["owners"][0]["unattributed"], 0);
}

// Written before revocations: no "revocation", no owner counts. It reads
// back as it always did, with none and zeros.
TEST(DirectiveRecordTest, ARecordWithoutTheRevocationFieldsStillDecodes) {
  nlohmann::json json = nlohmann::json::parse(EncodeDirectiveRecord(Sample()));
  json["owners"][0].erase("residue");
  json["owners"][0].erase("unattributed");
  Result<governance::Directive> old = DecodeDirectiveRecord(json.dump());
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(*old, Sample());
  EXPECT_FALSE(old->revocation.has_value());
  ASSERT_EQ(old->owners.size(), 1u);
  EXPECT_EQ(old->owners[0].residue, 0u);
  EXPECT_EQ(old->owners[0].unattributed, 0u);
}

// The new fields are read strictly: a wrong type, a negative count or time,
// a missing member of the revocation is refused, naming the field.
TEST(DirectiveRecordTest, MalformedRevocationFieldsAreNamed) {
  const nlohmann::json good = nlohmann::json::parse(EncodeDirectiveRecord(RevocationSample()));
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& j) { j["revocation"] = nullptr; },
       "directive record: revocation: want an object, got null"},
      {[](nlohmann::json& j) { j["revocation"] = nlohmann::json::array(); },
       "directive record: revocation: want an object, got array"},
      {[](nlohmann::json& j) { j["revocation"].erase("model_epoch"); },
       "directive record: revocation.model_epoch: missing"},
      {[](nlohmann::json& j) { j["revocation"]["all_models_epoch"] = -1; },
       "directive record: revocation.all_models_epoch: want an integer in [0, 2^64-1], got -1"},
      {[](nlohmann::json& j) { j["revocation"]["all_models_epoch"] = "3"; },
       "directive record: revocation.all_models_epoch: want an integer in [0, 2^64-1], got "
       "string"},
      {[](nlohmann::json& j) { j["revocation"]["unreachable_since_ms"] = 1.5; },
       "directive record: revocation.unreachable_since_ms: want milliseconds in [0, 2^63-1], got "
       "1.5"},
      {[](nlohmann::json& j) { j["revocation"]["removed_by_ms"] = ~uint64_t{0}; },
       "directive record: revocation.removed_by_ms: want milliseconds in [0, 2^63-1], got "
       "18446744073709551615"},
      {[](nlohmann::json& j) { j["revocation"]["flush"] = 1; },
       "directive record: revocation.flush: want true or false, got 1"},
      {[](nlohmann::json& j) { j["owners"][1]["residue"] = -2; },
       "directive record: owners[1].residue: want an integer in [0, 2^64-1], got -2"},
      {[](nlohmann::json& j) { j["owners"][0]["unattributed"] = false; },
       "directive record: owners[0].unattributed: want an integer in [0, 2^64-1], got boolean"},
  };
  for (const auto& [edit, error] : cases) {
    nlohmann::json edited = good;
    edit(edited);
    Result<governance::Directive> decoded = DecodeDirectiveRecord(edited.dump());
    ASSERT_FALSE(decoded.ok()) << error;
    EXPECT_EQ(decoded.status().code(), StatusCode::kInvalidArgument) << error;
    EXPECT_EQ(decoded.status().message(), error);
  }
}

// A state outside the lifecycle's vocabulary is named, field path and all.
TEST(DirectiveRecordTest, AStateOutsideTheVocabularyIsNamed) {
  std::string record = EncodeDirectiveRecord(Sample());
  record.replace(record.find(R"("state":"acknowledged","targets")"), 22, R"("state":"deleted")");
  Result<governance::Directive> decoded = DecodeDirectiveRecord(record);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("owners[0].state: unknown directive owner state "
                                            "'deleted'"),
            std::string::npos)
      << decoded.status().ToString();
}

}  // namespace
}  // namespace kvgov
