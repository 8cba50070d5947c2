#pragma once

// What the gateway's request path (request_path.h) asks of the rest of
// kvgov, and nothing more: callers, the fleet, the salt, the router and
// the books. kvgov_server implements it over its daemon
// (src/server/gateway.cc), so the request path knows no daemon.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/auth/tokens.h"
#include "kvgov/codec/gateway_api.h"
#include "kvgov/codec/json_codec.h"
#include "kvgov/core/nixl_lease.h"
#include "kvgov/core/status.h"
#include "kvgov/gateway/handoff_plane.h"
#include "kvgov/gateway/handoff_rules.h"
#include "kvgov/router/prediction_score.h"
#include "kvgov/router/router.h"

namespace kvgov::gateway {

/// What a routed request's engine is expected to report, to check its
/// usage against (Plane::Account).
using router::Prediction;

/// Where a worker's engine serves OpenAI's API.
struct EngineAddress {
  std::string engine;         // the engine's id, for messages
  std::string url;            // http://HOST:PORT
  std::string tokenize_path;  // the engine kind's /tokenize
  // SGLang's disaggregation: both legs at once, the KV pushed through the
  // bootstrap server at this port beside the prefill worker.
  bool bootstrap = false;
  int bootstrap_port = 0;
};

/// The salt a request goes out under (docs/adr/0028).
struct Salted {
  std::string salt;
  bool diverted = false;  // the prompt crosses a quarantine under its ordinary salt
};

/// Whether a route is the request's own, counted in the console's traffic,
/// or a handoff's decode leg (its credit is what it need not pull, not
/// prefill saved).
enum class RouteCount { kRequest, kDecodeLeg };

struct GatewayLimits {
  JsonLimits body;                // a request body's decoding
  uint64_t max_in_flight = 0;     // per worker; 0: none
  uint64_t max_requests = 16384;  // served at once by the whole gateway
};

/// Thread-safety: every method may be called from every loop at once.
class Plane {
 public:
  virtual ~Plane() = default;

  virtual const GatewayLimits& limits() const = 0;

  // Callers.
  /// The caller an Authorization header value names, if it has `role`:
  /// Unauthenticated or PermissionDenied otherwise.
  virtual Result<auth::Principal> Authorize(std::string_view authorization,
                                            auth::Role role) const = 0;

  // The fleet.
  /// Every model a worker is registered for, served now or not.
  virtual std::set<std::string> KnownModels() const = 0;
  /// The workers of `model` the gateway may send to: live, healthy, not
  /// draining, with an engine URL. The router still decides among them.
  virtual std::vector<std::string> ServingWorkers(std::string_view model) const = 0;
  /// The engine of a serving worker.
  virtual std::optional<EngineAddress> EngineOf(std::string_view worker) const = 0;
  virtual int64_t BlockSize(std::string_view worker) const = 0;
  virtual uint64_t InFlight(std::string_view worker) const = 0;
  /// `serving` split into pools when one of them has a role other than
  /// both; nullopt when the model is served in one step.
  struct Pools {
    std::vector<std::string> prefill;
    std::vector<std::string> decode;
  };
  virtual std::optional<Pools> Disaggregated(const std::vector<std::string>& serving) const = 0;

  // The request's way through kvgov's state.
  /// Seen for the prefix diagnostics.
  virtual void ObservePrompt(std::string_view model, std::string_view tenant,
                             const std::vector<int64_t>& tokens) = 0;
  /// The salt of `route`'s prompt; a diverted one may then go only to
  /// engines proven to key by the salt (`route` says so).
  virtual Result<Salted> Salt(router::RouteRequest& route) = 0;
  /// Routes and counts the decision (its load held until Done).
  virtual Result<router::RouteDecision> Route(const router::RouteRequest& route,
                                              const Salted& salted, std::string decision_id,
                                              RouteCount count) = 0;
  /// The decision's prompt is computed: its load turns to decode.
  virtual void Prefilled(const std::string& decision_id) = 0;
  virtual void Done(const std::string& decision_id) = 0;
  /// The engine's usage (none when it reported none) against the prediction.
  virtual void Account(const std::string& worker, const std::string& decision_id,
                       const Prediction& prediction, const std::optional<EngineUsage>& usage) = 0;

  // The prefill/decode handoff (handoff.h).
  /// Witnesses the pin of `request`'s prompt on `prefill_worker` as lease
  /// "handoff-<request_id>" of `role`, its TTL the engine's; the error
  /// names why it cannot be recorded.
  virtual Result<std::unique_ptr<HandoffPin>> Pin(const HandoffRequest& request,
                                                  std::string_view request_id,
                                                  std::string_view prefill_worker,
                                                  NIXLTransferRole role) = 0;
  /// For operators (GET /v1/handoffs) and the metrics: how it ended, and the
  /// time from the prefill's answer to the decode worker's first token.
  virtual void RecordHandoff(HandoffRecord record, std::optional<double> handoff_seconds) = 0;

  // Counts.
  virtual void CountRequest(std::string_view endpoint) = 0;
  virtual void CountTokenizeFailure(std::string_view model) = 0;
  virtual void CountRetry() = 0;
  virtual void CountRelayed(size_t bytes) = 0;
};

}  // namespace kvgov::gateway
