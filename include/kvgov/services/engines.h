#pragma once

// The engines `--engine` names, as the routes, the gateway's plane and the
// handoffs look them up, and their tokenizers for the control API's
// prompts and messages.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/codec/ingest_batch.h"
#include "kvgov/core/status.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/ingest/engine_spec.h"

namespace kvgov::connectors {
class UpstreamConnections;
}  // namespace kvgov::connectors

namespace kvgov::services {

/// The engine URL the gateway forwards to; "" for an engine without one.
std::string OpenAIUrl(const ingest::EngineSpec& engine);

/// The configured engines, and the tokenizers of those serving a model.
///
/// Thread-safe: the engine list is fixed at construction, and the index and
/// the connections each are.
class Engines {
 public:
  /// Every collaborator must outlive the engines; `body_limits` bounds the
  /// chat bodies TokenizeChat decodes (the control API's).
  Engines(std::vector<ingest::EngineSpec> specs, const index::ResidencyIndex* index,
          connectors::UpstreamConnections* upstreams, JsonLimits body_limits)
      : specs_(std::move(specs)), index_(index), upstreams_(upstreams), body_limits_(body_limits) {}

  /// The engine a worker ("id" or "id@dp_rank") belongs to; null for a
  /// worker no --engine names (one that only reports over HTTP).
  const ingest::EngineSpec* Of(std::string_view worker) const;

  /// OpenAIUrl of the worker's engine; "" for a worker without one.
  std::string OpenAIUrlOf(std::string_view worker) const;

  /// The worker's engine role (both for a worker no --engine names).
  ingest::EngineRole RoleOf(std::string_view worker) const;

  /// True when one of `serving` has a role other than both: the model is
  /// then served in two steps.
  bool ServedDisaggregated(const std::vector<std::string>& serving) const;

  /// The token ids of `prompt`, from the tokenizer of the engine of a
  /// worker serving `model` (what the gateway would do for a completion);
  /// a second engine is asked only when the first cannot be reached.
  /// NotFound when no worker with an engine URL serves the model; the
  /// engine's error otherwise.
  Result<std::vector<int64_t>> TokenizePrompt(std::string_view model,
                                              std::string_view prompt) const;

  /// The token ids of an OpenAI chat `messages` array (JSON text), through
  /// the engine's chat template: the /tokenize body the gateway would send
  /// for a chat completion of `model` with those messages. NotFound as
  /// TokenizePrompt; InvalidArgument or ResourceExhausted when the gateway
  /// would refuse that chat (not a non-empty array, past the body limits);
  /// the engine's error otherwise.
  Result<std::vector<int64_t>> TokenizeMessages(std::string_view model,
                                                std::string_view messages) const;

  /// The token ids of an OpenAI chat completion body (JSON text, its model
  /// `model`), as TokenizeMessages: its messages and the chat-template
  /// fields the gateway forwards (tools among them).
  Result<std::vector<int64_t>> TokenizeChat(std::string_view model, std::string_view chat) const;

  /// The text of `tokens`, from the detokenizer of the engine of a worker
  /// serving `model`. NotFound as TokenizePrompt; the engine's error
  /// otherwise.
  Result<std::string> Detokenize(std::string_view model, std::span<const int64_t> tokens) const;

 private:
  // `call(engine)` on the engine of a worker serving `model`, as
  // TokenizePrompt says.
  template <typename T, typename Call>
  Result<T> OnAnEngineOf(std::string_view model, Call call) const;

  const std::vector<ingest::EngineSpec> specs_;
  const index::ResidencyIndex* const index_;
  connectors::UpstreamConnections* const upstreams_;
  const JsonLimits body_limits_;
};

}  // namespace kvgov::services
