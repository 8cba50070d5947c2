#pragma once

// Reports Mooncake store and transfer-engine operations to kvgov (seed
// kv-transport-governance, section 2.2): put, get and remove on the
// distributed KV store, and the prefill-to-decode transfer. Call these
// where a Mooncake integration learns that an operation finished
// (README.md maps them).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/client/sink.h"
#include "kvgov/core/vocabulary.h"

namespace bridge {

struct MooncakeBridgeConfig {
  /// Admit it in kvgov (--admit mooncake) or its reports move no residency.
  std::string owner = "mooncake";
  std::string model_id;
  std::string tokenizer_id;
};

/// One object of the Mooncake store: a span of a prompt's KV. `key` is the
/// store's own key for it, which is also its stable span identity.
struct MooncakeObject {
  std::string key;
  std::vector<int64_t> token_ids;  // the prompt from its first token
  std::string cache_salt;
  int64_t bytes = 0;
};

/// Turns Mooncake operations into kvgov reports on a Sink. Thread-safe as
/// the Sink is; holds no state of its own.
class MooncakeKvgovBridge {
 public:
  /// `sink` must outlive the bridge.
  MooncakeKvgovBridge(kvgov::client::Sink& sink, MooncakeBridgeConfig config);

  /// Put: the object's replica now sits in the DRAM segment `worker`
  /// contributes to the store.
  void OnPut(const MooncakeObject& object, const std::string& worker, bool ok);
  /// Get: `worker` read the object into its HBM (a materialisation), or
  /// found it absent (`found` false: reported as a miss, not a fault).
  void OnGet(const MooncakeObject& object, const std::string& worker, bool found);
  /// Remove: the replica on `worker`'s segment is gone.
  void OnRemove(const MooncakeObject& object, const std::string& worker);
  /// Transfer engine: prefill `from` wrote the object's KV straight into
  /// decode `to`'s HBM.
  void OnTransfer(const MooncakeObject& object, const std::string& from, const std::string& to,
                  bool ok, std::string_view error);

 private:
  void Report(kvgov::MooncakeOperation operation, const MooncakeObject& object,
              kvgov::ResidencyTier from_tier, kvgov::ResidencyTier to_tier,
              const std::string& worker, const std::string& from_worker,
              kvgov::KVTransferOutcome outcome, std::string_view fault_reason);

  kvgov::client::Sink& sink_;
  const MooncakeBridgeConfig config_;
};

}  // namespace bridge
