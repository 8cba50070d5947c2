#pragma once

// Internal to kvgov_server: the engine of a worker, and the accounting of
// what an engine reported against kvgov's prediction (the gateway's Plane,
// gateway.cc; the control API).

#include <optional>
#include <string>
#include <string_view>

#include "gateway/plane.h"
#include "kvgov/codec/gateway_api.h"
#include "kvgov/core/status.h"
#include "kvgov/ingest/engine_spec.h"
#include "kvgov/router/router.h"

namespace kvgov::server {

struct Daemon;

/// The engine a worker ("id" or "id@dp_rank") belongs to; null for a worker
/// no --engine names (one that only reports over HTTP).
const ingest::EngineSpec* EngineOf(const Daemon& daemon, std::string_view worker);

using router::IneligibleReasons;

/// The engine URL the gateway forwards to; "" for a worker without one.
std::string OpenAIUrl(const ingest::EngineSpec& engine);
std::string OpenAIUrl(const Daemon& daemon, std::string_view worker);

using gateway::Prediction;

/// The engine's usage against the prediction: the engine's cached tokens are
/// the ride_engine source's saving (never the prediction), the prediction
/// scored by blocks, the prompt's length checked against the routed tokens.
void Account(Daemon& daemon, const std::string& worker, const std::string& decision_id,
             const Prediction& prediction, const std::optional<EngineUsage>& usage);

}  // namespace kvgov::server
