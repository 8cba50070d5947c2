// vLLM's control API: POST /reset_prefix_cache, the whole prefix cache.

#include "connectors/http_connector.h"

namespace kvgov::connectors {

Result<std::unique_ptr<InvalidationConnector>> MakeVllmConnector(const ConnectorConfig& config,
                                                                 HttpTarget target) {
  // vLLM registers /reset_prefix_cache only when the server runs with
  // VLLM_SERVER_DEV_MODE=1, so without it the answer is 404 and we fail at
  // once. The reset fails while any KV block is still in use by a running
  // request; newer servers report that as a non-2xx answer, which is
  // retried (older ones answer 200 regardless, hence: no claim of
  // removal). No query string: reset_running_requests and reset_external
  // keep their false defaults, so kvgov never preempts running requests.
  target.path = "/reset_prefix_cache";
  target.not_found =
      "vLLM registers /reset_prefix_cache only when started with VLLM_SERVER_DEV_MODE=1";
  target.url += target.path;
  std::unique_ptr<InvalidationConnector> connector = std::make_unique<WholeFlushConnector>(
      std::move(target), config.admin_token, config.retry, "");
  return connector;
}

}  // namespace kvgov::connectors
