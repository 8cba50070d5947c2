#pragma once

// Binding a cpp-httplib server the way every kvgov listener (and the
// simulated engines) does.

#include <cstdint>
#include <string>

#include "kvgov/core/status.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace kvgov::server {

/// Binds `http` to host:port (0: a free port) and returns the bound port;
/// the caller then runs `http.listen_after_bind()`.
///
/// - SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which
///   would let a second process bind the same port and silently take half
///   the traffic.
/// - The accept queue is widened to SOMAXCONN: cpp-httplib 0.11 listens
///   with a backlog of 5, so a burst of more concurrent connects than that
///   overflowed the queue and the kernel reset the connections it dropped
///   (clients saw a read error with no answer).
///
/// IOError when the address is in use or not available.
Result<uint16_t> BindListener(httplib::Server& http, const std::string& host, uint16_t port);

}  // namespace kvgov::server
