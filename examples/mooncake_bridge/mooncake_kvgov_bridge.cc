#include "mooncake_kvgov_bridge.h"

#include <utility>

#include "kvgov/core/transport_ops.h"

namespace bridge {

using kvgov::KVTransferOutcome;
using kvgov::MooncakeOperation;
using kvgov::ResidencyTier;

MooncakeKvgovBridge::MooncakeKvgovBridge(kvgov::client::Sink& sink, MooncakeBridgeConfig config)
    : sink_(sink), config_(std::move(config)) {}

void MooncakeKvgovBridge::Report(MooncakeOperation operation, const MooncakeObject& object,
                                 ResidencyTier from_tier, ResidencyTier to_tier,
                                 const std::string& worker, const std::string& from_worker,
                                 KVTransferOutcome outcome, std::string_view fault_reason) {
  kvgov::KVTransfer transfer;
  // kvgov's own table (kvgov/core/transport_ops.h): put -> store, remove ->
  // evict, transfer -> migrate, materialize -> restore, lookup -> route.
  transfer.direction = kvgov::DirectionFor(operation);
  kvgov::KVSpanReport& span = transfer.span;
  span.span_digest = object.key;
  span.tokens = static_cast<int64_t>(object.token_ids.size());
  span.model_id = config_.model_id;
  span.tokenizer_id = config_.tokenizer_id;
  span.from_tier = from_tier;
  span.to_tier = to_tier;
  span.owner = config_.owner;
  span.outcome = outcome;
  span.fault_reason = std::string(fault_reason);
  span.bytes_moved = outcome == KVTransferOutcome::kOk && operation != MooncakeOperation::kRemove
                         ? object.bytes
                         : 0;

  kvgov::client::SpanLocation where;
  where.worker = worker;
  where.from_worker = from_worker;
  where.token_ids = object.token_ids;
  where.cache_salt = object.cache_salt;
  // Dropped or refused reports are counted in the sink's stats: Mooncake's
  // data path never waits on kvgov.
  (void)sink_.Emit(kvgov::client::TransferEvent(std::move(transfer), std::move(where)));
}

void MooncakeKvgovBridge::OnPut(const MooncakeObject& object, const std::string& worker, bool ok) {
  Report(MooncakeOperation::kPut, object, ResidencyTier::kHBM, ResidencyTier::kDRAM, worker, "",
         ok ? KVTransferOutcome::kOk : KVTransferOutcome::kFault, ok ? "" : "mooncake: put failed");
}

void MooncakeKvgovBridge::OnGet(const MooncakeObject& object, const std::string& worker,
                                bool found) {
  // An absent key is a miss (seed §1.2: the span was not in the tier), which
  // kvgov folds to miss/restore_miss, not to a fault.
  Report(MooncakeOperation::kMaterialize, object, ResidencyTier::kDRAM, ResidencyTier::kHBM, worker,
         "", found ? KVTransferOutcome::kOk : KVTransferOutcome::kMissed, "");
}

void MooncakeKvgovBridge::OnRemove(const MooncakeObject& object, const std::string& worker) {
  Report(MooncakeOperation::kRemove, object, ResidencyTier::kDRAM, ResidencyTier::kUnknown, worker,
         "", KVTransferOutcome::kOk, "");
}

void MooncakeKvgovBridge::OnTransfer(const MooncakeObject& object, const std::string& from,
                                     const std::string& to, bool ok, std::string_view error) {
  Report(MooncakeOperation::kTransfer, object, ResidencyTier::kHBM, ResidencyTier::kHBM, to, from,
         ok ? KVTransferOutcome::kOk : KVTransferOutcome::kFault, error);
}

}  // namespace bridge
