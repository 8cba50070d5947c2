#include "connectors/http_connector.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>
#include <utility>

#include "kvgov/clock/clock.h"

namespace kvgov::connectors {
namespace {

// Nothing notifies a plain std::atomic<bool> (and C++20's atomic::wait has
// no timeout), so a backoff pause polls `cancel` in slices this long.
constexpr auto kCancelPollSlice = std::chrono::milliseconds(5);
// How much of an error answer's body goes into an attempt record.
constexpr size_t kBodySummaryBytes = 160;

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

}  // namespace

bool IsVisibleAscii(char c) { return c > ' ' && c < 0x7f; }

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
      record.at_ms = clock::NowMillis();
      httplib::Result answer = body.empty()
                                   ? client.Post(target_.path, headers)
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

Result<std::string> WholeFlushConnector::Prepare(const EvictionRequest& request,
                                                 DispatchResult& result) const {
  result.scope = KVEvictionScope::kWholePrefixCache;
  result.degraded = !request.span_digests.empty();
  if (result.degraded) result.degrade_reason = std::string(kDegradeExactSpanUnsupported);
  return body_;
}

}  // namespace kvgov::connectors
