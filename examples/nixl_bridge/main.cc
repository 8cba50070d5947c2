// A NIXL transfer flow, simulated, reported to kvgov through the bridge.
//
// NIXL is not installed here, so SimulatedNixl below stands in for it: its
// methods are plain function calls at the points where a NIXL connector
// (vLLM's NixlConnector, for one) learns the same facts, and they call the
// bridge exactly as the real callbacks would. Replace SimulatedNixl with
// your connector's hooks; keep NixlKvgovBridge.

#include <cstdio>
#include <string>

#include "bridge_args.h"
#include "nixl_kvgov_bridge.h"

namespace {

// Bytes of KV per token for a Llama-3-8B-sized model in bf16 (32 layers,
// 8 KV heads of 128, K and V): what a transfer of the span moves.
constexpr int64_t kKvBytesPerToken = 2 * 32 * 8 * 128 * 2;

class SimulatedNixl {
 public:
  explicit SimulatedNixl(bridge::NixlKvgovBridge& bridge) : bridge_(bridge) {}

  // One disaggregated request: prefill pins its blocks under a lease, the
  // decode side admits it (heartbeat), READs the blocks, and notifies the
  // prefill side, which frees them.
  void RunRequest(int index, bool fail_transfer) {
    bridge::NixlSpan span;
    span.request_id = "req-" + std::to_string(index);
    span.token_ids = bridge::PromptTokens(index);
    const std::string lease = "nixl-lease-" + std::to_string(index);
    const int64_t bytes = static_cast<int64_t>(span.token_ids.size()) * kKvBytesPerToken;

    bridge_.OnLeaseCreated(lease, span);  // prefill: request finished, blocks pinned
    bridge_.OnLeaseHeartbeat(lease);      // decode: scheduler admitted the request
    if (fail_transfer) {                  // decode: the READ failed (a dropped QP, say)
      bridge_.OnTransferDone(lease, span, 0, false, "nixl: NIXL_ERR_REMOTE_DISCONNECT");
      bridge_.OnLeaseReleased(lease, /*aborted=*/true);
      return;
    }
    bridge_.OnTransferDone(lease, span, bytes, true, "");  // decode: READ complete
    bridge_.OnLeaseReleased(lease, /*aborted=*/false);     // prefill: notif received, freed
  }

 private:
  bridge::NixlKvgovBridge& bridge_;
};

}  // namespace

int main(int argc, char** argv) {
  bridge::BridgeArgs args;
  if (!bridge::ParseBridgeArgs(argc, argv, "vllm+nixl", &args)) return 2;
  std::unique_ptr<kvgov::client::Sink> sink = bridge::MakeSink(args);
  if (!sink) return 2;

  bridge::NixlBridgeConfig config;
  config.owner = args.owner;
  config.model_id = args.model;
  config.tokenizer_id = args.model;
  config.prefill_worker = args.prefill_worker;
  config.decode_worker = args.decode_worker;
  bridge::NixlKvgovBridge nixl_bridge(*sink, config);

  SimulatedNixl nixl(nixl_bridge);
  // The last request's transfer fails, to show the fault path.
  for (int i = 0; i < args.requests; ++i)
    nixl.RunRequest(i, /*fail_transfer=*/i == args.requests - 1);
  return bridge::FinishAndReport(*sink, "nixl_bridge");
}
