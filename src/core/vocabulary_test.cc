#include "kvgov/core/vocabulary.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kvgov/core/envelope.h"

namespace kvgov {
namespace {

// Every table: each enumerator has one distinct spelling, and each spelling
// parses back to its enumerator.
template <typename E>
void ExpectTableRoundTrips() {
  std::set<std::string_view> seen;
  for (const auto& [value, spelling] : EnumSpelling<E>::kValues) {
    EXPECT_TRUE(seen.insert(spelling).second) << "duplicate spelling '" << spelling << "'";
    EXPECT_EQ(ToString(value), spelling);
    Result<E> parsed = ParseEnum<E>(spelling);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, value);
  }
}

TEST(VocabularyTest, EveryTableRoundTrips) {
  ExpectTableRoundTrips<MediaType>();
  ExpectTableRoundTrips<LengthUnit>();
  ExpectTableRoundTrips<Plane>();
  ExpectTableRoundTrips<Source>();
  ExpectTableRoundTrips<PositionMode>();
  ExpectTableRoundTrips<Taint>();
  ExpectTableRoundTrips<Scope>();
  ExpectTableRoundTrips<AdmissionVerdict>();
  ExpectTableRoundTrips<ResidencyTier>();
  ExpectTableRoundTrips<InvalidationMode>();
  ExpectTableRoundTrips<LookupKind>();
  ExpectTableRoundTrips<LookupReason>();
  ExpectTableRoundTrips<KVTransferDirection>();
  ExpectTableRoundTrips<KVTransferOutcome>();
  ExpectTableRoundTrips<NIXLTransferRole>();
  ExpectTableRoundTrips<NIXLLeaseWitness>();
  ExpectTableRoundTrips<NIXLLeaseEvent>();
  ExpectTableRoundTrips<NIXLLeaseState>();
  ExpectTableRoundTrips<NIXLClearKind>();
  ExpectTableRoundTrips<KVEvictionScope>();
  ExpectTableRoundTrips<WitnessKind>();
  ExpectTableRoundTrips<MooncakeOperation>();
  ExpectTableRoundTrips<LMCacheOperation>();
  ExpectTableRoundTrips<Provider>();
  ExpectTableRoundTrips<BreakpointMode>();
  ExpectTableRoundTrips<ToolResultEvent>();
}

TEST(VocabularyTest, TablesCoverTheSpecVocabulary) {
  EXPECT_EQ(EnumSpelling<MediaType>::kValues.size(), 9u);
  EXPECT_EQ(EnumSpelling<Plane>::kValues.size(), 13u);
  EXPECT_EQ(EnumSpelling<ResidencyTier>::kValues.size(), 9u);
  EXPECT_EQ(EnumSpelling<AdmissionVerdict>::kValues.size(), 7u);
  EXPECT_EQ(EnumSpelling<InvalidationMode>::kValues.size(), 6u);
  EXPECT_EQ(EnumSpelling<LookupKind>::kValues.size(), 6u);
  // 24 reasons of the spec, lease_released from the NIXL lease, evicted and
  // diverted (a request kept from a quarantined span, ADR 0028).
  EXPECT_EQ(EnumSpelling<LookupReason>::kValues.size(), 27u);
  EXPECT_EQ(ToString(Plane::kPromptPrefix), "prompt_prefix");
  EXPECT_EQ(ToString(ResidencyTier::kNumaFar), "numa_far");
  EXPECT_EQ(ToString(AdmissionVerdict::kRequireWitness), "require_witness");
  EXPECT_EQ(ToString(InvalidationMode::kExternalRefutation), "external_refutation");
  EXPECT_EQ(ToString(LookupReason::kAccessControlRequired), "access_control_required");
  EXPECT_EQ(ToString(PositionMode::kRecomputeRequired), "recompute_required");
  EXPECT_EQ(ToString(Source::kRideEngine), "ride_engine");
}

TEST(VocabularyTest, UnknownSpellingIsRejectedWithTheChoices) {
  Result<Taint> taint = ParseEnum<Taint>("trustd");
  ASSERT_FALSE(taint.ok());
  EXPECT_EQ(taint.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(taint.status().message(),
            "unknown taint 'trustd' (want one of: tainted, trusted, quarantined)");
}

TEST(VocabularyTest, CaseAndWhitespaceAreNotForgiven) {
  EXPECT_FALSE(ParseEnum<Plane>("KV_TRANSFER").ok());
  EXPECT_FALSE(ParseEnum<Plane>(" kv_transfer").ok());
  EXPECT_FALSE(ParseEnum<Taint>("").ok());  // taint has no unknown value
}

TEST(VocabularyTest, EmptySpellingIsTheExplicitUnknown) {
  EXPECT_EQ(*ParseEnum<ResidencyTier>(""), ResidencyTier::kUnknown);
  EXPECT_EQ(*ParseEnum<AdmissionVerdict>(""), AdmissionVerdict::kUnknown);
}

TEST(VocabularyTest, EveryPlaneHasASource) {
  EXPECT_EQ(SourceForPlane(Plane::kProvider), Source::kProvider);
  EXPECT_EQ(SourceForPlane(Plane::kKVTransfer), Source::kRideEngine);
  EXPECT_EQ(SourceForPlane(Plane::kKVPrefix), Source::kNative);
  EXPECT_EQ(SourceForPlane(Plane::kToolResult), Source::kToolResult);
  std::set<Source> reached;
  for (const auto& [plane, spelling] : EnumSpelling<Plane>::kValues) {
    reached.insert(SourceForPlane(plane));
  }
  EXPECT_EQ(reached.size(), 4u);
}

TEST(VocabularyTest, ValidateEntryRejectsSourceThatContradictsPlane) {
  Entry entry;
  entry.plane = Plane::kKVTransfer;
  entry.source = Source::kProvider;
  Status status = ValidateEntry(entry);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            "source: 'provider' does not match plane 'kv_transfer' (want 'ride_engine')");
  entry.source = Source::kRideEngine;
  EXPECT_TRUE(ValidateEntry(entry).ok());
  entry.id.length = -1;
  EXPECT_EQ(ValidateEntry(entry).message(), "id.length: must be >= 0, got -1");
}

}  // namespace
}  // namespace kvgov

namespace kvgov {
namespace {

TEST(VocabularyTest, ErrorEchoIsBoundedAndPrintable) {
  std::string hostile = "x\ny" + std::string(200, 'z');
  std::string message = ParseEnum<Taint>(hostile).status().message();
  EXPECT_EQ(message.find('\n'), std::string::npos);
  EXPECT_NE(message.find("'x?yzz"), std::string::npos);
  EXPECT_LT(message.size(), 160u);
}

}  // namespace
}  // namespace kvgov
