#include "kvgov/services/report_intake.h"

#include <variant>
#include <vector>

#include "kvgov/core/kv_transfer.h"
#include "kvgov/core/nixl_lease.h"
#include "kvgov/core/provider_cache.h"
#include "kvgov/core/tool_result.h"
#include "kvgov/index/block_key.h"

namespace kvgov::services {
namespace {

// The kvgov keys of the span a transport names, on the worker that holds it.
Result<std::vector<index::BlockKey>> SpanKeys(const index::ResidencyIndex& index,
                                              const SpanResidency& residency) {
  if (!residency.token_ids.empty()) {
    std::optional<index::WorkerResidency> worker = index.Worker(residency.worker);
    if (!worker) return Status::NotFound("worker: '" + residency.worker + "' is not registered");
    return index::RequestChain(index.hasher(),
                               {worker->model, residency.lora_name, residency.group_idx},
                               residency.cache_salt, residency.token_ids, worker->block_size);
  }
  const std::string& holder =
      residency.from_worker.empty() ? residency.worker : residency.from_worker;
  return index.KeysForEngineHashes(holder, residency.block_hashes, residency.group_idx);
}

// Moves residency as a transport reported it: a completed store, offload,
// restore or migrate places the span in to_tier on the worker; an eviction
// takes it out of from_tier (or to_tier). Routes and failed transfers move
// nothing.
}  // namespace

Status ReportIntake::ApplyTransferResidency(const KVTransfer& transfer,
                                            const SpanResidency& residency) {
  if (transfer.span.outcome != KVTransferOutcome::kOk ||
      transfer.direction == KVTransferDirection::kRoute || residency.worker.empty()) {
    return Status::Ok();
  }
  KVGOV_ASSIGN_OR_RETURN(std::vector<index::BlockKey> keys, SpanKeys(*index_, residency));
  if (transfer.direction == KVTransferDirection::kEvict) {
    ResidencyTier tier = transfer.span.from_tier != ResidencyTier::kUnknown
                             ? transfer.span.from_tier
                             : transfer.span.to_tier;
    if (tier == ResidencyTier::kUnknown) {
      return Status::InvalidArgument("from_tier: required to evict a span from a worker");
    }
    return index_->RemoveBlocks(residency.worker, keys, tier);
  }
  if (transfer.span.to_tier == ResidencyTier::kUnknown) {
    return Status::InvalidArgument("to_tier: required to place a span on a worker");
  }
  return index_->AddBlocks(residency.worker, keys, transfer.span.to_tier);
}

Status ReportIntake::Apply(const IngestEvent& event, std::string_view actor, int64_t now_ms) {
  Result<Entry> entry = std::visit(
      [&](const auto& record) -> Result<Entry> {
        using R = std::decay_t<decltype(record)>;
        if constexpr (std::is_same_v<R, KVTransfer>) {
          return FromKVTransfer(record);
        } else if constexpr (std::is_same_v<R, NIXLLease>) {
          // Checked for every event, not only at the grant: a later
          // report is lowered and counted too.
          KVGOV_RETURN_IF_ERROR(CheckNIXLLeaseReport(record));
          return FromNIXLLease(record, now_ms);
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
  // Untrusted until the operator's admission policy says otherwise: an
  // unadmitted reporter is counted but moves no residency, so it can never
  // make the router credit blocks.
  Entry admitted = admission_.Admit(std::move(entry).value());
  if (const auto* lease = std::get_if<NIXLLease>(&event.record)) {
    // The gateway's own leases are witnessed from the handoff, not told:
    // a reporter may neither claim that witness nor move such a lease.
    if (lease->witness != NIXLLeaseWitness::kReported) {
      return Status::InvalidArgument(
          "witness: a report's lease is 'reported'; 'handoff' leases are kvgov's gateway's own");
    }
    if (std::optional<NIXLLease> known = leases_->Get(lease->lease_id);
        known && known->witness != NIXLLeaseWitness::kReported) {
      return Status::PermissionDenied("lease_id: '" + lease->lease_id +
                                      "' is a handoff kvgov's gateway witnesses; it takes no "
                                      "reports");
    }
    KVGOV_RETURN_IF_ERROR(leases_->ApplyReport(*lease, event.residency, actor, now_ms));
  } else if (event.residency.has_value()) {
    if (admitted.security.taint != Taint::kTrusted) {
      accounting_->Record(admitted);
      return Status::PermissionDenied(
          "owner: '" + admitted.residency.owner +
          "' is not admitted (serve --admit OWNER), so its report moves no residency");
    }
    KVGOV_RETURN_IF_ERROR(
        ApplyTransferResidency(std::get<KVTransfer>(event.record), *event.residency));
  }
  accounting_->Record(admitted);
  return Status::Ok();
}

}  // namespace kvgov::services
