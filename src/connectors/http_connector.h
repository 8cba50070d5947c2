#pragma once

// The part every HTTP invalidation connector shares: one POST to one path of
// the owner's control API, retried per the RetryPolicy, with the body and
// the scope supplied by the engine kind's own connector (vllm.cc, sglang.cc,
// lmcache.cc, webhook.cc).

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "connectors/control_url.h"
#include "kvgov/connectors/invalidation_connector.h"

namespace kvgov::connectors {

/// Where a connector POSTs, and what to say when the route is missing.
struct HttpTarget {
  std::string name;  // "vllm", ...
  ControlEndpoint endpoint;
  std::string url;        // scheme://host:port/path, for messages
  std::string path;       // what is POSTed to
  std::string not_found;  // hint appended to a 404 error
};

/// The retry loop. Immutable; Dispatch may run on several threads at once.
class HttpConnector : public InvalidationConnector {
 public:
  HttpConnector(HttpTarget target, std::string admin_token, RetryPolicy retry)
      : target_(std::move(target)), admin_token_(std::move(admin_token)), retry_(retry) {}

  Result<DispatchResult> Dispatch(const EvictionRequest& request,
                                  const std::atomic<bool>& cancel) final;
  std::string_view name() const final { return target_.name; }

 protected:
  // Checks `request`, fills scope and degradation into `result`, and
  // returns the body to send ("" for none). Makes no network call.
  virtual Result<std::string> Prepare(const EvictionRequest& request,
                                      DispatchResult& result) const = 0;

 private:
  Status Refused(int status, const std::string& error) const;
  int64_t NextBackoff(int64_t backoff_ms) const;

  const HttpTarget target_;
  const std::string admin_token_;
  const RetryPolicy retry_;
};

/// An owner that can only drop a whole cache (vLLM, SGLang) or a whole
/// LMCache location: named spans make the eviction degraded.
class WholeFlushConnector final : public HttpConnector {
 public:
  WholeFlushConnector(HttpTarget target, std::string admin_token, RetryPolicy retry,
                      std::string body)
      : HttpConnector(std::move(target), std::move(admin_token), retry), body_(std::move(body)) {}

 private:
  Result<std::string> Prepare(const EvictionRequest& request,
                              DispatchResult& result) const override;

  const std::string body_;  // fixed per connector; "" sends no body
};

/// Printable ASCII without the space: what may go in a header or a path.
bool IsVisibleAscii(char c);

// One factory per engine kind, each in its own file. `target` arrives with
// name, endpoint and url base (the control URL without a trailing slash);
// the factory sets path and not_found, appends the path to url, and checks
// the kind's own settings. MakeConnector has checked the rest.
Result<std::unique_ptr<InvalidationConnector>> MakeVllmConnector(const ConnectorConfig& config,
                                                                 HttpTarget target);
Result<std::unique_ptr<InvalidationConnector>> MakeSglangConnector(const ConnectorConfig& config,
                                                                   HttpTarget target);
Result<std::unique_ptr<InvalidationConnector>> MakeLmcacheConnector(const ConnectorConfig& config,
                                                                    HttpTarget target);
Result<std::unique_ptr<InvalidationConnector>> MakeWebhookConnector(const ConnectorConfig& config,
                                                                    HttpTarget target);

}  // namespace kvgov::connectors
