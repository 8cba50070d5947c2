#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/status.h"
#include "kvgov/ingest/engine_spec.h"
#include "kvgov/sim/block_pool.h"
#include "kvgov/sim/event_wire.h"
#include "kvgov/sim/prefill_cost.h"

namespace kvgov::simfleet {

struct LiveEngineOptions {
  std::string id = "sim-0";
  // Whose interfaces it speaks: vLLM's (kvgov's spec says kind=vllm) or
  // SGLang's (kind=sglang: /v1/tokenize and /flush_cache too, and the
  // bootstrap handoff instead of NixlConnector's). The event stream is the
  // same map- or array-encoded EventBatch for both, as SGLang's publisher
  // reuses vLLM's wire. Not mooncake: a store serves no requests.
  ingest::EngineKind kind = ingest::EngineKind::kVllm;
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
  // An SGLang prefill engine's pending rooms each hold one until fetched,
  // so it takes at most http_threads - 1 at once (more answer 503).
  int http_threads = 8;
  // Wall time between generated tokens (max_tokens in a request; 0 by
  // default, as the load generator asks for none).
  std::chrono::milliseconds token_interval{2};
  // The context length (vLLM's --max-model-len, SGLang's --context-length):
  // a completion whose prompt and max_tokens do not fit in it is refused
  // with 400 in the engine's words. 131072 is the Llama-3.1-8B
  // configuration's (the Llama-3-8B shape with its longer RoPE).
  int64_t max_model_len = 131072;
  // False: the engine honours cache_salt but publishes no extra keys, as
  // vLLM did before 0.17 (docs/operations.md, "Tenant salts").
  bool publishes_extra_keys = true;

  // Prefill/decode disaggregation, as vLLM's NixlConnector does it
  // (docs/formats/simulator.md, "Disaggregated engines") or SGLang's
  // bootstrap rooms (kind sglang). A prefill engine hands a prompt over; a
  // decode engine takes one; both does either (vLLM) or neither (SGLang,
  // which without --disaggregation-mode ignores the bootstrap fields).
  ingest::EngineRole role = ingest::EngineRole::kBoth;
  // How long a prefill engine holds a handed-over prompt's blocks for the
  // decode engine to take (vLLM's kv_lease_duration, SGLang's bootstrap
  // timeout), from the end of its prefill. Wall time, not divided by
  // speedup: it is what kvgov's lease of the handoff mirrors. A decode
  // SGLang engine also waits this long for a room's prefill to appear
  // (SGLang's waiting timeout).
  std::chrono::milliseconds kv_lease{30000};
  // The modeled NIXL link (400 Gb/s RDMA): a pull of N tokens takes
  // N x KvBytesPerToken(shape) / this, divided by speedup like a prefill.
  double link_bytes_per_s = 50e9;
  // Test hook: a decode engine waits this long (wall time) before it
  // pulls (or fetches its bootstrap room), as if queued, so a test can
  // watch the pin held or let it lapse.
  std::chrono::milliseconds pull_delay{0};
};

/// One simulated vLLM (or SGLang) engine, live on loopback with vLLM's
/// interfaces, and SGLang's where they differ:
///  - a PUB socket sending [topic, seq (8 bytes BE), EventBatch payload],
///    seq from 0 in every process, and a ROUTER replay socket answering
///    [empty, start_seq] with [topic, seq, payload]... then an end marker;
///  - an HTTP server: GET /health, GET /metrics (vllm:num_requests_running,
///    vllm:num_requests_waiting, vllm:kv_cache_usage_perc),
///    POST /reset_prefix_cache (AllBlocksCleared), POST /v1/completions and
///    /v1/chat/completions taking a prompt (token ids or text) or messages,
///    "cache_salt", "max_tokens" (or a chat's "max_completion_tokens") and
///    "stream", that prefill against the block pool: each waits in a FIFO
///    queue for its modeled prefill time, generates max_tokens tokens one
///    every token_interval (as server-sent events when streamed, usage
///    last when stream_options.include_usage) and answers with vLLM's id,
///    created and OpenAI usage, cached tokens included; POST /tokenize with
///    vLLM's shapes. A body is read as vLLM's pydantic models read it (a
///    near type converted, "4" for 4; any other refused with 400 naming the
///    field, never 500), and one that does not fit in max_model_len is
///    refused with 400 in vLLM's (or SGLang's) words. The tokenizer is a
///    toy (one id per word) and the chat template fixed (a role marker
///    before each message, the assistant marker for the generation
///    prompt).
///  - vLLM's NixlConnector handoff, by role. A prefill (or both) engine
///    takes a completion with kv_transfer_params.do_remote_decode: it
///    prefills as usual, answers in one body with the kv_transfer_params a
///    decode engine needs, and pins the prompt's blocks until they are
///    pulled or kv_lease passes. A decode (or both) engine takes a
///    completion with kv_transfer_params.do_remote_prefill: it waits
///    pull_delay, pulls from the prefill engine over POST
///    /kvgov_sim/nixl_read (which stands in for NIXL's READ and its
///    notification), caches the prompt without prefilling it, waits the
///    modeled transfer and decodes; a pull that fails answers 503, as
///    vLLM's kv_load_failure_policy=fail does. Plain completions are served
///    locally by every role.
///  - kind sglang: SGLang's PD protocol instead, the one body that
///    sgl-model-gateway sends both legs at once with bootstrap_host,
///    bootstrap_port and bootstrap_room. A prefill engine registers the
///    room, prefills as usual, pins the prompt's blocks and answers (one
///    token, streamed or not) once the room's decode engine has taken
///    them, or 500 when kv_lease passes first. A decode engine waits
///    pull_delay, fetches the room from POST /kvgov_sim/bootstrap at
///    bootstrap_host:bootstrap_port (which stands in for the KV push and
///    its handshake; the sim serves it on its HTTP port), retrying every
///    10 ms while the room is unknown, for up to its own kv_lease; then
///    caches the prompt, waits the modeled transfer and decodes; a fetch
///    that fails answers 503. A body of the other kind's handoff is
///    refused (400): it was routed by the wrong protocol.
///
/// Thread-safe: HTTP handlers run concurrently; one mutex serialises the
/// pool, the queue, the pins and publishing, so seq order is pool order.
/// No handler sleeps or calls another engine while holding it (an SGLang
/// room's handlers wait on a condition variable of it, which releases it).
/// Lock order: the main mutex before the replay history's.
class LiveEngine {
 public:
  /// Binds and starts serving. IOError when a socket cannot be bound;
  /// InvalidArgument, naming the option, for one out of range (a kind of
  /// mooncake among them).
  static Result<std::unique_ptr<LiveEngine>> Start(const LiveEngineOptions& options);
  ~LiveEngine();
  LiveEngine(const LiveEngine&) = delete;
  LiveEngine& operator=(const LiveEngine&) = delete;

  const std::string& id() const;
  std::string events_endpoint() const;  // tcp://HOST:PORT
  std::string replay_endpoint() const;  // tcp://HOST:PORT
  std::string control_url() const;      // http://HOST:PORT
  /// The --engine spec with which kvgov follows and governs this engine.
  std::string EngineSpec() const;

  /// Prefills a prompt into the pool and publishes the events at once,
  /// without the modeled wait: for in-process drivers that want events at
  /// a rate of their own (the load generator). The outcome carries the
  /// events as published. Thread-safe.
  sim::PrefillOutcome Prefill(std::span<const int64_t> tokens, std::string_view cache_salt);

  /// The cache_salt of every completion received, in order ("" for none).
  std::vector<std::string> received_salts() const;
  /// The bootstrap_room of the last completion received; nullopt when it
  /// carried none (or none was received).
  std::optional<uint64_t> last_bootstrap_room() const;
  /// Streams whose client went away before their end.
  uint64_t aborted_streams() const;

  /// Blocks in the pool now, and the seq the next batch will carry.
  size_t resident_blocks() const;
  uint64_t next_seq() const;

  /// Prefill side: handed-over prompts pulled by a decode engine (kind
  /// sglang: bootstrap rooms fetched, i.e. pushes done).
  uint64_t pulls() const;
  /// Decode side: pulls that failed (the prompt unknown, already pulled,
  /// its pin lapsed, or the prefill engine unreachable), answered 503
  /// (kind sglang: bootstrap fetches that failed, the room never prefilled
  /// within kv_lease included).
  uint64_t failed_pulls() const;
  /// Prefill side: blocks pinned for a decode engine now, after freeing
  /// the pins whose lease has passed.
  size_t pinned_blocks() const;

  /// Stops serving and joins every thread. Idempotent.
  void Stop();

 private:
  struct Impl;
  explicit LiveEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgov::simfleet
