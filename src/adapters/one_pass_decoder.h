#pragma once

// The two decoders behind DecodeEngineBatch (docs/adr/0025). Internal to
// kvgov_adapters; the fuzzers and tests hold them to each other.

#include <optional>
#include <string_view>

#include "kvgov/adapters/engine_wire.h"
#include "kvgov/core/engine_events.h"
#include "kvgov/core/status.h"

namespace kvgov::adapters::internal {

/// The batch, decoded in one pass over the bytes straight into the records,
/// every limit checked as it is read. Handles the forms engines publish
/// (both encodings at both levels, BlockStored / BlockRemoved /
/// AllBlocksCleared, unknown fields and event types, salts, extra keys);
/// std::nullopt for anything else, malformed or refused included, which
/// DecodeEngineBatch then decodes on the object path, the one that names
/// errors. Sound by construction and by fuzzing: whatever it returns, the
/// object path returns too. Never throws.
std::optional<EngineEventBatch> DecodeEngineBatchInOnePass(std::string_view payload,
                                                           const MsgpackLimits& limits);

/// The object path alone: a limits walk over the bytes, msgpack-c's object
/// unpack, then the schema over the objects.
Result<EngineEventBatch> DecodeEngineBatchByObjects(std::string_view payload,
                                                    const MsgpackLimits& limits);

}  // namespace kvgov::adapters::internal
