#include "kvgov/codec/directive_record.h"

#include <gtest/gtest.h>

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
