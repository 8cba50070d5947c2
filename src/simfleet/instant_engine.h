#pragma once

// An engine's OpenAI server that costs nothing: for the gateway's tests and
// benchmarks where the engine must not be what is measured (thousands of
// streams open at once, requests per second). Internal to kvgov's tests.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "kvgov/core/status.h"

namespace kvgov::simfleet {

struct InstantEngineOptions {
  std::string model = "sim-model";
  // Before each token of an answer, streamed or not; 0: at once. A request
  // may set its own ("sim_token_interval_ms").
  std::chrono::milliseconds token_interval{0};
  int loops = 1;
};

/// POST /tokenize ({"model","prompt"|"messages"} -> {"tokens","count",
/// "max_model_len"}, a token per whitespace-separated word),
/// /v1/completions and /v1/chat/completions (streamed or not, `max_tokens`
/// tokens, usage with prompt_tokens as /tokenize counts), GET /health. It
/// serves on gateway::FrontDoor's event loops, so an open stream costs a
/// timer, not a thread. No KV, no events: pair it with a simulated engine
/// (LiveEngine) through the spec's `openai=` key.
///
/// Thread-safe.
class InstantEngine {
 public:
  static Result<std::unique_ptr<InstantEngine>> Start(InstantEngineOptions options);
  ~InstantEngine();
  InstantEngine(const InstantEngine&) = delete;
  InstantEngine& operator=(const InstantEngine&) = delete;

  std::string url() const;       // http://127.0.0.1:PORT
  uint64_t completions() const;  // completion requests received
  uint64_t aborted() const;      // ... whose client went away before the answer ended
  int64_t open_answers() const;  // ... being answered now

  struct Impl;

 private:
  explicit InstantEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvgov::simfleet
