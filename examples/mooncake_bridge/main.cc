// Mooncake store and transfer-engine operations, simulated, reported to
// kvgov through the bridge.
//
// Mooncake is not installed here, so SimulatedMooncake stands in for it:
// a map from key to the worker holding the replica, whose Put, Get, Remove
// and Transfer are plain function calls that call the bridge where a
// Mooncake integration (vLLM's MooncakeConnector, LMCache's Mooncake
// backend) would learn that the operation finished.

#include <cstdio>
#include <map>
#include <string>

#include "bridge_args.h"
#include "kvgov/core/digest.h"
#include "mooncake_kvgov_bridge.h"

namespace {

constexpr int64_t kKvBytesPerToken = 2 * 32 * 8 * 128 * 2;  // Llama-3-8B-sized, bf16

class SimulatedMooncake {
 public:
  explicit SimulatedMooncake(bridge::MooncakeKvgovBridge& bridge) : bridge_(bridge) {}

  void Put(const bridge::MooncakeObject& object, const std::string& segment_owner) {
    replicas_[object.key] = segment_owner;
    bridge_.OnPut(object, segment_owner, true);
  }
  void Get(const bridge::MooncakeObject& object, const std::string& reader) {
    bridge_.OnGet(object, reader, replicas_.count(object.key) > 0);
  }
  void Remove(const bridge::MooncakeObject& object) {
    auto it = replicas_.find(object.key);
    if (it == replicas_.end()) return;
    bridge_.OnRemove(object, it->second);
    replicas_.erase(it);
  }
  void Transfer(const bridge::MooncakeObject& object, const std::string& from,
                const std::string& to) {
    bridge_.OnTransfer(object, from, to, true, "");
  }

 private:
  bridge::MooncakeKvgovBridge& bridge_;
  std::map<std::string, std::string> replicas_;  // key -> worker whose segment holds it
};

bridge::MooncakeObject Object(int index) {
  bridge::MooncakeObject object;
  object.token_ids = bridge::PromptTokens(index);
  object.key = "mooncake:" + kvgov::DigestTokenIds(object.token_ids).substr(0, 32);
  object.bytes = static_cast<int64_t>(object.token_ids.size()) * kKvBytesPerToken;
  return object;
}

}  // namespace

int main(int argc, char** argv) {
  bridge::BridgeArgs args;
  if (!bridge::ParseBridgeArgs(argc, argv, "mooncake", &args)) return 2;
  std::unique_ptr<kvgov::client::Sink> sink = bridge::MakeSink(args);
  if (!sink) return 2;

  bridge::MooncakeBridgeConfig config;
  config.owner = args.owner;
  config.model_id = args.model;
  config.tokenizer_id = args.model;
  bridge::MooncakeKvgovBridge mooncake_bridge(*sink, config);
  SimulatedMooncake store(mooncake_bridge);

  const std::string& prefill = args.prefill_worker;
  const std::string& decode = args.decode_worker;
  for (int i = 0; i < args.requests; ++i) {
    const bridge::MooncakeObject object = Object(i);
    if (i % 2 == 0) {
      // Through the store: prefill puts the KV into its DRAM segment, decode
      // gets it into HBM, and the store later evicts the replica.
      store.Put(object, prefill);
      store.Get(object, decode);
      store.Remove(object);
    } else {
      // Through the transfer engine: prefill writes straight into decode.
      store.Transfer(object, prefill, decode);
    }
  }
  return bridge::FinishAndReport(*sink, "mooncake_bridge");
}
