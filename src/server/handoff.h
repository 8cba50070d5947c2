#pragma once

// Internal to kvgov_server: the I/O of the gateway's disaggregated path, a
// request prefilled on one worker and decoded on another, with the NIXL
// lease of the handoff witnessed by kvgov itself (docs/formats/gateway.md,
// "Prefill/decode disaggregation"; docs/adr/0021). What happens next is
// gateway::HandoffRules' to decide (docs/adr/0035).

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/plane.h"
#include "kvgov/gateway/handoff_rules.h"
#include "kvgov/ingest/engine_spec.h"

namespace httplib {
struct Response;
class Server;
}  // namespace httplib

namespace kvgov::server {

using gateway::HandoffOutcome;

struct Daemon;

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

/// The newest handoffs, for operators. Thread-safe: one mutex.
class HandoffLog {
 public:
  static constexpr size_t kKept = 256;
  void Add(HandoffRecord record);
  /// Newest first; only `tenant`'s when not empty.
  std::vector<HandoffRecord> NewestFirst(std::string_view tenant) const;

 private:
  mutable std::mutex mu_;
  std::deque<HandoffRecord> records_;  // oldest first
};

using gateway::HandoffRequest;

/// True when one of `serving` has a role other than both: the model is
/// then served in two steps.
bool ServedDisaggregated(const Daemon& daemon, const std::vector<std::string>& serving);

/// The worker's engine role (both for a worker no --engine names).
ingest::EngineRole RoleOf(const Daemon& daemon, std::string_view worker);

/// GET /v1/handoffs on the control API: the newest handoffs, newest first
/// (read role; a tenant-bound caller sees its tenant's only).
void RegisterHandoffApi(httplib::Server& http, Daemon& daemon);

/// Serves the request in two steps and answers `response`: the prefill
/// worker chosen by overlap and load computes the prompt and pins its KV;
/// the decode worker chosen by load and its own overlap takes the pin and
/// streams the answer. Runs on the handler's thread; a streamed answer's
/// decode step runs in its content provider, where a client that went away
/// is seen before the decode request is sent.
void ServeHandoff(Daemon& daemon, HandoffRequest request, httplib::Response& response);

}  // namespace kvgov::server
