#include "kvgov/ingest/engine_diagnostics.h"

#include <gtest/gtest.h>

namespace kvgov::ingest {
namespace {

std::optional<double> Running(double requests) { return requests; }

TEST(EngineDiagnosticsTest, SilentWhileBusyNeedsBothSilenceAndRunningRequests) {
  StreamStats stats;
  stats.started_ms = 1'000;
  // Never published: silent since kvgov began following it.
  EXPECT_EQ(DiagnoseEngine(stats, Running(3), 31'000, 30'000).silent_for_ms, 30'000);
  EXPECT_TRUE(DiagnoseEngine(stats, Running(3), 31'000, 30'000).silent_while_busy);
  EXPECT_FALSE(DiagnoseEngine(stats, Running(3), 30'999, 30'000).silent_while_busy);
  EXPECT_FALSE(DiagnoseEngine(stats, Running(0), 31'000, 30'000).silent_while_busy);
  EXPECT_FALSE(DiagnoseEngine(stats, std::nullopt, 31'000, 30'000).silent_while_busy);
  // A batch clears it; silence counts from that batch.
  stats.last_batch_ms = 30'500;
  EngineDiagnostics after = DiagnoseEngine(stats, Running(3), 31'000, 30'000);
  EXPECT_EQ(after.silent_for_ms, 500);
  EXPECT_FALSE(after.silent_while_busy);
}

TEST(EngineDiagnosticsTest, StaleCarriesItsReasonDetailAndAge) {
  StreamStats stats;
  stats.started_ms = 0;
  EngineDiagnostics live = DiagnoseEngine(stats, std::nullopt, 5'000, 30'000);
  EXPECT_EQ(live.stale_reason, StaleReason::kNone);
  EXPECT_EQ(live.stale_for_ms, 0);
  stats.stale_reason = static_cast<uint8_t>(StaleReason::kReplayRolledOver);
  stats.stale_since_ms = 2'000;
  stats.set_stale_detail("batches 3..9 are no longer in the engine's replay buffer");
  stats.orphan_blocks = 4;
  stats.hash_drift_blocks = 2;
  EngineDiagnostics stale = DiagnoseEngine(stats, std::nullopt, 5'000, 30'000);
  EXPECT_EQ(stale.stale_reason, StaleReason::kReplayRolledOver);
  EXPECT_EQ(stale.stale_for_ms, 3'000);
  EXPECT_EQ(stale.stale_detail, "batches 3..9 are no longer in the engine's replay buffer");
  EXPECT_EQ(stale.orphan_blocks, 4u);
  EXPECT_EQ(stale.hash_drift_blocks, 2u);
}

}  // namespace
}  // namespace kvgov::ingest
