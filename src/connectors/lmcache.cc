// LMCache's controller API: POST /clear, everything of one instance at one
// location.

#include <nlohmann/json.hpp>

#include "connectors/http_connector.h"

namespace kvgov::connectors {

Result<std::unique_ptr<InvalidationConnector>> MakeLmcacheConnector(const ConnectorConfig& config,
                                                                    HttpTarget target) {
  const std::string where = "connector lmcache";
  if (config.lmcache_instance_id.empty() || config.lmcache_location.empty()) {
    return Status::InvalidArgument(where +
                                   ": lmcache_instance_id and lmcache_location must not be empty");
  }
  std::string body;
  try {
    body = nlohmann::json{{"instance_id", config.lmcache_instance_id},
                          {"location", config.lmcache_location}}
               .dump();
  } catch (const nlohmann::json::exception&) {
    return Status::InvalidArgument(where +
                                   ": lmcache_instance_id and lmcache_location must be UTF-8");
  }
  target.path = "/clear";
  target.not_found =
      "is the control URL the LMCache controller's API port (--port, 9000 by default)?";
  target.url += target.path;
  std::unique_ptr<InvalidationConnector> connector = std::make_unique<WholeFlushConnector>(
      std::move(target), config.admin_token, config.retry, std::move(body));
  return connector;
}

}  // namespace kvgov::connectors
