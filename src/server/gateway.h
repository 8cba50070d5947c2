#pragma once

// Internal to kvgov_server: the gateway's doors into the daemon
// (docs/formats/gateway.md, docs/adr/0035), and the engines' tokenizers
// for the control API's prompts and messages.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/front_door.h"
#include "kvgov/core/status.h"

namespace kvgov::server {

struct Daemon;

/// The front door's handler (gateway::FrontDoor, a listener of its own
/// beside the control API): src/gateway's request path
/// (gateway::GatewayHandler) over the daemon's Plane, which it owns.
gateway::Handler GatewayHandler(Daemon& daemon);

/// The token ids of `prompt`, from the tokenizer of the engine of a worker
/// serving `model` (what the gateway would do for a completion). NotFound
/// when no worker with an engine URL serves the model; the engine's error
/// otherwise.
Result<std::vector<int64_t>> TokenizePrompt(Daemon& daemon, std::string_view model,
                                            std::string_view prompt);

/// The token ids of an OpenAI chat `messages` array (JSON text), through the
/// engine's chat template: the /tokenize body the gateway would send for a
/// chat completion of `model` with those messages. NotFound as
/// TokenizePrompt; InvalidArgument or ResourceExhausted when the gateway
/// would refuse that chat (not a non-empty array, past the body limits);
/// the engine's error otherwise.
Result<std::vector<int64_t>> TokenizeMessages(Daemon& daemon, std::string_view model,
                                              std::string_view messages);

/// The text of `tokens`, from the detokenizer of the engine of a worker
/// serving `model`. NotFound as TokenizePrompt; the engine's error
/// otherwise.
Result<std::string> DetokenizeOnAnEngineOf(Daemon& daemon, std::string_view model,
                                           std::span<const int64_t> tokens);

/// The token ids of an OpenAI chat completion body (JSON text, its model
/// `model`), as TokenizeMessages: its messages and the chat-template fields
/// the gateway forwards (tools among them).
Result<std::vector<int64_t>> TokenizeChat(Daemon& daemon, std::string_view model,
                                          std::string_view chat);

}  // namespace kvgov::server
