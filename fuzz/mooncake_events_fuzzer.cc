// DecodeMooncakeEvents: one Mooncake store event payload (a batch, a single
// event map or a list of them). Same checks as engine_batch_fuzzer, under
// Mooncake's schema: its stores may omit tokens and the block size, and
// always carry the tenant namespace in the first block's extra key.

#include <cstddef>
#include <cstdint>

#include "engine_events_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvgov::fuzz::CheckDecoder(kvgov::adapters::DecodeMooncakeEvents, kvgov::fuzz::AsText(data, size),
                            kvgov::fuzz::EngineSchema::kMooncake);
  return 0;
}
