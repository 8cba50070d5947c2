#include "kvgov/core/kv_transfer.h"

#include <gtest/gtest.h>

#include "kvgov/core/admission.h"

namespace kvgov {
namespace {

KVTransfer Offload() {
  KVTransfer transfer;
  transfer.direction = KVTransferDirection::kOffload;
  transfer.span.span_digest = "span-1";
  transfer.span.tokens = 256;
  transfer.span.model_id = "llama-3-8b";
  transfer.span.from_tier = ResidencyTier::kHBM;
  transfer.span.to_tier = ResidencyTier::kDRAM;
  transfer.span.owner = "lmcache";
  transfer.span.bytes_moved = 256 * 131072;
  return transfer;
}

Entry Lower(const KVTransfer& transfer) {
  Result<Entry> entry = FromKVTransfer(transfer);
  EXPECT_TRUE(entry.ok()) << entry.status().ToString();
  return entry.ok() ? *entry : Entry{};
}

TEST(KVTransferTest, RecordsResidencyTransition) {
  Entry entry = Lower(Offload());
  EXPECT_EQ(entry.plane, Plane::kKVTransfer);
  EXPECT_EQ(entry.source, Source::kRideEngine);
  EXPECT_EQ(entry.id, (EntryId{"span-1", MediaType::kKVSpan, 256, LengthUnit::kPositions}));
  EXPECT_EQ(entry.residency.tier, ResidencyTier::kDRAM);
  EXPECT_EQ(entry.residency.owner, "lmcache");
  EXPECT_EQ(entry.derivation.position_mode, PositionMode::kPrefixAligned);
  EXPECT_EQ(entry.metrics.bytes_transferred, 256 * 131072);
  EXPECT_EQ(entry.labels.at("direction"), "offload");
  EXPECT_EQ(entry.labels.at("outcome"), "ok");
  EXPECT_EQ(entry.labels.at("from_tier"), "hbm");
  EXPECT_EQ(entry.labels.at("to_tier"), "dram");
  EXPECT_FALSE(entry.labels.contains("fault_reason"));
  EXPECT_TRUE(KVTransferVerdict(entry).CanServe());
  EXPECT_TRUE(ValidateEntry(entry).ok());
}

TEST(KVTransferTest, DefaultsOwnerAndKeepsExplicitPositionMode) {
  KVTransfer transfer = Offload();
  transfer.span.owner.clear();
  transfer.span.position_mode = PositionMode::kRelocatable;
  Entry entry = Lower(transfer);
  EXPECT_EQ(entry.residency.owner, "engine");
  EXPECT_EQ(entry.derivation.position_mode, PositionMode::kRelocatable);
}

TEST(KVTransferTest, ExternalReportIsUntrustedUntilAdmitted) {
  Entry entry = Lower(Offload());
  EXPECT_EQ(entry.security.taint, Taint::kTainted);
  EXPECT_EQ(entry.security.scope, Scope::kAgent);
  EXPECT_EQ(entry.security.admission_verdict, AdmissionVerdict::kUnknown);
  EXPECT_TRUE(entry.security.admitted_by.empty());

  AdmissionPolicy policy({{"lmcache", Scope::kTenant, "operator"}});
  Entry admitted = policy.Admit(entry);
  EXPECT_EQ(admitted.security.taint, Taint::kTrusted);
  EXPECT_EQ(admitted.security.scope, Scope::kTenant);
  EXPECT_EQ(admitted.security.admission_verdict, AdmissionVerdict::kAllow);
  EXPECT_EQ(admitted.security.admitted_by, "operator");

  AdmissionPolicy other({{"mooncake", Scope::kFleet, "operator"}});
  EXPECT_EQ(other.Admit(entry), entry);
}

TEST(KVTransferTest, QuarantinedEntryIsNeverReadmitted) {
  Entry entry = Lower(Offload());
  entry.security.taint = Taint::kQuarantined;
  AdmissionPolicy policy({{"lmcache", Scope::kFleet, "operator"}});
  EXPECT_EQ(policy.Admit(entry).security.taint, Taint::kQuarantined);
}

TEST(KVTransferTest, CarriesDeletionCertificateAndLease) {
  KVTransfer transfer = Offload();
  transfer.span.lease = "lease-9";
  transfer.span.serializer_id = "ser-1";
  transfer.span.deletion_certificate = {"kvgov.deletion.v1", "span-1", "abcd"};
  Entry entry = Lower(transfer);
  EXPECT_EQ(entry.residency.lease, "lease-9");
  EXPECT_EQ(entry.derivation.serializer_id, "ser-1");
  EXPECT_TRUE(entry.security.deletion_certificate.Valid());
  EXPECT_EQ(entry.security.deletion_certificate.subject, "span-1");
}

TEST(KVTransferTest, RestoreFaultIsTypedNotSilent) {
  KVTransfer transfer = Offload();
  transfer.direction = KVTransferDirection::kRestore;
  transfer.span.outcome = KVTransferOutcome::kFault;
  transfer.span.fault_reason = "rdma_timeout";
  Entry faulted = Lower(transfer);
  EXPECT_EQ(faulted.labels.at("fault_reason"), "rdma_timeout");
  LookupVerdict fault = KVTransferVerdict(faulted);
  EXPECT_EQ(fault.kind, LookupKind::kFault);
  EXPECT_EQ(fault.reason, LookupReason::kResidencyFault);
  EXPECT_FALSE(fault.CanServe());

  transfer.span.outcome = KVTransferOutcome::kMissed;
  LookupVerdict miss = KVTransferVerdict(Lower(transfer));
  EXPECT_EQ(miss.kind, LookupKind::kMiss);
  EXPECT_EQ(miss.reason, LookupReason::kRestoreMiss);
}

TEST(KVTransferTest, EvictionIsNeverAHit) {
  KVTransfer transfer = Offload();
  transfer.direction = KVTransferDirection::kEvict;
  LookupVerdict verdict = KVTransferVerdict(Lower(transfer));
  EXPECT_EQ(verdict.kind, LookupKind::kMiss);
  EXPECT_EQ(verdict.reason, LookupReason::kEvicted);
  EXPECT_FALSE(verdict.CanServe());
}

TEST(KVTransferTest, StoreRouteAndMigrateOkAreHits) {
  for (KVTransferDirection direction :
       {KVTransferDirection::kStore, KVTransferDirection::kRoute, KVTransferDirection::kMigrate,
        KVTransferDirection::kRestore}) {
    KVTransfer transfer = Offload();
    transfer.direction = direction;
    EXPECT_TRUE(KVTransferVerdict(Lower(transfer)).CanServe()) << ToString(direction);
  }
}

TEST(KVTransferTest, VerdictRefusesTamperedOrMissingLabels) {
  Entry entry = Lower(Offload());
  entry.labels["outcome"] = "okay";
  LookupVerdict tampered = KVTransferVerdict(entry);
  EXPECT_EQ(tampered.kind, LookupKind::kMiss);
  EXPECT_EQ(tampered.reason, LookupReason::kAbsent);

  entry = Lower(Offload());
  entry.labels.erase("direction");
  EXPECT_EQ(KVTransferVerdict(entry).reason, LookupReason::kAbsent);
}

TEST(KVTransferTest, RejectsReportsWithoutIdentityOrWithNegativeCounts) {
  KVTransfer transfer = Offload();
  transfer.span.span_digest.clear();
  EXPECT_EQ(FromKVTransfer(transfer).status().message(), "span_digest: required, got empty");

  transfer = Offload();
  transfer.span.tokens = -1;
  EXPECT_EQ(FromKVTransfer(transfer).status().message(), "tokens: must be >= 0, got -1");

  transfer = Offload();
  transfer.span.bytes_moved = -5;
  EXPECT_EQ(FromKVTransfer(transfer).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvgov
