#pragma once

// Cache breakers in the routed traffic (docs/formats/prefix-diagnostics.md):
// the gateway and /v1/route feed each prompt to the daemon's detector;
// GET /v1/diagnostics/prefix reports what it found, and POST
// /v1/lint/prompt checks requests given against the rules, no traffic needed.

#include <cstdint>
#include <span>
#include <string_view>

namespace httplib {
class Server;
}  // namespace httplib

namespace kvgov::server {

struct Daemon;

/// Compares one routed prompt with the recent prompts of its family: counts
/// the tokens its finding makes the engine recompute, and logs a finding
/// the first time it is seen. Nothing when detection is off.
void ObservePrompt(Daemon& daemon, std::string_view model, std::string_view tenant,
                   std::span<const int64_t> tokens);

void RegisterPrefixDiagnosticsApi(httplib::Server& http, Daemon& daemon);

}  // namespace kvgov::server
