#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/status.h"
#include "kvgov/sim/block_pool.h"
#include "kvgov/sim/event_wire.h"
#include "kvgov/sim/prefill_cost.h"

namespace kvgov::simfleet {

struct LiveEngineOptions {
  std::string id = "sim-0";
  std::string host = "127.0.0.1";  // every socket binds here, on a free port
  std::string model = "sim-model";
  sim::BlockPoolOptions pool;
  sim::ModelShape shape = sim::ModelShape::kLlama3_8B;
  sim::WireEncoding encoding = sim::WireEncoding::kMap;
  // Modeled prefill time is divided by this before a completion waits it
  // out, so a demo runs faster than the GPU it models; reported times are
  // the modeled ones.
  double speedup = 1.0;
  size_t replay_batches = 10000;  // vLLM's buffer_steps
  int http_threads = 8;
  // Wall time between generated tokens (max_tokens in a request; 0 by
  // default, as the load generator asks for none).
  std::chrono::milliseconds token_interval{2};
  // False: the engine honours cache_salt but publishes no extra keys, as
  // vLLM did before 0.17 (docs/operations.md, "Tenant salts").
  bool publishes_extra_keys = true;
};

/// One simulated vLLM engine, live on loopback with vLLM's interfaces:
///  - a PUB socket sending [topic, seq (8 bytes BE), EventBatch payload],
///    seq from 0 in every process, and a ROUTER replay socket answering
///    [empty, start_seq] with [topic, seq, payload]... then an end marker;
///  - an HTTP server: GET /health, GET /metrics (vllm:num_requests_running,
///    vllm:num_requests_waiting, vllm:kv_cache_usage_perc),
///    POST /reset_prefix_cache (AllBlocksCleared), POST /v1/completions and
///    /v1/chat/completions taking a prompt (token ids or text) or messages,
///    "cache_salt", "max_tokens" and "stream", that prefill against the
///    block pool: each waits in a FIFO queue for its modeled prefill time,
///    generates max_tokens tokens one every token_interval (as server-sent
///    events when streamed, usage last when stream_options.include_usage)
///    and answers with OpenAI usage, cached tokens included; POST
///    /tokenize with vLLM's shapes. The tokenizer is a toy (one id per
///    word) and the chat template fixed (a role marker before each
///    message, the assistant marker for the generation prompt).
///
/// Thread-safe: HTTP handlers run concurrently; one mutex serialises the
/// pool, the queue and publishing, so seq order is pool order.
class LiveEngine {
 public:
  /// Binds and starts serving. IOError when a socket cannot be bound.
  static Result<std::unique_ptr<LiveEngine>> Start(const LiveEngineOptions& options);
  ~LiveEngine();
  LiveEngine(const LiveEngine&) = delete;
  LiveEngine& operator=(const LiveEngine&) = delete;

  const std::string& id() const;
  std::string events_endpoint() const;   // tcp://HOST:PORT
  std::string replay_endpoint() const;   // tcp://HOST:PORT
  std::string control_url() const;       // http://HOST:PORT
  /// The --engine spec with which kvgov follows and governs this engine.
  std::string EngineSpec() const;

  /// Prefills a prompt into the pool and publishes the events at once,
  /// without the modeled wait: for in-process drivers that want events at
  /// a rate of their own (the load generator). The outcome carries the
  /// events as published. Thread-safe.
  sim::PrefillOutcome Prefill(std::span<const int64_t> tokens, std::string_view cache_salt);

  /// The cache_salt of every completion received, in order ("" for none).
  std::vector<std::string> received_salts() const;
  /// Streams whose client went away before their end.
  uint64_t aborted_streams() const;

  /// Blocks in the pool now, and the seq the next batch will carry.
  size_t resident_blocks() const;
  uint64_t next_seq() const;

  /// Stops serving and joins every thread. Idempotent.
  void Stop();

 private:
  struct Impl;
  explicit LiveEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgov::simfleet
