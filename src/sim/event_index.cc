#include "sim/event_index.h"

#include "kvgov/adapters/engine_wire.h"

namespace kvgov::sim {

EventIndex::EventIndex(const FleetOptions& fleet)
    : model_(fleet.model), block_size_(fleet.block_size) {
  for (int i = 0; i < fleet.engines; ++i) {
    // Registration of fresh ids in a fresh index cannot fail.
    (void)index_.AddWorker(Fleet::WorkerId(static_cast<size_t>(i)), fleet.model, fleet.block_size);
  }
}

Status EventIndex::Observe(size_t engine, std::string_view payload) {
  KVGOV_ASSIGN_OR_RETURN(EngineEventBatch batch, adapters::DecodeEngineBatch(payload));
  const std::string worker = Fleet::WorkerId(engine);
  for (const EngineEvent& event : batch.events) {
    KVGOV_RETURN_IF_ERROR(index_.Apply(worker, event).status());
  }
  return Status::Ok();
}

EventIndex::Match EventIndex::Lookup(const SimRequest& request, std::string_view cache_salt,
                                     size_t engines) const {
  Match match;
  match.chain = index::RequestChain(index_.hasher(), {model_, "", 0}, cache_salt, request.tokens,
                                    block_size_);
  match.request_blocks = match.chain.size();
  match.held.assign(engines, 0);
  for (const index::WorkerOverlap& overlap : index_.Overlap(match.chain)) {
    const size_t engine = std::stoul(overlap.worker.substr(4));  // "sim-N"
    if (engine < engines) match.held[engine] = overlap.blocks;
  }
  return match;
}

}  // namespace kvgov::sim
