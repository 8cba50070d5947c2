#pragma once

// Internal to kvgov_simfleet: JSON over HTTP for the simulator's gateway
// and demo, errors naming the call.

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <string>

#include "kvgov/core/status.h"

namespace kvgov::simfleet {

/// Sets a client up for many small requests: the connection kept alive,
/// and TCP_NODELAY, without which a request's body waits for the delayed
/// ACK of its headers (about 40 ms per call on Linux).
void TuneForRequests(httplib::Client& client);

/// POSTs `body` (with `headers`) and parses the answer, which must be a
/// JSON object with a 2xx status; otherwise Unavailable naming `what`, the
/// status and the start of the body.
Result<nlohmann::json> PostJson(httplib::Client& client, const std::string& what,
                                const std::string& path, const nlohmann::json& body,
                                const httplib::Headers& headers = {});

/// GETs `path`, with the same rules.
Result<nlohmann::json> GetJson(httplib::Client& client, const std::string& path);

}  // namespace kvgov::simfleet
