#pragma once

// The gateway's request path (docs/formats/gateway.md): GET /health, GET
// /v1/models, and POST /v1/completions, /v1/chat/completions,
// /v1/responses and /v1/messages. Each request is admitted, tokenized by
// the engine (through the loop's pooled connections), salted, routed,
// forwarded with one retry, its answer relayed as it arrives and its usage
// accounted, all on the front door's loops, a disaggregated model's
// handoff too (handoff.h). Internal to kvgov: Asio types, as front_door.h.

#include "gateway/front_door.h"
#include "gateway/plane.h"

namespace kvgov::gateway {

/// The front door's handler over `plane`, which must outlive it.
Handler GatewayHandler(Plane& plane);

}  // namespace kvgov::gateway
