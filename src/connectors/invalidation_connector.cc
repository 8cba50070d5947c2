#include "server/invalidation_connector.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>
#include <utility>

#include "server/control_url.h"

namespace kvgov::server {
namespace {

// Nothing notifies a plain std::atomic<bool> (and C++20's atomic::wait has
// no timeout), so a backoff pause polls `cancel` in slices this long.
constexpr auto kCancelPollSlice = std::chrono::milliseconds(5);
// How much of an error answer's body goes into an attempt record.
constexpr size_t kBodySummaryBytes = 160;
constexpr size_t kMaxSpanHexChars = 256;
constexpr size_t kMaxWebhookPathChars = 1024;

int64_t NowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}


bool IsVisibleAscii(char c) { return c > ' ' && c < 0x7f; }

bool IsHex(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  });
}

// The start of an error answer's body, on one printable line, with every
// occurrence of `secret` (the admin token) blanked: an owner that echoes
// request headers back must not get the token into kvgov's records.
std::string Summarise(std::string_view body, const std::string& secret) {
  if (body.empty()) return "";
  // Redact before cutting, over a window long enough that any occurrence
  // starting inside the kept part is whole, so no prefix of it survives.
  std::string text(body.substr(0, kBodySummaryBytes + secret.size()));
  if (!secret.empty()) {
    for (size_t at = text.find(secret); at != std::string::npos;
         at = text.find(secret, at + secret.size())) {
      text.replace(at, secret.size(), std::string(secret.size(), '*'));
    }
  }
  const bool cut = body.size() > kBodySummaryBytes;
  if (text.size() > kBodySummaryBytes) text.resize(kBodySummaryBytes);
  for (char& c : text) {
    if (c < ' ' || c >= 0x7f) c = ' ';
  }
  return ": " + text + (cut ? "..." : "");
}

// Statuses that say "not now" rather than "never": SGLang's busy 400,
// request timeout, conflict, rate limit, and every server error.
bool IsRetryable(int status) {
  return status == 400 || status == 408 || status == 409 || status == 429 ||
         (status >= 500 && status <= 599);
}

// Sleeps `ms`, polling `cancel`. False when cancel turned true first.
bool PauseUnlessCancelled(int64_t ms, const std::atomic<bool>& cancel) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!cancel.load(std::memory_order_acquire)) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return true;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(deadline - now, kCancelPollSlice));
  }
  return false;
}

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

// The retry loop shared by every connector: one POST to one path, with
// the body and the description of the outcome supplied by the subclass.
class HttpConnector : public InvalidationConnector {
 public:
  struct Target {
    std::string name;       // "vllm", ...
    ControlEndpoint endpoint;
    std::string url;        // scheme://host:port/path, for messages
    std::string path;       // what is POSTed to
    std::string not_found;  // hint appended to a 404 error
  };

  HttpConnector(Target target, std::string admin_token, RetryPolicy retry)
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

  const Target target_;
  const std::string admin_token_;
  const RetryPolicy retry_;
};

Result<DispatchResult> HttpConnector::Dispatch(const EvictionRequest& request,
                                               const std::atomic<bool>& cancel) {
  DispatchResult result;
  result.connector = target_.name;
  KVGOV_ASSIGN_OR_RETURN(std::string body, Prepare(request, result));
  const std::string where = target_.name + ": POST " + target_.url;
  // The edge of the HTTP library: nothing it throws leaves this function.
  try {
    httplib::Client client(target_.endpoint.host, target_.endpoint.port);
    const auto timeout = std::chrono::milliseconds(retry_.timeout_ms);
    client.set_connection_timeout(timeout);
    client.set_read_timeout(timeout);
    client.set_write_timeout(timeout);
    httplib::Headers headers;
    if (!admin_token_.empty()) headers.emplace("Authorization", "Bearer " + admin_token_);

    int64_t backoff_ms = retry_.initial_backoff_ms;
    for (int attempt = 1;; ++attempt) {
      if (cancel.load(std::memory_order_acquire)) return Status::Unavailable("cancelled");
      Attempt& record = result.attempts.emplace_back();
      record.at_ms = NowMillis();
      httplib::Result answer =
          body.empty() ? client.Post(target_.path, headers)
                       : client.Post(target_.path, headers, body, "application/json");
      if (!answer) {
        record.error = RequestErrorText(answer.error());
      } else {
        record.http_status = answer->status;
        if (answer->status >= 200 && answer->status <= 299) {
          result.acknowledged = true;
          return result;
        }
        record.error =
            "HTTP " + std::to_string(answer->status) + Summarise(answer->body, admin_token_);
        if (!IsRetryable(answer->status)) return Refused(answer->status, record.error);
      }
      if (attempt >= retry_.max_attempts) {
        return Status::Unavailable(where + ": gave up after " + std::to_string(attempt) +
                                   (attempt == 1 ? " attempt" : " attempts") +
                                   "; last: " + record.error);
      }
      if (!PauseUnlessCancelled(backoff_ms, cancel)) return Status::Unavailable("cancelled");
      backoff_ms = NextBackoff(backoff_ms);
    }
  } catch (const std::exception& e) {
    return Status::Internal(where + ": " + e.what());
  } catch (...) {
    return Status::Internal(where + ": unknown failure in the HTTP client");
  }
}

Status HttpConnector::Refused(int status, const std::string& error) const {
  const std::string message = target_.name + ": POST " + target_.url + ": " + error;
  switch (status) {
    case 404:
      return Status::NotFound(message + " (the route does not exist; " + target_.not_found + ")");
    case 401:
      return Status::Unauthenticated(message);
    case 403:
      return Status::PermissionDenied(message);
    default:
      return Status::FailedPrecondition(message);
  }
}

int64_t HttpConnector::NextBackoff(int64_t backoff_ms) const {
  const double next = static_cast<double>(backoff_ms) * retry_.multiplier;
  const double cap = static_cast<double>(retry_.max_backoff_ms);
  return next >= cap ? retry_.max_backoff_ms : static_cast<int64_t>(next);
}

// vLLM, SGLang and LMCache: each can only drop a whole cache (or a whole
// LMCache location), so named spans make the eviction degraded.
class WholeFlushConnector final : public HttpConnector {
 public:
  WholeFlushConnector(Target target, std::string admin_token, RetryPolicy retry,
                      std::string body)
      : HttpConnector(std::move(target), std::move(admin_token), retry), body_(std::move(body)) {}

 private:
  Result<std::string> Prepare(const EvictionRequest& request,
                              DispatchResult& result) const override {
    result.scope = KVEvictionScope::kWholePrefixCache;
    result.degraded = !request.span_digests.empty();
    if (result.degraded) result.degrade_reason = std::string(kDegradeExactSpanUnsupported);
    return body_;
  }

  const std::string body_;  // fixed per connector; "" sends no body
};

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

Result<std::unique_ptr<InvalidationConnector>> MakeConnector(const ConnectorConfig& config) {
  const std::string& kind = config.kind;
  if (kind != "vllm" && kind != "sglang" && kind != "lmcache" && kind != "webhook") {
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

  HttpConnector::Target target;
  target.name = kind;
  target.endpoint = *endpoint;
  std::string base = config.control;
  if (base.ends_with('/')) base.pop_back();
  std::string body;
  if (kind == "vllm") {
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
  } else if (kind == "sglang") {
    // SGLang's /flush_cache answers 400 and does nothing while requests are
    // running or waiting; RetryPolicy retries 400 for that reason.
    target.path = "/flush_cache";
    target.not_found = "is the control URL an SGLang server?";
  } else if (kind == "lmcache") {
    if (config.lmcache_instance_id.empty() || config.lmcache_location.empty()) {
      return Status::InvalidArgument(where + ": lmcache_instance_id and lmcache_location must "
                                             "not be empty");
    }
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
  } else {  // webhook
    const std::string& path = config.webhook_path;
    if (path.empty() || !path.starts_with('/') || path.size() > kMaxWebhookPathChars ||
        !std::all_of(path.begin(), path.end(),
                     [](char c) { return IsVisibleAscii(c) && c != '?' && c != '#'; })) {
      return Status::InvalidArgument(where + ": webhook_path must be '/...' of at most " +
                                     std::to_string(kMaxWebhookPathChars) +
                                     " printable characters with no space, '?' or '#'");
    }
    target.path = path;
    target.not_found = "check webhook_path";
  }
  target.url = base + target.path;

  std::unique_ptr<InvalidationConnector> connector;
  if (kind == "webhook") {
    connector = std::make_unique<WebhookConnector>(std::move(target), config.admin_token,
                                                   config.retry);
  } else {
    connector = std::make_unique<WholeFlushConnector>(std::move(target), config.admin_token,
                                                      config.retry, std::move(body));
  }
  return connector;
}

}  // namespace kvgov::server
