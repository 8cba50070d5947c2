#pragma once

// The publishing side of the engine wire: what a simulated vLLM engine puts
// in a payload frame. The inverse of kvgov::adapters::DecodeEngineBatch for
// the forms vLLM publishes (docs/formats/engine-events.md §2).

#include <string>

#include "kvgov/core/engine_events.h"
#include "kvgov/core/status.h"

namespace kvgov::sim {

enum class WireEncoding {
  kMap,               // vLLM >= 0.26: positional batch, events as maps tagged by "type"
  kLegacyPositional,  // vLLM <= 0.23: every event [tag, fields...], trailing defaults omitted
};

/// Encodes one EventBatch as vLLM would. `extra_keys` entries are canonical
/// JSON texts (engine-events.md §4) and go back on the wire as the msgpack
/// values they stand for; "" becomes nil. InvalidArgument names an entry
/// that is not canonical JSON of an array of strings, integers, booleans,
/// nulls and arrays (the forms vLLM sends).
Result<std::string> EncodeEventBatch(const EngineEventBatch& batch, WireEncoding encoding);

}  // namespace kvgov::sim
