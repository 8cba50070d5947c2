#include "kvgov/core/kv_prefix.h"

#include <gtest/gtest.h>

#include "kvgov/core/digest.h"

namespace kvgov {
namespace {

KVPrefix Prefix() {
  KVPrefix prefix;
  prefix.token_ids = {101, 102, 103, 104};
  prefix.model_id = "llama";
  prefix.owner = "worker-1";
  prefix.reused_tokens = 4;
  return prefix;
}

TEST(KVPrefixTest, LowersOntoTheNativePlane) {
  Result<Entry> entry = FromKVPrefix(Prefix());
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  EXPECT_EQ(entry->plane, Plane::kKVPrefix);
  EXPECT_EQ(entry->source, Source::kNative);
  EXPECT_EQ(entry->id.digest, DigestTokenIds(Prefix().token_ids));
  EXPECT_EQ(entry->id.length, 4);
  EXPECT_EQ(entry->id.unit, LengthUnit::kPositions);
  EXPECT_EQ(entry->derivation.position_mode, PositionMode::kPrefixAligned);
  EXPECT_EQ(entry->residency.tier, ResidencyTier::kHBM);
  EXPECT_EQ(entry->residency.owner, "worker-1");
  EXPECT_EQ(entry->coherence.invalidation_mode, InvalidationMode::kPolicy);
  EXPECT_EQ(entry->metrics.prefill_tokens_saved, 4);
  EXPECT_TRUE(KVPrefixVerdict(*entry).CanServe());
}

TEST(KVPrefixTest, IsUntrustedByDefault) {
  Entry entry = *FromKVPrefix(Prefix());
  EXPECT_EQ(entry.security.taint, Taint::kTainted);
  EXPECT_EQ(entry.security.scope, Scope::kAgent);
  EXPECT_EQ(entry.security.admission_verdict, AdmissionVerdict::kUnknown);
}

TEST(KVPrefixTest, DefaultOwnerAndValidation) {
  KVPrefix prefix = Prefix();
  prefix.owner.clear();
  EXPECT_EQ(FromKVPrefix(prefix)->residency.owner, "kvgov");
  prefix.model_id.clear();
  EXPECT_EQ(FromKVPrefix(prefix).status().message(), "model_id: required, got empty");
}

TEST(KVPrefixTest, VerdictMissesForForeignOrHandlelessEntries) {
  Entry entry = *FromKVPrefix(Prefix());
  entry.plane = Plane::kKVTransfer;
  EXPECT_EQ(KVPrefixVerdict(entry).reason, LookupReason::kAbsent);
  entry = *FromKVPrefix(Prefix());
  entry.id.digest.clear();
  EXPECT_FALSE(KVPrefixVerdict(entry).CanServe());
}

}  // namespace
}  // namespace kvgov
