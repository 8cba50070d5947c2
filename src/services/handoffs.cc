#include "kvgov/services/handoffs.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "kvgov/clock/clock.h"
#include "kvgov/core/hex.h"
#include "kvgov/core/nixl_lease.h"
#include "kvgov/index/block_key.h"
#include "kvgov/log/log.h"
#include "kvgov/services/engines.h"

namespace kvgov::services {

void HandoffLog::Add(gateway::HandoffRecord record) {
  MutexLock lock(mu_);
  records_.push_back(std::move(record));
  while (records_.size() > kKept) records_.pop_front();
}

std::vector<gateway::HandoffRecord> HandoffLog::NewestFirst(std::string_view tenant) const {
  MutexLock lock(mu_);
  std::vector<gateway::HandoffRecord> out;
  for (auto it = records_.rbegin(); it != records_.rend(); ++it) {
    if (tenant.empty() || it->tenant == tenant) out.push_back(*it);
  }
  return out;
}

namespace {

// The pin of one handoff: its lease in the lease service, and the span's
// keys on the prefill worker, which the gate is asked about.
class LeasePin final : public gateway::HandoffPin {
 public:
  LeasePin(LeaseService& leases, const governance::GovernanceGate& gate, std::string lease_id,
           std::string prefill_worker, std::vector<index::BlockKey> keys)
      : leases_(leases),
        gate_(gate),
        lease_id_(std::move(lease_id)),
        prefill_worker_(std::move(prefill_worker)),
        keys_(std::move(keys)) {}

  const std::string& lease_id() const override { return lease_id_; }

  gateway::PinView View() const override {
    const int64_t now_ms = clock::NowMillis();
    gateway::PinView pin;
    pin.lease_id = lease_id_;
    pin.span_blocks = keys_.size();
    const std::optional<NIXLLease> lease = leases_.Get(lease_id_);
    pin.lease_state = lease ? LeaseStateAt(*lease, now_ms) : NIXLLeaseState::kFailed;
    if (pin.lease_state != NIXLLeaseState::kActive) return pin;
    const router::SpanGate::Limit limit =
        gate_.Creditable(prefill_worker_, keys_, keys_.size(), now_ms);
    pin.creditable_blocks = limit.creditable;
    pin.limit = std::string(ToString(limit.kind));
    if (limit.reason != LookupReason::kNone) pin.limit += "/" + std::string(ToString(limit.reason));
    return pin;
  }

  void End(NIXLLeaseEvent event) override {
    NIXLLease report;
    report.lease_id = lease_id_;
    report.event = event;
    report.witness = NIXLLeaseWitness::kHandoff;
    // A lease the expiry timer ended first stays expired (terminal).
    if (Status ended = leases_.ApplyReport(report, std::nullopt, kDaemonActor, clock::NowMillis());
        !ended.ok() && ended.code() != StatusCode::kFailedPrecondition) {
      log::Line(log::Level::kError, "handoff.lease_not_ended")
          .Field("lease", lease_id_)
          .Field("event", ToString(event))
          .Field("error", ended.ToString());
    }
  }

 private:
  LeaseService& leases_;
  const governance::GovernanceGate& gate_;
  const std::string lease_id_;
  const std::string prefill_worker_;
  const std::vector<index::BlockKey> keys_;
};

}  // namespace

Result<std::unique_ptr<gateway::HandoffPin>> Handoffs::Pin(const gateway::HandoffRequest& request,
                                                           std::string_view request_id,
                                                           std::string_view prefill_worker,
                                                           NIXLTransferRole role) {
  const std::optional<index::WorkerResidency> worker = index_->Worker(prefill_worker);
  const int64_t block_size = worker ? std::max<int64_t>(1, worker->block_size) : 1;
  std::vector<index::BlockKey> keys = index::RequestChain(index_->hasher(), {request.model, "", 0},
                                                          request.salt, request.tokens, block_size);
  const ingest::EngineSpec* engine = engines_->Of(prefill_worker);
  NIXLLease lease;
  lease.lease_id = "handoff-" + std::string(request_id);
  lease.request_id = std::string(request_id);
  lease.remote_engine = std::string(prefill_worker);
  // The span by its last block's key: it names the whole chain. A prompt
  // shorter than a block pins nothing kvgov can name: unidentified.
  if (!keys.empty()) lease.span_digest = Hex64(keys.back());
  lease.tokens = static_cast<int64_t>(request.tokens.size());
  lease.model_id = request.model;
  lease.role = role;
  lease.event = NIXLLeaseEvent::kCreate;
  lease.ttl_ms = engine == nullptr ? 30000 : engine->kv_lease_ms;
  lease.witness = NIXLLeaseWitness::kHandoff;
  SpanResidency span;
  span.worker = std::string(prefill_worker);
  span.token_ids = request.tokens;
  span.cache_salt = request.salt;
  KVGOV_RETURN_IF_ERROR(leases_->ApplyReport(lease, span, kDaemonActor, clock::NowMillis()));
  return std::unique_ptr<gateway::HandoffPin>(std::make_unique<LeasePin>(
      *leases_, *gate_, lease.lease_id, std::string(prefill_worker), std::move(keys)));
}

void Handoffs::Record(gateway::HandoffRecord record, std::optional<double> handoff_seconds) {
  metrics_.outcomes->WithLabels({std::string(ToString(record.outcome))})->Inc();
  if (handoff_seconds) metrics_.seconds->WithLabels({})->Observe(*handoff_seconds);
  log_.Add(std::move(record));
}

}  // namespace kvgov::services
