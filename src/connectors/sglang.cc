// SGLang's control API: POST /flush_cache, the whole radix cache.

#include "connectors/http_connector.h"

namespace kvgov::connectors {

Result<std::unique_ptr<InvalidationConnector>> MakeSglangConnector(const ConnectorConfig& config,
                                                                   HttpTarget target) {
  // SGLang's /flush_cache answers 400 and does nothing while requests are
  // running or waiting; RetryPolicy retries 400 for that reason.
  target.path = "/flush_cache";
  target.not_found = "is the control URL an SGLang server?";
  target.url += target.path;
  std::unique_ptr<InvalidationConnector> connector = std::make_unique<WholeFlushConnector>(
      std::move(target), config.admin_token, config.retry, "");
  return connector;
}

}  // namespace kvgov::connectors
