#pragma once

// What the gateway's prefill/decode handoff (src/gateway/handoff.h) asks
// of kvgov's state through its Plane, and what it leaves behind: the
// request it serves, the pin it holds, the record it ends with
// (docs/formats/gateway.md, "Prefill/decode disaggregation"). Plain types:
// the daemon's handoffs (kvgov/services/handoffs.h) implement the pin
// without knowing the gateway's I/O.

#include <cstdint>
#include <string>
#include <vector>

#include "kvgov/core/nixl_lease.h"
#include "kvgov/gateway/handoff_rules.h"

namespace kvgov::gateway {

/// A request for a model served by prefill and decode pools, already
/// admitted, tokenized and salted: the handoff's to serve.
struct HandoffRequest {
  std::string path;  // /v1/completions or /v1/chat/completions
  std::string model;
  std::string tenant;
  std::string salt;
  bool diverted = false;  // the prompt crosses a quarantine under its ordinary salt
  std::vector<int64_t> tokens;
  std::string body;  // the client's, salted
  bool stream = false;
  bool strip_usage = false;               // the usage chunk was the gateway's request
  std::vector<std::string> prefill_pool;  // live workers of role prefill or both
  std::vector<std::string> decode_pool;   // live workers of role decode or both
};

/// One handoff as GET /v1/handoffs shows it: both decisions and why, the
/// lease, and how it ended.
struct HandoffRecord {
  std::string request_id;  // X-Request-Id of both legs
  std::string model;
  std::string tenant;
  std::string protocol;  // "nixl" (vLLM) or "bootstrap" (SGLang)
  std::string prefill_worker;
  std::string decode_worker;
  int prefill_attempts = 0;
  uint64_t prompt_blocks = 0;
  uint64_t prefill_overlap_blocks = 0;  // credited on the prefill worker
  uint64_t decode_overlap_blocks = 0;   // held by the decode worker itself
  uint64_t pulled_blocks = 0;           // pulled from the pin, by the decision's count
  std::string lease_id;                 // empty when no pin was witnessed
  HandoffOutcome outcome = HandoffOutcome::kCompleted;
  std::string error;  // why, for every outcome but completed and unpinned
  int64_t started_ms = 0;
  int64_t prefill_done_ms = 0;  // 0: the prefill never answered
  int64_t first_token_ms = 0;   // 0: no first token
};

/// A handoff's pin, witnessed by kvgov as a lease of its own over the
/// prefill worker's span (docs/adr/0021): it lives until End, or until its
/// TTL runs out.
///
/// Thread-compatible: its handoff's loop.
class HandoffPin {
 public:
  virtual ~HandoffPin() = default;
  virtual const std::string& lease_id() const = 0;
  /// The pin as the lease table and the span gate see it now.
  virtual PinView View() const = 0;
  /// Reports the lease's end; one the expiry timer ended first stays
  /// expired.
  virtual void End(NIXLLeaseEvent event) = 0;
};

}  // namespace kvgov::gateway
