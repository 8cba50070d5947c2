#include "kvgov/connectors/invalidation_connector.h"

#include <algorithm>
#include <array>

#include "connectors/control_url.h"
#include "connectors/http_connector.h"

namespace kvgov::connectors {
namespace {

Status ValidateRetryPolicy(const RetryPolicy& retry) {
  if (retry.max_attempts < 1) return Status::InvalidArgument("retry: max_attempts must be >= 1");
  if (retry.initial_backoff_ms < 0) {
    return Status::InvalidArgument("retry: initial_backoff_ms must be >= 0");
  }
  if (!(retry.multiplier >= 1.0)) {  // also refuses NaN
    return Status::InvalidArgument("retry: multiplier must be >= 1.0");
  }
  if (retry.max_backoff_ms < retry.initial_backoff_ms) {
    return Status::InvalidArgument("retry: max_backoff_ms must be >= initial_backoff_ms");
  }
  if (retry.timeout_ms <= 0) return Status::InvalidArgument("retry: timeout_ms must be > 0");
  return Status::Ok();
}

struct Kind {
  std::string_view name;
  Result<std::unique_ptr<InvalidationConnector>> (*make)(const ConnectorConfig&, HttpTarget);
};

// Every engine kind kvgov can send a directive to; each kind's connector is
// its own file. A new engine is one file and one row.
constexpr std::array<Kind, 4> kKinds = {{{"vllm", MakeVllmConnector},
                                         {"sglang", MakeSglangConnector},
                                         {"lmcache", MakeLmcacheConnector},
                                         {"webhook", MakeWebhookConnector}}};

}  // namespace

Result<std::unique_ptr<InvalidationConnector>> MakeConnector(const ConnectorConfig& config) {
  const std::string& kind = config.kind;
  const auto found = std::find_if(kKinds.begin(), kKinds.end(),
                                  [&](const Kind& known) { return known.name == kind; });
  if (found == kKinds.end()) {
    return Status::InvalidArgument("connector: unknown kind '" + kind +
                                   "'; want vllm, sglang, lmcache or webhook");
  }
  const std::string where = "connector " + kind;
  Result<ControlEndpoint> endpoint = ParseControlUrl(config.control);
  if (!endpoint.ok()) return endpoint.status().WithContext(where);
  KVGOV_RETURN_IF_ERROR(ValidateRetryPolicy(config.retry).WithContext(where));
  if (!std::all_of(config.admin_token.begin(), config.admin_token.end(), IsVisibleAscii)) {
    // Deliberately does not repeat the token.
    return Status::InvalidArgument(
        where + ": admin token has a space or control character; it cannot go in a header");
  }
  if (kind != "webhook" && !config.webhook_path.empty()) {
    return Status::InvalidArgument(where + ": webhook_path applies only to kind webhook");
  }
  HttpTarget target;
  target.name = kind;
  target.endpoint = *endpoint;
  target.url = config.control;
  if (target.url.ends_with('/')) target.url.pop_back();
  return found->make(config, std::move(target));
}

}  // namespace kvgov::connectors
