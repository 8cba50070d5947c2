#pragma once

// The one place untrusted msgpack bytes become msgpack objects. Internal to
// kvgov_adapters: msgpack types never leave src/adapters.

#include <string_view>

#include <msgpack.hpp>

#include "kvgov/adapters/engine_wire.h"
#include "kvgov/core/status.h"

namespace kvgov::adapters::internal {

/// Parses exactly one msgpack value from `payload` under `limits`. The
/// returned objects may point into `payload`, which must outlive the handle.
///
/// A first, allocation-free pass checks every size and the nesting depth
/// and that the bytes are one complete value; only then does the real unpack
/// run, so it allocates at most a small multiple of the payload size. Never
/// throws.
///
/// Returns kResourceExhausted when a limit is exceeded, kCorruption for bytes
/// that are not one complete msgpack value (including trailing bytes).
Result<msgpack::object_handle> UnpackUntrusted(std::string_view payload,
                                               const MsgpackLimits& limits);

/// "nil", "bool", "int", "float", "str", "bin", "array", "map" or "ext": the
/// wire type as error messages name it.
std::string_view TypeName(const msgpack::object& object);

/// The object's bytes when it is a str or bin, else empty.
inline std::string_view Bytes(const msgpack::object& object) {
  if (object.type == msgpack::type::STR) return {object.via.str.ptr, object.via.str.size};
  if (object.type == msgpack::type::BIN) return {object.via.bin.ptr, object.via.bin.size};
  return {};
}

}  // namespace kvgov::adapters::internal
