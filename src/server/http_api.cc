#include "server/http_api.h"

#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "kvgov/codec/ingest_batch.h"
#include "kvgov/core/kv_transfer.h"
#include "kvgov/core/nixl_lease.h"
#include "kvgov/core/provider_cache.h"
#include "kvgov/core/tool_result.h"
#include "kvgov/index/block_key.h"
#include "server/daemon.h"

namespace kvgov::server {
namespace {

using Json = nlohmann::json;

void SendJson(httplib::Response& response, int status, const Json& body) {
  response.status = status;
  response.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace),
                       "application/json");
}

void SendError(httplib::Response& response, int status, const Status& error) {
  SendErrorJson(response, status, StatusCodeName(error.code()), error.message());
}

int64_t WallClockMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool IsJsonContentType(const httplib::Request& request) {
  const std::string type = request.get_header_value("Content-Type");
  return type.rfind("application/json", 0) == 0;
}

// The kvgov keys of the span a transport names, on the worker that holds it.
Result<std::vector<index::BlockKey>> SpanKeys(const Daemon& daemon,
                                              const SpanResidency& residency) {
  if (!residency.token_ids.empty()) {
    std::optional<index::WorkerResidency> worker = daemon.index.Worker(residency.worker);
    if (!worker) return Status::NotFound("worker: '" + residency.worker + "' is not registered");
    return index::RequestChain(daemon.index.hasher(),
                               {worker->model, residency.lora_name, residency.group_idx},
                               residency.cache_salt, residency.token_ids, worker->block_size);
  }
  const std::string& holder = residency.from_worker.empty() ? residency.worker
                                                            : residency.from_worker;
  return daemon.index.KeysForEngineHashes(holder, residency.block_hashes, residency.group_idx);
}

// Moves residency as a transport reported it: a completed store, offload,
// restore or migrate places the span in to_tier on the worker; an eviction
// takes it out of from_tier (or to_tier). Routes and failed transfers move
// nothing.
Status ApplyTransferResidency(Daemon& daemon, const KVTransfer& transfer,
                              const SpanResidency& residency) {
  if (transfer.span.outcome != KVTransferOutcome::kOk ||
      transfer.direction == KVTransferDirection::kRoute || residency.worker.empty()) {
    return Status::Ok();
  }
  KVGOV_ASSIGN_OR_RETURN(std::vector<index::BlockKey> keys, SpanKeys(daemon, residency));
  if (transfer.direction == KVTransferDirection::kEvict) {
    ResidencyTier tier = transfer.span.from_tier != ResidencyTier::kUnknown
                             ? transfer.span.from_tier
                             : transfer.span.to_tier;
    if (tier == ResidencyTier::kUnknown) {
      return Status::InvalidArgument("from_tier: required to evict a span from a worker");
    }
    return daemon.index.RemoveBlocks(residency.worker, keys, tier);
  }
  if (transfer.span.to_tier == ResidencyTier::kUnknown) {
    return Status::InvalidArgument("to_tier: required to place a span on a worker");
  }
  return daemon.index.AddBlocks(residency.worker, keys, transfer.span.to_tier);
}

// Lowers one decoded element and applies what it says. Returns the entry's
// error, if any, worded "<field>: <problem>".
Status Ingest(Daemon& daemon, const IngestEvent& event) {
  Result<Entry> entry = std::visit(
      [&](const auto& record) -> Result<Entry> {
        using R = std::decay_t<decltype(record)>;
        if constexpr (std::is_same_v<R, KVTransfer>) {
          return FromKVTransfer(record);
        } else if constexpr (std::is_same_v<R, NIXLLease>) {
          return FromNIXLLease(record, WallClockMillis());
        } else if constexpr (std::is_same_v<R, ProviderCache>) {
          return FromProviderCache(record);
        } else if constexpr (std::is_same_v<R, ToolResult>) {
          return FromToolResult(record);
        } else {
          return record;
        }
      },
      event.record);
  if (!entry.ok()) return entry.status();
  if (event.residency.has_value()) {
    KVGOV_RETURN_IF_ERROR(
        ApplyTransferResidency(daemon, std::get<KVTransfer>(event.record), *event.residency));
  }
  daemon.accounting->Record(*entry);
  return Status::Ok();
}

void HandleEvents(Daemon& daemon, const httplib::Request& request, httplib::Response& response) {
  if (!IsJsonContentType(request)) {
    SendError(response, 415,
              Status::InvalidArgument("Content-Type: want application/json, got '" +
                                      request.get_header_value("Content-Type") + "'"));
    return;
  }
  JsonLimits limits;
  limits.max_bytes = daemon.options.max_body_bytes;
  Result<IngestBatch> batch = DecodeIngestBatchJson(request.body, limits);
  if (!batch.ok()) {
    SendError(response, batch.status().code() == StatusCode::kResourceExhausted ? 413 : 400,
              batch.status());
    return;
  }
  size_t accepted = 0;
  Json rejected = Json::array();
  for (size_t i = 0; i < batch->events.size(); ++i) {
    const Result<IngestEvent>& event = batch->events[i];
    Status status = event.ok() ? Ingest(daemon, *event) : event.status();
    if (status.ok()) {
      ++accepted;
    } else {
      std::string message = status.message();
      // Decoder errors carry their absolute path; lowering errors are
      // relative to the element.
      if (message.rfind("$.", 0) != 0) message = "$.events[" + std::to_string(i) + "]." + message;
      rejected.push_back({{"index", i}, {"error", message}});
    }
  }
  SendJson(response, 200, {{"accepted", accepted}, {"rejected", std::move(rejected)}});
}

Json TierCounts(const index::WorkerResidency& worker) {
  Json blocks = Json::object();
  for (size_t i = 0; i < index::kIndexedTiers.size(); ++i) {
    const ResidencyTier tier = index::kIndexedTiers[i];
    blocks[tier == ResidencyTier::kUnknown ? "unknown" : std::string(ToString(tier))] =
        worker.blocks[i];
  }
  return blocks;
}

void HandleWorkers(const Daemon& daemon, httplib::Response& response) {
  std::map<std::string, transport::StreamView> streams;
  if (daemon.ingest) {
    for (const transport::StreamView& view : daemon.ingest->Streams()) {
      streams.emplace(view.worker, view);
    }
  }
  Json workers = Json::array();
  for (const index::WorkerResidency& worker : daemon.index.Workers()) {
    Json row = {{"id", worker.id},
                {"model", worker.model},
                {"block_size", worker.block_size},
                {"state", std::string(index::ToString(worker.state))},
                {"blocks", TierCounts(worker)}};
    if (auto it = streams.find(worker.id); it != streams.end()) {
      const ingest::StreamStats& stats = *it->second.stats;
      uint64_t decode_errors = 0;
      for (const auto& count : stats.decode_errors) decode_errors += count.load();
      row["kind"] = std::string(ToString(it->second.kind));
      row["events_endpoint"] = it->second.events;
      row["last_seq"] = stats.last_seq.load();
      row["seq_gaps"] = stats.seq_gaps.load();
      row["replays"] = stats.replays_ok.load() + stats.replays_failed.load();
      row["replays_failed"] = stats.replays_failed.load();
      row["restarts"] = stats.restarts.load();
      row["duplicates"] = stats.duplicates.load();
      row["decode_errors"] = decode_errors;
    }
    workers.push_back(std::move(row));
  }
  SendJson(response, 200, {{"workers", std::move(workers)}});
}

}  // namespace

void SendErrorJson(httplib::Response& response, int status, std::string_view code,
                   std::string_view message) {
  SendJson(response, status,
           {{"error", {{"code", std::string(code)}, {"message", std::string(message)}}}});
}

void RegisterHttpApi(httplib::Server& http, Daemon& daemon) {
  http.Get("/healthz", [](const httplib::Request&, httplib::Response& response) {
    SendJson(response, 200, {{"status", "ok"}});
  });
  http.Post("/v1/events", [&daemon](const httplib::Request& request, httplib::Response& response) {
    HandleEvents(daemon, request, response);
  });
  http.Get("/v1/workers", [&daemon](const httplib::Request&, httplib::Response& response) {
    HandleWorkers(daemon, response);
  });
  http.Get("/metrics", [&daemon](const httplib::Request&, httplib::Response& response) {
    response.set_content(daemon.metrics.Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

}  // namespace kvgov::server
