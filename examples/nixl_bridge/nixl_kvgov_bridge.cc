#include "nixl_kvgov_bridge.h"

#include <utility>

#include "kvgov/core/digest.h"

namespace bridge {
namespace {

using kvgov::KVTransfer;
using kvgov::NIXLLease;
using kvgov::client::Event;
using kvgov::client::SpanLocation;

// The span's stable identity (seed §4.1): a digest of its tokens, the same
// for every worker and every transport that moves it.
std::string SpanDigest(const NixlSpan& span) { return kvgov::DigestTokenIds(span.token_ids); }

SpanLocation Where(const std::string& worker, const NixlSpan& span) {
  SpanLocation where;
  where.worker = worker;
  where.token_ids = span.token_ids;
  where.cache_salt = span.cache_salt;
  where.lora_name = span.lora_name;
  return where;
}

}  // namespace

NixlKvgovBridge::NixlKvgovBridge(kvgov::client::Sink& sink, NixlBridgeConfig config)
    : sink_(sink), config_(std::move(config)) {}

void NixlKvgovBridge::Emit(const Event& event) {
  // Counted in the sink's stats when refused or dropped; a bridge on the
  // transfer path must not wait or fail because kvgov is slow.
  (void)sink_.Emit(event);
}

void NixlKvgovBridge::OnLeaseCreated(const std::string& lease_id, const NixlSpan& span) {
  NIXLLease lease;
  lease.lease_id = lease_id;
  lease.event = kvgov::NIXLLeaseEvent::kCreate;
  lease.role = kvgov::NIXLTransferRole::kPrefillPin;
  lease.request_id = span.request_id;
  lease.remote_engine = config_.prefill_worker;
  lease.span_digest = SpanDigest(span);
  lease.tokens = static_cast<int64_t>(span.token_ids.size());
  lease.model_id = config_.model_id;
  lease.tokenizer_id = config_.tokenizer_id;
  lease.ttl_ms = config_.lease_ttl_ms;
  // Naming the span lets kvgov gate exactly the blocks the lease pins.
  Emit(kvgov::client::LeaseEvent(std::move(lease), Where(config_.prefill_worker, span)));
}

void NixlKvgovBridge::OnLeaseHeartbeat(const std::string& lease_id) {
  NIXLLease lease;
  lease.lease_id = lease_id;
  lease.event = kvgov::NIXLLeaseEvent::kHeartbeat;
  lease.role = kvgov::NIXLTransferRole::kPrefillPin;
  Emit(kvgov::client::LeaseEvent(std::move(lease)));
}

void NixlKvgovBridge::OnTransferDone(const std::string& lease_id, const NixlSpan& span,
                                     int64_t bytes_moved, bool success, std::string_view error) {
  KVTransfer transfer;
  // Seed §5: a NIXL transfer moves a span between instances (migrate).
  transfer.direction = kvgov::KVTransferDirection::kMigrate;
  kvgov::KVSpanReport& report = transfer.span;
  report.span_digest = SpanDigest(span);
  report.tokens = static_cast<int64_t>(span.token_ids.size());
  report.model_id = config_.model_id;
  report.tokenizer_id = config_.tokenizer_id;
  report.position_mode = kvgov::PositionMode::kPrefixAligned;
  // From the prefill engine's HBM to the decode engine's HBM: kvgov's
  // to_tier is where the span lives now on `worker`, which is why this is
  // hbm and not the seed sketch's "remote" (that is the view from the
  // prefill side).
  report.from_tier = kvgov::ResidencyTier::kHBM;
  report.to_tier = kvgov::ResidencyTier::kHBM;
  report.owner = config_.owner;
  report.lease = lease_id;
  report.outcome = success ? kvgov::KVTransferOutcome::kOk : kvgov::KVTransferOutcome::kFault;
  if (!success) report.fault_reason = std::string(error);
  report.bytes_moved = bytes_moved;
  SpanLocation where = Where(config_.decode_worker, span);
  where.from_worker = config_.prefill_worker;
  Emit(kvgov::client::TransferEvent(std::move(transfer), std::move(where)));
}

void NixlKvgovBridge::OnLeaseReleased(const std::string& lease_id, bool aborted) {
  NIXLLease lease;
  lease.lease_id = lease_id;
  lease.event = aborted ? kvgov::NIXLLeaseEvent::kAbort : kvgov::NIXLLeaseEvent::kTransferComplete;
  lease.role = kvgov::NIXLTransferRole::kPrefillPin;
  Emit(kvgov::client::LeaseEvent(std::move(lease)));
}

}  // namespace bridge
