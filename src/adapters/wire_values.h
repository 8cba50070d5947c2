#pragma once

// Strict readers for the scalar and list values of engine events, shared by
// the vLLM/SGLang and Mooncake schemas so each rule is written once. Every
// reader names the field in its error: `where` is the path of the value
// ("events[2].block_hashes"), and list readers add the index.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <msgpack.hpp>

#include "kvgov/core/engine_events.h"
#include "kvgov/core/status.h"
#include "kvgov/core/utf8.h"

namespace kvgov::adapters::internal {

/// kInvalidArgument "<where>: want <want>, got <type of object>".
Status WrongType(std::string_view where, std::string_view want, const msgpack::object& object);

/// kInvalidArgument "<where>: missing".
Status Missing(std::string_view where);

/// True for an absent field (nullptr) or an explicit nil: both mean "not set".
inline bool IsUnset(const msgpack::object* object) {
  return object == nullptr || object->type == msgpack::type::NIL;
}

/// An engine hash: a non-negative int as is, a negative int by its
/// two's-complement bits, a non-empty bin by its last 8 bytes big-endian
/// (left-padded with zeros when shorter).
Result<EngineHash> ReadHash(const msgpack::object& object, std::string_view where);

/// An engine hash of bytes: the last 8, big-endian, left-padded with zeros
/// when shorter. REQUIRES: `bytes` not empty (an empty digest names nothing).
EngineHash HashOfBytes(std::string_view bytes);

/// Appends a bin's canonical JSON, {"bin":"<lowercase hex>"}.
void AppendBinJson(std::string_view bytes, std::string& out);

/// An array of engine hashes.
Result<std::vector<EngineHash>> ReadHashList(const msgpack::object& object, std::string_view where);

/// An int that fits int64.
Result<int64_t> ReadInt64(const msgpack::object& object, std::string_view where);

/// An array of token ids, each an int in 0..kvgov::kMaxTokenId; or SGLang's EAGLE
/// bigrams, an array of [token, next token] pairs (every element a pair when
/// the first is), read as the pairs' first tokens. An id out of range is
/// refused naming its element ("events[0].token_ids[3]").
Result<std::vector<int64_t>> ReadTokenIds(const msgpack::object& object, std::string_view where);

/// A str holding valid UTF-8.
Result<std::string> ReadString(const msgpack::object& object, std::string_view where);

/// A str, or "" when unset.
Result<std::string> ReadOptionalString(const msgpack::object* object, std::string_view where);

/// An int64, or std::nullopt when unset.
Result<std::optional<int64_t>> ReadOptionalInt64(const msgpack::object* object,
                                                 std::string_view where);

/// A timestamp: a finite float or an int, as a double.
Result<double> ReadNumber(const msgpack::object& object, std::string_view where);

/// The canonical JSON text of a msgpack value, the form extra keys are
/// compared in: arrays as arrays, str as JSON strings, ints as numbers, bool,
/// nil as null, bin as {"bin":"<lowercase hex>"}, maps as objects with str
/// keys sorted by their UTF-8 bytes, no whitespace. Floats and ext have no
/// canonical form here and are refused, as are invalid UTF-8, non-str map
/// keys and repeated keys.
Result<std::string> CanonicalJson(const msgpack::object& object, std::string_view where);

/// Appends `text` as a JSON string literal (quotes and escapes included).
/// REQUIRES: `text` is valid UTF-8.
void AppendJsonString(std::string_view text, std::string& out);

/// An engine that reports the salt and LoRA beside the hashes (SGLang)
/// rather than in extra_keys hashed them all the same: they enter the
/// record's extra keys exactly as vLLM's do (FirstBlockExtraKey), the salt
/// on a chain's first block only. A record with extra keys keeps them.
void AddReportedExtraKeys(BlockStored& stored, std::string_view cache_salt);

using kvgov::IsValidUtf8;

}  // namespace kvgov::adapters::internal
