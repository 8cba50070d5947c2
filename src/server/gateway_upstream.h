#pragma once

// Internal to kvgov_server: what the gateway's two request paths share
// (gateway.cc, colocated, on the front door's loops; handoff.cc,
// disaggregated, on a relay thread): the engine of a worker and the
// accounting of what the engine reported; and the handoff's blocking relay
// of one forwarded request's answer (Relay, StartUpstream, StreamPump),
// until the handoff runs on the loops too (ADR 0034).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/plane.h"
#include "kvgov/codec/gateway_api.h"
#include "kvgov/core/status.h"
#include "kvgov/ingest/engine_spec.h"
#include "kvgov/router/router.h"

namespace httplib {
class DataSink;
struct Response;
}  // namespace httplib

namespace kvgov::server {

struct Daemon;

/// Answers with OpenAI's error shape.
void SendOpenAIError(httplib::Response& response, int status, std::string_view message,
                     std::string_view type, std::string_view param, std::string_view code);


/// The engine a worker ("id" or "id@dp_rank") belongs to; null for a worker
/// no --engine names (one that only reports over HTTP).
const ingest::EngineSpec* EngineOf(const Daemon& daemon, std::string_view worker);

using router::IneligibleReasons;

/// The engine URL the gateway forwards to; "" for a worker without one.
std::string OpenAIUrl(const ingest::EngineSpec& engine);
std::string OpenAIUrl(const Daemon& daemon, std::string_view worker);

/// One forwarded request's answer on its way from the engine's connection
/// (the upstream thread) to the client's (the handler thread). At most
/// kMaxQueuedBytes wait in it: a client slower than its engine slows the
/// engine's connection down instead of growing the gateway's memory.
///
/// Thread-safe: one mutex guards everything.
class Relay {
  static constexpr size_t kMaxQueuedBytes = size_t{4} << 20;

 public:
  // Upstream side.
  bool Head(int status, std::string_view content_type) {
    std::lock_guard lock(mu_);
    head_ = true;
    status_ = status;
    content_type_ = std::string(content_type);
    changed_.notify_all();
    return !cancelled_;
  }
  bool Chunk(std::string_view chunk) {
    std::unique_lock lock(mu_);
    drained_.wait(lock, [this] { return queued_bytes_ < kMaxQueuedBytes || cancelled_; });
    chunks_.emplace_back(chunk);
    queued_bytes_ += chunk.size();
    changed_.notify_all();
    return !cancelled_;
  }
  void Finish(Status status) {
    std::lock_guard lock(mu_);
    finished_ = true;
    outcome_ = std::move(status);
    changed_.notify_all();
  }

  // Client side.
  void Cancel() {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    drained_.notify_all();
  }
  // Waits for the head or the end. True when the head came.
  bool WaitForHead(int* status, std::string* content_type, Status* failure) {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [this] { return head_ || finished_; });
    *status = status_;
    *content_type = content_type_;
    *failure = outcome_;
    return head_;
  }
  // Waits at most `wait` for chunks or the end. True when either is there
  // for Next to take without blocking.
  bool WaitForChunkOrEnd(std::chrono::milliseconds wait) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, wait, [this] { return !chunks_.empty() || finished_; });
  }
  // Waits for chunks or the end; returns the chunks, and sets `finished`
  // and `outcome` once the body has ended.
  std::deque<std::string> Next(bool* finished, Status* outcome) {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [this] { return !chunks_.empty() || finished_; });
    std::deque<std::string> out;
    out.swap(chunks_);
    queued_bytes_ = 0;
    drained_.notify_all();
    *finished = finished_;
    *outcome = outcome_;
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;  // head, chunk or end arrived
  std::condition_variable drained_;  // the client side took the chunks, or cancelled
  size_t queued_bytes_ = 0;
  bool head_ = false;
  int status_ = 0;
  std::string content_type_;
  std::deque<std::string> chunks_;
  bool finished_ = false;
  bool cancelled_ = false;
  Status outcome_;
};

using gateway::Prediction;

/// The engine's usage against the prediction: the engine's cached tokens are
/// the ride_engine source's saving (never the prediction), the prediction
/// scored by blocks, the prompt's length checked against the routed tokens.
void Account(Daemon& daemon, const std::string& worker, const std::string& decision_id,
             const Prediction& prediction, const std::optional<EngineUsage>& usage);

/// A request forwarded to one worker, its answer relayed from a thread of
/// the daemon's RelayThreads, which shares the relay. Destroying it
/// cancels without waiting: the thread lets the engine's connection go at
/// its next byte, or at the first-byte timeout when none comes (a decode
/// worker waiting for KV that will never arrive), and the handler that
/// gave up has already answered its client.
struct Upstream {
  std::string worker;
  std::string decision_id;
  Prediction prediction;
  std::shared_ptr<Relay> relay = std::make_shared<Relay>();

  ~Upstream() { relay->Cancel(); }
};

/// Takes the rest of `relay`'s answer into `body`: the relay's outcome, or
/// ResourceExhausted (and the relay cancelled) past kMaxWholeAnswerBytes.
Status ReadWholeBody(Relay& relay, std::string* body);

/// A streamed answer on its way to the client: each Pump passes on the
/// events that have arrived (one call of a chunked content provider),
/// keeping the usage the engine reported and leaving out the usage chunk
/// the gateway asked for itself. Thread-compatible: the provider's thread.
struct StreamPump {
  std::unique_ptr<Upstream> upstream;
  bool strip_usage = false;
  // Called once, before the first event is passed on: the engine sends its
  // first event with the first token, so the prefill is done.
  std::function<void()> on_first_event;
  SseSplitter splitter;
  std::optional<EngineUsage> usage;

  /// False when the client went away: stop reading, which closes the
  /// engine's connection so it aborts the request. Ends the sink once the
  /// answer has ended, with an error event when it broke off.
  bool Pump(httplib::DataSink& sink);
};

/// Forwards `body` to `worker`'s engine at `path` on a relay thread; the
/// answer arrives in the returned Upstream's relay. `request_id`, when not
/// empty, goes as X-Request-Id (both legs of a handoff carry one).
std::unique_ptr<Upstream> StartUpstream(const Daemon& daemon, const std::string& worker,
                                        const std::string& decision_id, const std::string& path,
                                        std::string body, std::string request_id = "");

}  // namespace kvgov::server
