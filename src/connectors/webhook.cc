// An exact-span receiver: POST {control}{webhook_path} with the spans by name.

#include <algorithm>
#include <nlohmann/json.hpp>

#include "connectors/http_connector.h"

namespace kvgov::connectors {
namespace {

constexpr size_t kMaxSpanHexChars = 256;
constexpr size_t kMaxWebhookPathChars = 1024;

bool IsHex(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  });
}

// A receiver that evicts exactly the named spans.
class WebhookConnector final : public HttpConnector {
 public:
  using HttpConnector::HttpConnector;

 private:
  Result<std::string> Prepare(const EvictionRequest& request,
                              DispatchResult& result) const override {
    // Fail closed: "precisely evict nothing" must not pass as an exact
    // eviction.
    if (request.span_digests.empty()) {
      return Status::InvalidArgument("webhook: an exact-span request must name at least one span");
    }
    for (size_t i = 0; i < request.span_digests.size(); ++i) {
      const std::string& span = request.span_digests[i];
      if (span.empty() || span.size() > kMaxSpanHexChars || !IsHex(span)) {
        return Status::InvalidArgument("webhook: span " + std::to_string(i) +
                                       " is not a hex digest of 1-" +
                                       std::to_string(kMaxSpanHexChars) + " characters");
      }
    }
    result.scope = KVEvictionScope::kExactSpan;
    result.degraded = false;
    try {
      const nlohmann::json body = {{"directive_id", request.directive_id},
                                   {"worker", request.worker},
                                   {"reason", request.reason},
                                   {"spans", request.span_digests}};
      return body.dump();
    } catch (const nlohmann::json::exception&) {
      return Status::InvalidArgument(
          "webhook: directive_id, worker and reason must be valid UTF-8");
    }
  }
};

}  // namespace

Result<std::unique_ptr<InvalidationConnector>> MakeWebhookConnector(const ConnectorConfig& config,
                                                                    HttpTarget target) {
  const std::string& path = config.webhook_path;
  if (path.empty() || !path.starts_with('/') || path.size() > kMaxWebhookPathChars ||
      !std::all_of(path.begin(), path.end(),
                   [](char c) { return IsVisibleAscii(c) && c != '?' && c != '#'; })) {
    return Status::InvalidArgument("connector webhook: webhook_path must be '/...' of at most " +
                                   std::to_string(kMaxWebhookPathChars) +
                                   " printable characters with no space, '?' or '#'");
  }
  target.path = path;
  target.not_found = "check webhook_path";
  target.url += target.path;
  std::unique_ptr<InvalidationConnector> connector =
      std::make_unique<WebhookConnector>(std::move(target), config.admin_token, config.retry);
  return connector;
}

}  // namespace kvgov::connectors
