#include "kvgov/core/lookup_verdict.h"

#include <gtest/gtest.h>

namespace kvgov {
namespace {

Entry ValidEntry() {
  Entry entry;
  entry.id = EntryId{"d1", MediaType::kKVSpan, 16, LengthUnit::kPositions};
  return entry;
}

TEST(LookupVerdictTest, KeepsMissReasonsTyped) {
  for (LookupReason reason : {LookupReason::kAbsent, LookupReason::kExpiredTTL,
                              LookupReason::kRestoreMiss, LookupReason::kLeaseReleased}) {
    LookupVerdict verdict = LookupVerdict::Miss(reason);
    EXPECT_EQ(verdict.kind, LookupKind::kMiss);
    EXPECT_EQ(verdict.reason, reason);
    EXPECT_FALSE(verdict.entry.has_value());
    EXPECT_FALSE(verdict.handle.Valid());
    EXPECT_FALSE(verdict.CanServe());
  }
}

TEST(LookupVerdictTest, OnlyAHitWithAValidHandleServes) {
  EXPECT_TRUE(LookupVerdict::Hit(ValidEntry()).CanServe());
  EXPECT_EQ(LookupVerdict::Hit(ValidEntry()).handle, ValidEntry().id);

  Entry no_digest = ValidEntry();
  no_digest.id.digest.clear();
  EXPECT_FALSE(LookupVerdict::Hit(no_digest).CanServe());

  for (LookupVerdict verdict :
       {LookupVerdict::Revalidate(ValidEntry(), LookupReason::kStale),
        LookupVerdict::Transform(ValidEntry(), LookupReason::kPolicyMismatch),
        LookupVerdict::Quarantine(ValidEntry(), LookupReason::kTaintDenied),
        LookupVerdict::Fault(ValidEntry(), LookupReason::kResidencyFault)}) {
    EXPECT_FALSE(verdict.CanServe()) << ToString(verdict.kind);
    EXPECT_TRUE(verdict.entry.has_value());
  }
}

TEST(LookupVerdictTest, DefaultVerdictFailsClosed) {
  LookupVerdict verdict;
  EXPECT_EQ(verdict.kind, LookupKind::kMiss);
  EXPECT_EQ(verdict.reason, LookupReason::kAbsent);
  EXPECT_FALSE(verdict.CanServe());
}

}  // namespace
}  // namespace kvgov
