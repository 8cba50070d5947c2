#include "kvgov/codec/workers_api.h"

#include <nlohmann/json.hpp>

#include "codec/json_fields.h"
#include "codec/router_json.h"

namespace kvgov {
namespace {

using Json = nlohmann::json;

Json StreamJson(const WorkerStreamView& stream, Json row) {
  row["kind"] = stream.kind;
  row["role"] = stream.role;
  row["events_endpoint"] = stream.events_endpoint;
  if (!stream.replay_endpoint.empty()) row["replay_endpoint"] = stream.replay_endpoint;
  if (!stream.control_url.empty()) row["control_url"] = stream.control_url;
  row["last_seq"] = stream.last_seq;
  row["seq_gaps"] = stream.seq_gaps;
  row["replays"] = stream.replays;
  row["replays_failed"] = stream.replays_failed;
  row["restarts"] = stream.restarts;
  row["duplicates"] = stream.duplicates;
  row["decode_errors"] = stream.decode_errors;
  row["catch_ups"] = stream.catch_ups;
  row["catch_ups_failed"] = stream.catch_ups_failed;
  row["last_batch_ms"] = stream.last_batch_ms;
  const ingest::EngineDiagnostics& diagnosis = stream.diagnostics;
  Json diagnostics = {{"silent_for_ms", diagnosis.silent_for_ms},
                      {"silent_while_busy", diagnosis.silent_while_busy},
                      {"orphan_blocks", diagnosis.orphan_blocks},
                      {"hash_drift_blocks", diagnosis.hash_drift_blocks},
                      {"salt_blind_blocks", diagnosis.salt_blind_blocks}};
  if (diagnosis.stale_reason != ingest::StaleReason::kNone) {
    diagnostics["stale"] = {{"reason", ToString(diagnosis.stale_reason)},
                            {"detail", diagnosis.stale_detail},
                            {"for_ms", diagnosis.stale_for_ms}};
  }
  row["diagnostics"] = std::move(diagnostics);
  return row;
}

std::string_view StateName(const WorkerView& view) {
  switch (view.no_events_yet) {
    case NoEventsYet::kNotApplicable:
      return index::ToString(view.residency.state);
    case NoEventsYet::kIdle:
      return "idle";
    case NoEventsYet::kSilent:
      return "silent";
    case NoEventsYet::kStreamFailed:
      return "stream_failed";
  }
  return "unknown";
}

Json WorkerJson(const WorkerView& view) {
  const index::WorkerResidency& worker = view.residency;
  Json row = {{"id", worker.id},
              {"model", worker.model},
              {"block_size", worker.block_size},
              {"state", StateName(view)}};
  if (view.no_events_yet != NoEventsYet::kNotApplicable) {
    row["waiting_for_events_ms"] = view.waiting_for_events_ms;
    if (view.fleet_view && !view.stream_error.empty()) row["stream_error"] = view.stream_error;
  }
  row["salts"] = index::ToString(worker.salts);
  if (view.fleet_view) row["blocks"] = codec_internal::TierJson(worker.blocks);
  if (view.health) {
    const router::WorkerStatus& status = *view.health;
    row["health"] = {{"probed", status.probed},
                     {"healthy", status.healthy},
                     {"draining", status.draining},
                     {"consecutive_failures", status.consecutive_failures},
                     {"last_probe_ms", status.last_probe_ms},
                     {"last_probe_error", status.last_probe_error}};
  }
  if (!view.fleet_view) return row;
  row["load"] = codec_internal::LoadJson(view.load);
  if (view.predictions) {
    const router::PredictionScore& score = *view.predictions;
    Json& predictions = row["predictions"] = {{"scored", score.scored()},
                                              {"exact", score.exact},
                                              {"over", score.over},
                                              {"under", score.under},
                                              {"predicted_tokens", score.predicted_tokens},
                                              {"engine_cached_tokens", score.engine_cached_tokens}};
    if (std::optional<double> accuracy = score.accuracy()) predictions["accuracy"] = *accuracy;
  }
  return view.stream ? StreamJson(*view.stream, std::move(row)) : row;
}

}  // namespace

std::string EncodeWorkersJson(std::span<const WorkerView> workers) {
  Json rows = Json::array();
  for (const WorkerView& view : workers) rows.push_back(WorkerJson(view));
  return codec_internal::Dump({{"workers", std::move(rows)}});
}

}  // namespace kvgov
