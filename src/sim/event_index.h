#pragma once

// Internal to kvgov_sim: what an event-fed policy knows of the engines.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/status.h"
#include "kvgov/index/block_key.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/sim/fleet.h"

namespace kvgov::sim {

/// A residency index fed by the engines' encoded KV-event streams, decoded
/// by kvgov's adapter as the daemon decodes them: kvgov's policy and the
/// precise (event-fed) peers' alike.
///
/// Not thread-safe: one policy drives it.
class EventIndex {
 public:
  explicit EventIndex(const FleetOptions& fleet);

  /// An engine published this payload (an encoded EventBatch).
  Status Observe(size_t engine, std::string_view payload);

  /// The request's full blocks, and how many leading ones each engine holds.
  struct Match {
    std::vector<index::BlockKey> chain;
    uint64_t request_blocks = 0;
    std::vector<uint64_t> held;  // by engine
  };
  Match Lookup(const SimRequest& request, std::string_view cache_salt, size_t engines) const;

  const index::ResidencyIndex& index() const { return index_; }

 private:
  std::string model_;
  int64_t block_size_;
  index::ResidencyIndex index_;
};

}  // namespace kvgov::sim
