#include "kvgov/services/engines.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "kvgov/codec/gateway_api.h"
#include "kvgov/connectors/openai_upstream.h"

namespace kvgov::services {
namespace {

Status NoEngineFor(std::string_view model) {
  return Status::NotFound("model: no worker with an engine URL serves '" + std::string(model) +
                          "'");
}

std::string JsonText(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string OpenAIUrl(const ingest::EngineSpec& engine) {
  return engine.openai.empty() ? engine.control : engine.openai;
}

const ingest::EngineSpec* Engines::Of(std::string_view worker) const {
  const std::string_view engine_id = worker.substr(0, worker.find('@'));
  for (const ingest::EngineSpec& engine : specs_) {
    if (engine.id == engine_id) return &engine;
  }
  return nullptr;
}

std::string Engines::OpenAIUrlOf(std::string_view worker) const {
  const ingest::EngineSpec* engine = Of(worker);
  return engine == nullptr ? "" : OpenAIUrl(*engine);
}

ingest::EngineRole Engines::RoleOf(std::string_view worker) const {
  const ingest::EngineSpec* engine = Of(worker);
  return engine == nullptr ? ingest::EngineRole::kBoth : engine->role;
}

bool Engines::ServedDisaggregated(const std::vector<std::string>& serving) const {
  return std::any_of(serving.begin(), serving.end(), [&](const std::string& worker) {
    return RoleOf(worker) != ingest::EngineRole::kBoth;
  });
}

template <typename T, typename Call>
Result<T> Engines::OnAnEngineOf(std::string_view model, Call call) const {
  Result<T> answer = NoEngineFor(model);
  for (const index::WorkerResidency& worker : index_->Workers()) {
    const ingest::EngineSpec* engine = worker.model == model ? Of(worker.id) : nullptr;
    if (engine == nullptr || OpenAIUrl(*engine).empty()) continue;
    answer = call(*engine);
    if (answer.ok() || answer.status().code() != StatusCode::kUnavailable) break;
  }
  return answer;
}

Result<std::vector<int64_t>> Engines::TokenizePrompt(std::string_view model,
                                                     std::string_view prompt) const {
  const std::string body = JsonText({{"model", model}, {"prompt", prompt}});
  return OnAnEngineOf<std::vector<int64_t>>(model, [&](const ingest::EngineSpec& engine) {
    return upstreams_->Tokenize(OpenAIUrl(engine), engine.kind, body);
  });
}

Result<std::vector<int64_t>> Engines::TokenizeMessages(std::string_view model,
                                                       std::string_view messages) const {
  // No worker serves "": NotFound, as for a prompt, not the gateway
  // decoder's refusal of an empty model.
  if (model.empty()) return NoEngineFor(model);
  // The chat completion these messages would be, decoded as the gateway
  // decodes one, so the engine gets the very /tokenize body (chat template
  // and generation prompt included) a gateway request would.
  const std::string chat =
      "{\"model\":" + JsonText(model) + ",\"messages\":" + std::string(messages) + "}";
  return TokenizeChat(model, chat);
}

Result<std::vector<int64_t>> Engines::TokenizeChat(std::string_view model,
                                                   std::string_view chat) const {
  if (model.empty()) return NoEngineFor(model);
  KVGOV_ASSIGN_OR_RETURN(
      const GatewayRequest request,
      DecodeGatewayRequestJson(GatewayEndpoint::kChatCompletions, chat, body_limits_));
  return OnAnEngineOf<std::vector<int64_t>>(model, [&](const ingest::EngineSpec& engine) {
    return upstreams_->Tokenize(OpenAIUrl(engine), engine.kind, request.tokenize_body);
  });
}

Result<std::string> Engines::Detokenize(std::string_view model,
                                        std::span<const int64_t> tokens) const {
  const std::string body = JsonText({{"model", model}, {"tokens", tokens}});
  return OnAnEngineOf<std::string>(model, [&](const ingest::EngineSpec& engine) {
    return upstreams_->Detokenize(OpenAIUrl(engine), engine.kind, body);
  });
}

}  // namespace kvgov::services
