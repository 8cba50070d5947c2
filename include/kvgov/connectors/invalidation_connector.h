#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/status.h"
#include "kvgov/core/vocabulary.h"

namespace kvgov::connectors {

/// How a connector retries a directive the owner did not acknowledge.
///
/// Attempt n (1-based) that fails retryably is followed by a pause of
/// min(initial_backoff_ms * multiplier^(n-1), max_backoff_ms) before attempt
/// n+1, up to max_attempts attempts in all. Retryable: HTTP 400 (SGLang's
/// /flush_cache answers 400 while requests are running or waiting), 408,
/// 409, 429 and every 5xx, plus no answer at all (connection refused or
/// reset, connect/read/write timeout). Any other answer that is not 2xx ends
/// the dispatch at once; 404 in particular means the route does not exist
/// (vLLM without VLLM_SERVER_DEV_MODE=1, a wrong control URL).
struct RetryPolicy {
  int max_attempts = 5;              // >= 1; 1 means no retry
  int64_t initial_backoff_ms = 100;  // >= 0
  double multiplier = 2.0;           // >= 1.0
  int64_t max_backoff_ms = 2000;     // >= initial_backoff_ms
  int64_t timeout_ms = 2000;         // > 0; connect, read and write timeout of each attempt
};

/// One eviction directive for one cache owner (an engine or a cache
/// controller), after the referee admitted it.
struct EvictionRequest {
  std::string worker;                     // the worker whose cache is meant
  std::vector<std::string> span_digests;  // exact targets, hex; may be empty for a whole flush
  std::string reason;                     // e.g. "poisoned_kv"
  std::string directive_id;               // stable across retries; receivers dedupe on it
};

/// One HTTP attempt at delivering a directive.
struct Attempt {
  int64_t at_ms = 0;    // wall clock (ms since the Unix epoch) when the attempt started
  int http_status = 0;  // 0 = no answer (connection error or timeout)
  std::string error;    // empty on a 2xx answer; else what went wrong, never a credential
};

/// Spelling of the degrade reason when a whole-cache flush stood in for
/// named spans (the spec's enginecache reason, kept byte-for-byte).
inline constexpr std::string_view kDegradeExactSpanUnsupported =
    "exact_span_unsupported_whole_prefix_flush";

/// What a successful dispatch did.
///
/// `acknowledged` means the owner answered 2xx: it accepted the directive.
/// It is NOT a claim that the blocks are gone. vLLM answers 200 to
/// /reset_prefix_cache without checking that the reset succeeded, LMCache's
/// /clear only schedules the clear, and a webhook receiver may act later.
/// Whether the blocks left is witnessed elsewhere, from the engine's own KV
/// event stream (BlockRemoved / AllBlocksCleared) folded into the residency
/// index; a deletion certificate must rest on that witness, not on this.
struct DispatchResult {
  bool acknowledged = false;
  KVEvictionScope scope = KVEvictionScope::kWholePrefixCache;
  bool degraded = false;          // a wider eviction than the named spans
  std::string degrade_reason;     // non-empty exactly when degraded
  std::vector<Attempt> attempts;  // every attempt, in order; the last one is the 2xx
  std::string connector;          // name() of the connector that dispatched
};

/// Delivers eviction directives to one cache owner over its real control
/// API, with bounded retries.
///
/// Implementations are immutable after construction. Thread-safety:
/// Dispatch may be called from several threads at once; each call uses its
/// own HTTP client and connection.
class InvalidationConnector {
 public:
  virtual ~InvalidationConnector() = default;

  /// Delivers `request`, retrying per the connector's RetryPolicy.
  ///
  /// `cancel` is polled before every attempt and throughout every backoff
  /// pause (in slices of a few milliseconds, since nothing notifies a plain
  /// atomic), so a pause ends within a few milliseconds of cancel turning
  /// true. An attempt already in flight is not interrupted; it ends within
  /// the policy's timeout_ms. If that attempt is answered 2xx, the dispatch
  /// is reported acknowledged even though cancel was set: the owner acted.
  ///
  /// Returns the result on a 2xx answer, or:
  ///   InvalidArgument   the request is unusable for this connector (an
  ///                     exact-span request naming no span, a span that is
  ///                     not hex); no network call was made.
  ///   Unavailable       "cancelled" when cancel was set; otherwise retries
  ///                     ran out, the message giving the attempt count and
  ///                     the last HTTP status or connection error.
  ///   NotFound          HTTP 404: the route is missing; the message names
  ///                     the URL.
  ///   Unauthenticated   HTTP 401.
  ///   PermissionDenied  HTTP 403.
  ///   FailedPrecondition any other non-retryable answer (3xx, other 4xx).
  ///   Internal          the HTTP library failed unexpectedly.
  /// Error messages name the connector and the URL and never contain the
  /// admin token. The attempt records of a failed dispatch are summarised
  /// in the message only.
  virtual Result<DispatchResult> Dispatch(const EvictionRequest& request,
                                          const std::atomic<bool>& cancel) = 0;

  /// "vllm", "sglang", "lmcache" or "webhook".
  virtual std::string_view name() const = 0;
};

/// How to reach one cache owner.
struct ConnectorConfig {
  /// "vllm":    POST {control}/reset_prefix_cache, empty body. Whole prefix
  ///            cache. vLLM registers the route only when the server runs
  ///            with VLLM_SERVER_DEV_MODE=1 (404 otherwise).
  /// "sglang":  POST {control}/flush_cache, empty body. Whole radix cache.
  /// "lmcache": POST {control}/clear to the LMCache controller (its
  ///            --port, 9000 by default), JSON {"instance_id","location"}.
  ///            Everything of that instance at that location.
  /// "webhook": POST {control}{webhook_path}, JSON {"directive_id","worker",
  ///            "reason","spans":[hex...]}. Exact span; the receiver must be
  ///            idempotent on directive_id, since retries can deliver twice.
  std::string kind;
  std::string control;  // http://HOST[:PORT][/]; https is not supported yet
  /// webhook only, required there: "/path" of printable ASCII with no space,
  /// '?' or '#'.
  std::string webhook_path;
  /// lmcache only. Defaults are LMCache's own: the `lmcache_instance_id`
  /// default of its engine config and its local CPU backend.
  std::string lmcache_instance_id = "lmcache_default_instance";
  std::string lmcache_location = "LocalCPUBackend";
  /// Optional; sent as "Authorization: Bearer <token>" on every attempt.
  /// Never logged and never put in an error message or attempt record.
  std::string admin_token;
  RetryPolicy retry;
};

/// Builds the connector `config.kind` names. Makes no network call.
/// Returns InvalidArgument for an unknown kind, a control URL that is not
/// http://HOST[:PORT][/], a missing or malformed webhook path (or one given
/// to another kind), an empty LMCache instance id or location, an admin
/// token with control characters (the message does not repeat it), or a
/// retry policy outside the ranges RetryPolicy documents.
Result<std::unique_ptr<InvalidationConnector>> MakeConnector(const ConnectorConfig& config);

}  // namespace kvgov::connectors
