#pragma once

// An engine's event stream passed on to the client event by event: the
// one relay of the request path and of the handoff's decode leg.

#include <utility>  // before Asio: see front_door.h

#include <boost/asio/awaitable.hpp>

#include <functional>
#include <string>
#include <string_view>

#include "gateway/front_door.h"
#include "gateway/plane.h"
#include "gateway/upstream_pool.h"
#include "kvgov/core/status.h"

namespace kvgov::gateway {

/// Called with each complete event's data, in order: false drops the event
/// (the usage chunk the gateway asked for itself).
using EventFilter = std::function<bool(std::string_view data)>;

struct RelayEnd {
  bool client_gone = false;  // a write to the client failed: the call is aborted
  Status upstream;           // how the engine's body ended: ok when read to its end
};

/// Relays the body of `call` to a client whose stream has started, from
/// `first_piece` (read already; may be empty) on: each event `keep` keeps
/// is written before the next piece is read, so a slow client slows the
/// engine's connection instead of growing kvgov's memory; the unterminated
/// rest follows once the body ends. `after_first_write` runs once the
/// first event has reached the client (the prefill is done then; what it
/// settles is off the first token's path). Counts the bytes relayed. The
/// caller writes the end of the stream, or an error event before it.
asio::awaitable<RelayEnd> RelayEvents(Exchange& exchange, UpstreamCall& call,
                                      std::string first_piece, const EventFilter& keep,
                                      const std::function<void()>& after_first_write, Plane& plane);

}  // namespace kvgov::gateway
