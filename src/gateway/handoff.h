#pragma once

// The I/O of the gateway's disaggregated path, on the front door's loop: a
// request prefilled on one worker and decoded on another, with the lease
// of the handoff witnessed by kvgov itself (docs/formats/gateway.md,
// "Prefill/decode disaggregation"; docs/adr/0021). What happens next is
// HandoffRules' to decide (docs/adr/0035); this performs it. Internal to
// kvgov: Asio types, as front_door.h.

#include <utility>  // before Asio: see front_door.h

#include <boost/asio/awaitable.hpp>

#include "gateway/front_door.h"
#include "gateway/plane.h"

namespace kvgov::gateway {

/// Serves `request` in two steps and answers the client: the prefill worker
/// chosen by overlap and load computes the prompt and pins its KV; the
/// decode worker chosen by load and its own overlap takes the pin and
/// streams the answer. While the decode worker has not sent its first
/// token, the pin is looked at every kWithdrawalCheck: a lease that ends
/// or a span governance withdraws fails the handoff and closes the decode
/// request, so the engine aborts it. A client that goes away closes both
/// legs at once. Answers in OpenAI's shapes (completions and chat).
asio::awaitable<void> ServeHandoff(Plane& plane, Exchange& exchange, HandoffRequest request);

}  // namespace kvgov::gateway
