#pragma once

// Reports a NIXL KV transfer's life to kvgov: the lease the prefill engine
// holds on the span's blocks (create, heartbeat, release) and the transfer
// itself (docs seed: kv-transport-governance, sections 2.1, 4 and 5). This
// is the part a real deployment keeps: call these from the places a NIXL
// connector learns the same facts (README.md maps them).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/client/sink.h"

namespace bridge {

/// Who this bridge speaks for.
struct NixlBridgeConfig {
  /// kvgov counts every report but lets only admitted owners move
  /// residency: start kvgov with --admit <owner>.
  std::string owner = "vllm+nixl";
  std::string model_id;
  std::string tokenizer_id;
  std::string prefill_worker;  // kvgov's id of the engine that pins the blocks
  std::string decode_worker;   // kvgov's id of the engine that pulls them
  int64_t lease_ttl_ms = 30000;
};

/// The span one request moves: its prompt from the first token, which is
/// how kvgov names it on a worker (it computes its own block keys).
struct NixlSpan {
  std::string request_id;
  std::vector<int64_t> token_ids;
  std::string cache_salt;  // the salt kvgov's /v1/route handed the request, if any
  std::string lora_name;
};

/// Turns NIXL callbacks into kvgov reports on a Sink. Each call builds one
/// event and emits it; a delivery problem shows in the sink's stats, never
/// as an error here, so the bridge cannot stall the transfer path.
/// Thread-safe as the Sink is; holds no state of its own.
class NixlKvgovBridge {
 public:
  /// `sink` must outlive the bridge.
  NixlKvgovBridge(kvgov::client::Sink& sink, NixlBridgeConfig config);

  /// Prefill: the request's blocks are pinned for a remote decode under
  /// `lease_id` (a NIXL lease, role prefill_pin).
  void OnLeaseCreated(const std::string& lease_id, const NixlSpan& span);
  /// Decode: the lease is still wanted; kvgov pushes its expiry by the TTL.
  void OnLeaseHeartbeat(const std::string& lease_id);
  /// Decode: the NIXL READ of the span's blocks finished (or failed).
  /// Success moves the span into the decode worker's HBM in kvgov's index.
  void OnTransferDone(const std::string& lease_id, const NixlSpan& span, int64_t bytes_moved,
                      bool success, std::string_view error);
  /// Prefill: the pin is released, after a completed transfer or an abort.
  /// A released lease never earns route credit again.
  void OnLeaseReleased(const std::string& lease_id, bool aborted);

 private:
  void Emit(const kvgov::client::Event& event);

  kvgov::client::Sink& sink_;
  const NixlBridgeConfig config_;
};

}  // namespace bridge
