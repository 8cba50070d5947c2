#include "kvgov/codec/workers_api.h"

#include <utility>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kvgov/codec/config_api.h"

namespace kvgov {
namespace {

WorkerView StaleWorker(bool fleet_view) {
  WorkerView view;
  view.residency = {"w1", "llama", 16, index::WorkerState::kStale, {}};
  view.residency.blocks[0] = 9;
  view.health = router::WorkerStatus{"w1", true, false, 3, 100, "connection refused", false, {}};
  view.fleet_view = fleet_view;
  view.load.in_flight_requests = 2;
  WorkerStreamView& stream = view.stream.emplace();
  stream.kind = "vllm";
  stream.events_endpoint = "tcp://10.0.0.7:5557";
  stream.replay_endpoint = "tcp://10.0.0.7:5558";
  stream.control_url = "http://10.0.0.7:8000";
  stream.last_seq = 41;
  stream.diagnostics.stale_reason = ingest::StaleReason::kGapLost;
  stream.diagnostics.stale_detail = "batch 7 never arrived";
  stream.diagnostics.stale_for_ms = 500;
  return view;
}

TEST(WorkersApiTest, TheFleetViewShowsBlocksLoadStreamAndWhyItIsStale) {
  const WorkerView view = StaleWorker(true);
  const nlohmann::json json = nlohmann::json::parse(EncodeWorkersJson(std::span(&view, 1)));
  const nlohmann::json& row = json["workers"][0];
  EXPECT_EQ(row["state"], "stale");
  EXPECT_EQ(row["blocks"]["hbm"], 9);
  EXPECT_EQ(row["health"]["healthy"], false);
  EXPECT_EQ(row["health"]["last_probe_error"], "connection refused");
  EXPECT_EQ(row["load"]["in_flight_requests"], 2);
  EXPECT_EQ(row["kind"], "vllm");
  EXPECT_EQ(row["last_seq"], 41);
  // Where the engine is, so an operator can reach it.
  EXPECT_EQ(row["events_endpoint"], "tcp://10.0.0.7:5557");
  EXPECT_EQ(row["replay_endpoint"], "tcp://10.0.0.7:5558");
  EXPECT_EQ(row["control_url"], "http://10.0.0.7:8000");
  EXPECT_EQ(row["diagnostics"]["stale"]["reason"], "gap_lost");
  EXPECT_EQ(row["diagnostics"]["stale"]["for_ms"], 500);
}

// Block counts, load and stream statistics are aggregates over every
// tenant: a tenant-bound caller sees none of them.
TEST(WorkersApiTest, ATenantsViewHasIdsModelsStateAndHealthOnly) {
  const WorkerView view = StaleWorker(false);
  const nlohmann::json row =
      nlohmann::json::parse(EncodeWorkersJson(std::span(&view, 1)))["workers"][0];
  for (const char* hidden : {"blocks", "load", "kind", "last_seq", "diagnostics", "events_endpoint",
                             "replay_endpoint", "control_url"}) {
    EXPECT_FALSE(row.contains(hidden)) << hidden;
  }
  EXPECT_EQ(row["model"], "llama");
  EXPECT_TRUE(row.contains("health"));
}

// An engine kvgov follows that has published nothing yet is not "live",
// and its state says why: idle, silent though it served requests, or a
// stream kvgov could not subscribe to.
TEST(WorkersApiTest, AWorkerWithoutEventsYetSaysWhy) {
  const std::pair<NoEventsYet, const char*> cases[] = {
      {NoEventsYet::kIdle, "idle"},
      {NoEventsYet::kSilent, "silent"},
      {NoEventsYet::kStreamFailed, "stream_failed"}};
  for (bool fleet_view : {true, false}) {
    for (const auto& [reason, state] : cases) {
      WorkerView view = StaleWorker(fleet_view);
      view.residency.state = index::WorkerState::kLive;
      view.no_events_yet = reason;
      view.waiting_for_events_ms = 1200;
      if (reason == NoEventsYet::kStreamFailed) view.stream_error = "cannot subscribe to tcp://x:1";
      const nlohmann::json row =
          nlohmann::json::parse(EncodeWorkersJson(std::span(&view, 1)))["workers"][0];
      EXPECT_EQ(row["state"], state);
      EXPECT_EQ(row["waiting_for_events_ms"], 1200);
      // Why the stream failed names an endpoint: the fleet view's only.
      EXPECT_EQ(row.contains("stream_error"), fleet_view && reason == NoEventsYet::kStreamFailed)
          << row.dump();
    }
  }
  WorkerView published = StaleWorker(true);
  published.residency.state = index::WorkerState::kLive;
  const nlohmann::json row =
      nlohmann::json::parse(EncodeWorkersJson(std::span(&published, 1)))["workers"][0];
  EXPECT_EQ(row["state"], "live");
  EXPECT_FALSE(row.contains("waiting_for_events_ms"));
}

TEST(WorkersApiTest, ALiveStreamHasNoStaleObject) {
  WorkerView view = StaleWorker(true);
  view.stream->diagnostics.stale_reason = ingest::StaleReason::kNone;
  const nlohmann::json row =
      nlohmann::json::parse(EncodeWorkersJson(std::span(&view, 1)))["workers"][0];
  EXPECT_FALSE(row["diagnostics"].contains("stale"));
}

TEST(ConfigApiTest, ASingleNodeHasANullReplicaAndEveryTiersCredit) {
  ConfigView config;
  const nlohmann::json json = nlohmann::json::parse(EncodeConfigJson(config));
  EXPECT_TRUE(json["replica"].is_null());
  EXPECT_EQ(json["route"]["tier_credit"]["remote"], 0.25);
  EXPECT_EQ(json["route"]["tier_credit"]["unknown"], 0.0);
  EXPECT_TRUE(json["engines"].empty());
  config.replica = ReplicaConfigView{
      "r1", "redis://127.0.0.1:6379/0", "kvgov", 3000, 600000, 30000, true, false, "0-1"};
  const nlohmann::json replica = nlohmann::json::parse(EncodeConfigJson(config))["replica"];
  EXPECT_EQ(replica["claim_ttl_ms"], 3000);
  EXPECT_EQ(replica["log_retain_ms"], 600000);
  EXPECT_EQ(replica["snapshot_interval_ms"], 30000);
}

}  // namespace
}  // namespace kvgov
