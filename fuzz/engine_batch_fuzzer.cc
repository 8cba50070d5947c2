// DecodeEngineBatch: one vLLM or SGLang EventBatch payload, as it arrives in
// the last frame of a ZMQ message. The bytes are the engine's and untrusted.
// Checked: no crash, leak or exception (the sanitizers and libFuzzer); only
// the documented error codes; every returned batch keeps the schema's
// invariants (fuzz/engine_events_check.h); and limits only ever refuse.

#include <cstddef>
#include <cstdint>

#include "engine_events_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvgov::fuzz::CheckDecoder(kvgov::adapters::DecodeEngineBatch, kvgov::fuzz::AsText(data, size),
                            kvgov::fuzz::EngineSchema::kVllm);
  return 0;
}
