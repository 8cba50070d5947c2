#include "adapters/wire_values.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <utility>

#include "adapters/msgpack_input.h"
#include "kvgov/core/hex.h"
#include "kvgov/core/json_string.h"

namespace kvgov::adapters::internal {
namespace {

std::string Indexed(std::string_view where, size_t index) {
  std::string out(where);
  out += '[';
  out += std::to_string(index);
  out += ']';
  return out;
}

Status AppendCanonical(const msgpack::object& object, std::string_view where, std::string& out) {
  switch (object.type) {
    case msgpack::type::NIL:
      out += "null";
      return Status::Ok();
    case msgpack::type::BOOLEAN:
      out += object.via.boolean ? "true" : "false";
      return Status::Ok();
    case msgpack::type::POSITIVE_INTEGER:
      out += std::to_string(object.via.u64);
      return Status::Ok();
    case msgpack::type::NEGATIVE_INTEGER:
      out += std::to_string(object.via.i64);
      return Status::Ok();
    case msgpack::type::STR: {
      std::string_view text = Bytes(object);
      if (!IsValidUtf8(text))
        return Status::InvalidArgument(std::string(where) + ": invalid UTF-8");
      AppendJsonString(text, out);
      return Status::Ok();
    }
    case msgpack::type::BIN:
      AppendBinJson(Bytes(object), out);
      return Status::Ok();
    case msgpack::type::ARRAY: {
      out += '[';
      for (uint32_t i = 0; i < object.via.array.size; ++i) {
        if (i > 0) out += ',';
        KVGOV_RETURN_IF_ERROR(AppendCanonical(object.via.array.ptr[i], Indexed(where, i), out));
      }
      out += ']';
      return Status::Ok();
    }
    case msgpack::type::MAP: {
      // JSON object keys are strings, and a canonical form needs one order:
      // sort by the keys' bytes and refuse repeats rather than pick one.
      std::vector<const msgpack::object_kv*> pairs;
      pairs.reserve(object.via.map.size);
      for (uint32_t i = 0; i < object.via.map.size; ++i) {
        const msgpack::object_kv& kv = object.via.map.ptr[i];
        if (kv.key.type != msgpack::type::STR) {
          return WrongType(std::string(where) + " key", "str", kv.key);
        }
        if (!IsValidUtf8(Bytes(kv.key))) {
          return Status::InvalidArgument(std::string(where) + " key: invalid UTF-8");
        }
        pairs.push_back(&kv);
      }
      std::sort(pairs.begin(), pairs.end(),
                [](const msgpack::object_kv* a, const msgpack::object_kv* b) {
                  return Bytes(a->key) < Bytes(b->key);
                });
      out += '{';
      for (size_t i = 0; i < pairs.size(); ++i) {
        std::string_view key = Bytes(pairs[i]->key);
        if (i > 0) {
          if (key == Bytes(pairs[i - 1]->key)) {
            return Status::InvalidArgument(std::string(where) + "." + std::string(key) +
                                           ": duplicate key");
          }
          out += ',';
        }
        AppendJsonString(key, out);
        out += ':';
        KVGOV_RETURN_IF_ERROR(
            AppendCanonical(pairs[i]->val, std::string(where) + "." + std::string(key), out));
      }
      out += '}';
      return Status::Ok();
    }
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
    case msgpack::type::EXT:
      break;
  }
  return WrongType(where, "nil, bool, int, str, bin, array or map", object);
}

}  // namespace

EngineHash HashOfBytes(std::string_view bytes) {
  if (bytes.size() > 8) bytes.remove_prefix(bytes.size() - 8);
  EngineHash hash = 0;
  for (unsigned char byte : bytes) hash = (hash << 8) | byte;
  return hash;
}

void AppendBinJson(std::string_view bytes, std::string& out) {
  out += "{\"bin\":\"";
  AppendHex(bytes, out);
  out += "\"}";
}

Status WrongType(std::string_view where, std::string_view want, const msgpack::object& object) {
  std::string msg(where);
  msg += ": want ";
  msg += want;
  msg += ", got ";
  msg += TypeName(object);
  return Status::InvalidArgument(std::move(msg));
}

Status Missing(std::string_view where) {
  return Status::InvalidArgument(std::string(where) + ": missing");
}

Result<EngineHash> ReadHash(const msgpack::object& object, std::string_view where) {
  switch (object.type) {
    case msgpack::type::POSITIVE_INTEGER:
      return EngineHash{object.via.u64};
    case msgpack::type::NEGATIVE_INTEGER:
      // SGLang publishes the first 16 hex digits of a SHA-256 as a signed
      // int64; its bits are the hash.
      return static_cast<EngineHash>(object.via.i64);
    case msgpack::type::BIN: {
      std::string_view bytes = Bytes(object);
      // An empty digest identifies nothing; mapping it to 0 would make every
      // such block the same block.
      if (bytes.empty()) return Status::InvalidArgument(std::string(where) + ": empty bin hash");
      return HashOfBytes(bytes);
    }
    default:
      return WrongType(where, "int or bin", object);
  }
}

Result<std::vector<EngineHash>> ReadHashList(const msgpack::object& object,
                                             std::string_view where) {
  if (object.type != msgpack::type::ARRAY) return WrongType(where, "array", object);
  std::vector<EngineHash> hashes;
  hashes.reserve(object.via.array.size);
  for (uint32_t i = 0; i < object.via.array.size; ++i) {
    const msgpack::object& element = object.via.array.ptr[i];
    // Fast path for the common case; errors build the indexed path lazily.
    if (element.type == msgpack::type::POSITIVE_INTEGER) {
      hashes.push_back(element.via.u64);
      continue;
    }
    KVGOV_ASSIGN_OR_RETURN(EngineHash hash, ReadHash(element, Indexed(where, i)));
    hashes.push_back(hash);
  }
  return hashes;
}

Result<int64_t> ReadInt64(const msgpack::object& object, std::string_view where) {
  if (object.type == msgpack::type::NEGATIVE_INTEGER) return int64_t{object.via.i64};
  if (object.type == msgpack::type::POSITIVE_INTEGER) {
    if (object.via.u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::InvalidArgument(std::string(where) + ": int " +
                                     std::to_string(object.via.u64) + " does not fit int64");
    }
    return static_cast<int64_t>(object.via.u64);
  }
  return WrongType(where, "int", object);
}

namespace {

bool IsTokenId(const msgpack::object& token) {
  return token.type == msgpack::type::POSITIVE_INTEGER &&
         token.via.u64 <= static_cast<uint64_t>(kMaxTokenId);
}

Status NotATokenId(const msgpack::object& token, const std::string& where) {
  const std::string want = "want a token id in 0.." + std::to_string(kMaxTokenId) + ", got ";
  if (token.type == msgpack::type::NEGATIVE_INTEGER) {
    return Status::InvalidArgument(where + ": " + want + std::to_string(token.via.i64));
  }
  if (token.type == msgpack::type::POSITIVE_INTEGER) {
    return Status::InvalidArgument(where + ": " + want + std::to_string(token.via.u64));
  }
  return WrongType(where, "int", token);
}

}  // namespace

Result<std::vector<int64_t>> ReadTokenIds(const msgpack::object& object, std::string_view where) {
  if (object.type != msgpack::type::ARRAY) return WrongType(where, "array", object);
  const std::span<const msgpack::object> elements(object.via.array.ptr, object.via.array.size);
  const bool bigrams = !elements.empty() && elements[0].type == msgpack::type::ARRAY;
  std::vector<int64_t> tokens;
  tokens.reserve(elements.size());
  for (size_t i = 0; i < elements.size(); ++i) {
    const msgpack::object* token = &elements[i];
    if (bigrams) {
      // SGLang's EAGLE mode: position i is [token i, token i + 1]; the
      // position's own token is the first.
      if (token->type != msgpack::type::ARRAY || token->via.array.size != 2) {
        return WrongType(Indexed(where, i), "[token, next token] like element 0", *token);
      }
      if (!IsTokenId(token->via.array.ptr[1])) {
        return NotATokenId(token->via.array.ptr[1], Indexed(where, i) + "[1]");
      }
      token = &token->via.array.ptr[0];
    }
    if (!IsTokenId(*token)) {
      return NotATokenId(*token, bigrams ? Indexed(where, i) + "[0]" : Indexed(where, i));
    }
    tokens.push_back(static_cast<int64_t>(token->via.u64));
  }
  return tokens;
}

Result<std::string> ReadString(const msgpack::object& object, std::string_view where) {
  if (object.type != msgpack::type::STR) return WrongType(where, "str", object);
  std::string_view text = Bytes(object);
  if (!IsValidUtf8(text)) return Status::InvalidArgument(std::string(where) + ": invalid UTF-8");
  return std::string(text);
}

Result<std::string> ReadOptionalString(const msgpack::object* object, std::string_view where) {
  if (IsUnset(object)) return std::string();
  if (object->type != msgpack::type::STR) return WrongType(where, "str or nil", *object);
  return ReadString(*object, where);
}

Result<std::optional<int64_t>> ReadOptionalInt64(const msgpack::object* object,
                                                 std::string_view where) {
  if (IsUnset(object)) return std::optional<int64_t>();
  if (object->type != msgpack::type::POSITIVE_INTEGER &&
      object->type != msgpack::type::NEGATIVE_INTEGER) {
    return WrongType(where, "int or nil", *object);
  }
  KVGOV_ASSIGN_OR_RETURN(int64_t value, ReadInt64(*object, where));
  return std::optional<int64_t>(value);
}

Result<double> ReadNumber(const msgpack::object& object, std::string_view where) {
  switch (object.type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      // A stream tells a redelivery from an engine restart by comparing
      // batch timestamps: a NaN compares false to everything (every
      // redelivery would look like a restart and clear the worker) and an
      // infinity above everything (no restart would ever be seen again).
      if (!std::isfinite(object.via.f64)) {
        return Status::InvalidArgument(std::string(where) + ": want a finite number, got " +
                                       (std::isnan(object.via.f64) ? "nan"
                                        : object.via.f64 > 0       ? "inf"
                                                                   : "-inf"));
      }
      return object.via.f64;
    case msgpack::type::POSITIVE_INTEGER:
      return static_cast<double>(object.via.u64);
    case msgpack::type::NEGATIVE_INTEGER:
      return static_cast<double>(object.via.i64);
    default:
      return WrongType(where, "float or int", object);
  }
}

Result<std::string> CanonicalJson(const msgpack::object& object, std::string_view where) {
  std::string out;
  KVGOV_RETURN_IF_ERROR(AppendCanonical(object, where, out));
  return out;
}

void AppendJsonString(std::string_view text, std::string& out) {
  kvgov::AppendJsonString(out, text);
}

// An engine that reports the salt and LoRA beside the hashes (SGLang)
// rather than in extra_keys hashed them all the same: they enter the
// records' extra keys exactly as vLLM's do, so its blocks key like the
// routes kvgov salts. Only a chain's first block carries the salt.
void AddReportedExtraKeys(BlockStored& stored, std::string_view cache_salt) {
  const bool root = !stored.parent_block_hash.has_value();
  if (!stored.extra_keys.empty() || stored.block_hashes.empty()) return;
  if (stored.lora_name.empty() && (cache_salt.empty() || !root)) return;
  stored.extra_keys.assign(stored.block_hashes.size(), FirstBlockExtraKey(stored.lora_name, ""));
  if (root) stored.extra_keys[0] = FirstBlockExtraKey(stored.lora_name, cache_salt);
}

}  // namespace kvgov::adapters::internal
