#include "kvgov/adapters/engine_wire.h"

#include <array>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "adapters/engine_schema.h"
#include "adapters/msgpack_input.h"
#include "adapters/one_pass_decoder.h"
#include "adapters/wire_values.h"

namespace kvgov::adapters {
namespace {

using internal::AddReportedExtraKeys;
using internal::Bytes;
using internal::CanonicalJson;
using internal::IsUnset;
using internal::Missing;
using internal::ReadHash;
using internal::ReadHashList;
using internal::ReadInt64;
using internal::ReadNumber;
using internal::ReadOptionalInt64;
using internal::ReadOptionalString;
using internal::ReadString;
using internal::ReadTokenIds;
using internal::UnpackUntrusted;
using internal::WrongType;

// ---------------------------------------------------------------------------
// Field collection, shared by every schema. A schema is an ordered list of
// field names: the order is the positional (array_like) layout, the names
// are the map keys. Each field ends up in a slot, nullptr when absent.

template <size_t N>
using FieldNames = std::array<std::string_view, N>;

template <size_t N>
using Slots = std::array<const msgpack::object*, N>;

std::string Path(std::string_view where, std::string_view field) {
  std::string out(where);
  out += '.';
  out += field;
  return out;
}

bool Contains(std::span<const std::string_view> names, std::string_view name) {
  for (std::string_view candidate : names) {
    if (candidate == name) return true;
  }
  return false;
}

// Positional fields follow the schema order from `first`; elements past the
// end of the schema come from a newer publisher and are counted, not read.
template <size_t N>
void CollectArrayFields(const msgpack::object& array, uint32_t first, const FieldNames<N>& names,
                        Slots<N>& slots, uint64_t& unknown) {
  for (uint32_t i = first; i < array.via.array.size; ++i) {
    const size_t k = i - first;
    if (k < names.size()) {
      slots[k] = &array.via.array.ptr[i];
    } else {
      ++unknown;
    }
  }
}

// Map fields by name. `known` are keys the schema recognises but does not
// decode (the tag, deliberately dropped fields): they are neither read nor
// counted as unknown. A repeated schema key is refused: picking one copy
// would let the two readers of a payload disagree about what it says.
template <size_t N>
Status CollectMapFields(const msgpack::object& map, const FieldNames<N>& names,
                        std::span<const std::string_view> known, Slots<N>& slots, uint64_t& unknown,
                        std::string_view where) {
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const msgpack::object_kv& kv = map.via.map.ptr[i];
    if (kv.key.type != msgpack::type::STR) {
      return WrongType(std::string(where) + " key", "str", kv.key);
    }
    const std::string_view key = Bytes(kv.key);
    bool matched = false;
    for (size_t k = 0; k < names.size(); ++k) {
      if (names[k] != key) continue;
      if (slots[k] != nullptr) return Status::InvalidArgument(Path(where, key) + ": duplicate key");
      slots[k] = &kv.val;
      matched = true;
      break;
    }
    if (!matched && !Contains(known, key)) ++unknown;
  }
  return Status::Ok();
}

// The value under `key` in a map, nullptr when absent; a repeat is refused.
Result<const msgpack::object*> FindKey(const msgpack::object& map, std::string_view key,
                                       std::string_view where) {
  const msgpack::object* found = nullptr;
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const msgpack::object_kv& kv = map.via.map.ptr[i];
    if (kv.key.type != msgpack::type::STR || Bytes(kv.key) != key) continue;
    if (found != nullptr) return Status::InvalidArgument(Path(where, key) + ": duplicate key");
    found = &kv.val;
  }
  return found;
}

Result<int64_t> ReadNonNegative(const msgpack::object* object, std::string_view where) {
  KVGOV_ASSIGN_OR_RETURN(std::optional<int64_t> value, ReadOptionalInt64(object, where));
  if (value.has_value() && *value < 0) {
    return Status::InvalidArgument(std::string(where) + ": want int >= 0, got " +
                                   std::to_string(*value));
  }
  return value.value_or(0);
}

Result<int64_t> ReadBlockSize(const msgpack::object& object, std::string_view where) {
  KVGOV_ASSIGN_OR_RETURN(int64_t block_size, ReadInt64(object, where));
  if (block_size <= 0) {
    return Status::InvalidArgument(std::string(where) + ": want int > 0, got " +
                                   std::to_string(block_size));
  }
  return block_size;
}

// vLLM hashes only full blocks, so a store covers exactly
// blocks x block_size tokens; anything else means the fields are misaligned.
Status CheckTokenCount(const BlockStored& stored, std::string_view where) {
  const size_t tokens = stored.token_ids.size();
  const auto block_size = static_cast<uint64_t>(stored.block_size);
  if (tokens % block_size == 0 && tokens / block_size == stored.block_hashes.size()) {
    return Status::Ok();
  }
  return Status::InvalidArgument(Path(where, "token_ids") + ": want " +
                                 std::to_string(stored.block_hashes.size()) + " blocks x " +
                                 std::to_string(stored.block_size) + " tokens, got " +
                                 std::to_string(tokens) + " tokens");
}

Status CheckExtraKeyCount(size_t keys, size_t blocks, std::string_view where) {
  if (keys == blocks) return Status::Ok();
  return Status::InvalidArgument(Path(where, "extra_keys") + ": want " + std::to_string(blocks) +
                                 " entries (one per block), got " + std::to_string(keys));
}

// ---------------------------------------------------------------------------
// vLLM and SGLang events.

using internal::kStoredFields;
using enum internal::StoredField;
// `cache_salt` is SGLang's (map events, sglang#37482), read by name: it has
// no position in vLLM's layout.
constexpr std::array<std::string_view, 2> kStoredKnown = {"type", "cache_salt"};

constexpr FieldNames<5> kRemovedFields = [] {
  FieldNames<5> names;
  for (size_t i = 0; i < names.size(); ++i) {
    names[i] = kStoredFields[internal::kRemovedFieldOrder[i]];
  }
  return names;
}();
enum RemovedField : size_t {
  kRemovedHashes,
  kRemovedMedium,
  kRemovedGroupIdx,
  kRemovedLocality,
  kRemovedOwnership,
};
static_assert(kRemovedFields[kRemovedOwnership] == "ownership");
constexpr std::array<std::string_view, 1> kTagOnly = {"type"};

Result<std::vector<std::string>> ReadExtraKeys(const msgpack::object* object, size_t blocks,
                                               std::string_view where) {
  std::vector<std::string> keys;
  if (IsUnset(object)) return keys;
  const std::string path = Path(where, "extra_keys");
  if (object->type != msgpack::type::ARRAY) return WrongType(path, "array or nil", *object);
  KVGOV_RETURN_IF_ERROR(CheckExtraKeyCount(object->via.array.size, blocks, where));
  keys.reserve(object->via.array.size);
  for (uint32_t i = 0; i < object->via.array.size; ++i) {
    const msgpack::object& key = object->via.array.ptr[i];
    // A block without extra keys is "", not "null": absence is not a value.
    if (key.type == msgpack::type::NIL) {
      keys.emplace_back();
      continue;
    }
    KVGOV_ASSIGN_OR_RETURN(std::string json,
                           CanonicalJson(key, path + "[" + std::to_string(i) + "]"));
    keys.push_back(std::move(json));
  }
  return keys;
}

// SGLang's salted positional events (sglang#30827) carry a metadata map,
// {"cache_salt": <str>}, where vLLM has lora_name.
Result<std::string> ReadSglangMetadata(const msgpack::object& metadata, std::string_view where,
                                       uint64_t& unknown) {
  constexpr FieldNames<1> kMetadataFields = {"cache_salt"};
  Slots<1> slots{};
  KVGOV_RETURN_IF_ERROR(CollectMapFields(metadata, kMetadataFields, {}, slots, unknown, where));
  return ReadOptionalString(slots[0], Path(where, "cache_salt"));
}

Result<BlockStored> DecodeStored(const Slots<kStoredFieldCount>& f,
                                 const msgpack::object* cache_salt_field, std::string_view where,
                                 uint64_t& unknown) {
  BlockStored stored;
  if (f[kBlockHashes] == nullptr) return Missing(Path(where, "block_hashes"));
  KVGOV_ASSIGN_OR_RETURN(stored.block_hashes,
                         ReadHashList(*f[kBlockHashes], Path(where, "block_hashes")));
  if (!IsUnset(f[kParentBlockHash])) {
    KVGOV_ASSIGN_OR_RETURN(stored.parent_block_hash,
                           ReadHash(*f[kParentBlockHash], Path(where, "parent_block_hash")));
  }
  if (f[kTokenIds] == nullptr) return Missing(Path(where, "token_ids"));
  KVGOV_ASSIGN_OR_RETURN(stored.token_ids, ReadTokenIds(*f[kTokenIds], Path(where, "token_ids")));
  if (f[kBlockSize] == nullptr) return Missing(Path(where, "block_size"));
  KVGOV_ASSIGN_OR_RETURN(stored.block_size,
                         ReadBlockSize(*f[kBlockSize], Path(where, "block_size")));
  // lora_id is deprecated in favour of lora_name; checked, not kept.
  KVGOV_RETURN_IF_ERROR(ReadOptionalInt64(f[kLoraId], Path(where, "lora_id")).status());
  KVGOV_ASSIGN_OR_RETURN(stored.medium, ReadOptionalString(f[kMedium], Path(where, "medium")));
  std::string cache_salt;
  if (f[kLoraName] != nullptr && f[kLoraName]->type == msgpack::type::MAP) {
    KVGOV_ASSIGN_OR_RETURN(cache_salt,
                           ReadSglangMetadata(*f[kLoraName], Path(where, "metadata"), unknown));
  } else {
    KVGOV_ASSIGN_OR_RETURN(stored.lora_name,
                           ReadOptionalString(f[kLoraName], Path(where, "lora_name")));
  }
  if (cache_salt_field != nullptr) {
    KVGOV_ASSIGN_OR_RETURN(cache_salt,
                           ReadOptionalString(cache_salt_field, Path(where, "cache_salt")));
  }
  KVGOV_ASSIGN_OR_RETURN(stored.extra_keys,
                         ReadExtraKeys(f[kExtraKeys], stored.block_hashes.size(), where));
  KVGOV_ASSIGN_OR_RETURN(stored.group_idx, ReadNonNegative(f[kGroupIdx], Path(where, "group_idx")));
  KVGOV_ASSIGN_OR_RETURN(stored.kv_cache_spec_kind,
                         ReadOptionalString(f[kSpecKind], Path(where, "kv_cache_spec_kind")));
  KVGOV_ASSIGN_OR_RETURN(
      stored.kv_cache_spec_sliding_window,
      ReadNonNegative(f[kSpecSlidingWindow], Path(where, "kv_cache_spec_sliding_window")));
  KVGOV_ASSIGN_OR_RETURN(stored.locality,
                         ReadOptionalString(f[kLocality], Path(where, "locality")));
  // Who owns a shared block and which session stored it say nothing about
  // residency; checked, not kept.
  KVGOV_RETURN_IF_ERROR(ReadOptionalString(f[kOwnership], Path(where, "ownership")).status());
  KVGOV_RETURN_IF_ERROR(ReadOptionalString(f[kSessionId], Path(where, "session_id")).status());
  KVGOV_RETURN_IF_ERROR(CheckTokenCount(stored, where));
  AddReportedExtraKeys(stored, cache_salt);
  return stored;
}

Result<BlockRemoved> DecodeRemoved(const Slots<5>& f, std::string_view where) {
  BlockRemoved removed;
  if (f[kRemovedHashes] == nullptr) return Missing(Path(where, "block_hashes"));
  KVGOV_ASSIGN_OR_RETURN(removed.block_hashes,
                         ReadHashList(*f[kRemovedHashes], Path(where, "block_hashes")));
  KVGOV_ASSIGN_OR_RETURN(removed.medium,
                         ReadOptionalString(f[kRemovedMedium], Path(where, "medium")));
  KVGOV_ASSIGN_OR_RETURN(removed.group_idx,
                         ReadNonNegative(f[kRemovedGroupIdx], Path(where, "group_idx")));
  KVGOV_ASSIGN_OR_RETURN(removed.locality,
                         ReadOptionalString(f[kRemovedLocality], Path(where, "locality")));
  KVGOV_RETURN_IF_ERROR(
      ReadOptionalString(f[kRemovedOwnership], Path(where, "ownership")).status());
  return removed;
}

// Collects the fields of a positional ([tag, ...]) or map event.
template <size_t N>
Status CollectEventFields(const msgpack::object& event, const FieldNames<N>& names,
                          std::span<const std::string_view> known, Slots<N>& slots,
                          uint64_t& unknown, std::string_view where) {
  slots.fill(nullptr);
  if (event.type == msgpack::type::ARRAY) {
    CollectArrayFields(event, 1, names, slots, unknown);
    return Status::Ok();
  }
  return CollectMapFields(event, names, known, slots, unknown, where);
}

Status DecodeEngineEvent(const msgpack::object& event, std::string_view where,
                         EngineEventBatch& batch) {
  const msgpack::object* tag = nullptr;
  if (event.type == msgpack::type::ARRAY) {
    if (event.via.array.size == 0) {
      return Status::InvalidArgument(std::string(where) + ": want [tag, fields...], got []");
    }
    tag = &event.via.array.ptr[0];
  } else if (event.type == msgpack::type::MAP) {
    KVGOV_ASSIGN_OR_RETURN(tag, FindKey(event, "type", where));
    if (tag == nullptr) return Missing(Path(where, "type"));
  } else {
    return WrongType(where, "array or map", event);
  }
  if (tag->type != msgpack::type::STR) return WrongType(Path(where, "type"), "str", *tag);

  const std::string_view type = Bytes(*tag);
  uint64_t& unknown = batch.ignored.unknown_fields;
  if (type == "BlockStored") {
    Slots<14> slots;
    KVGOV_RETURN_IF_ERROR(
        CollectEventFields(event, kStoredFields, kStoredKnown, slots, unknown, where));
    const msgpack::object* cache_salt = nullptr;
    if (event.type == msgpack::type::MAP) {
      KVGOV_ASSIGN_OR_RETURN(cache_salt, FindKey(event, "cache_salt", where));
    }
    KVGOV_ASSIGN_OR_RETURN(BlockStored stored, DecodeStored(slots, cache_salt, where, unknown));
    batch.events.emplace_back(std::move(stored));
  } else if (type == "BlockRemoved") {
    Slots<5> slots;
    KVGOV_RETURN_IF_ERROR(
        CollectEventFields(event, kRemovedFields, kTagOnly, slots, unknown, where));
    KVGOV_ASSIGN_OR_RETURN(BlockRemoved removed, DecodeRemoved(slots, where));
    batch.events.emplace_back(std::move(removed));
  } else if (type == "AllBlocksCleared") {
    Slots<0> slots;
    KVGOV_RETURN_IF_ERROR(
        CollectEventFields(event, FieldNames<0>{}, kTagOnly, slots, unknown, where));
    batch.events.emplace_back(AllBlocksCleared{});
  } else {
    // A newer engine's event kind: skipping it keeps the stream flowing, and
    // the counter makes the skip visible.
    ++batch.ignored.unknown_event_types;
  }
  return Status::Ok();
}

constexpr FieldNames<3> kBatchFields = {"ts", "events", "data_parallel_rank"};
enum BatchField : size_t { kTs, kEvents, kDpRank };
static_assert(kBatchFields[kDpRank] == "data_parallel_rank");
constexpr std::array<std::string_view, 1> kBatchKnown = {"attn_dp_rank"};

Result<EngineEventBatch> DecodeEngineBatchObject(const msgpack::object& root) {
  EngineEventBatch batch;
  Slots<3> f{};
  if (root.type == msgpack::type::ARRAY) {
    if (root.via.array.size < 2) {
      return Status::InvalidArgument(
          "batch: want [ts, events, data_parallel_rank] with at least 2 elements, got " +
          std::to_string(root.via.array.size));
    }
    CollectArrayFields(root, 0, kBatchFields, f, batch.ignored.unknown_fields);
  } else if (root.type == msgpack::type::MAP) {
    KVGOV_RETURN_IF_ERROR(CollectMapFields(root, kBatchFields, kBatchKnown, f,
                                           batch.ignored.unknown_fields, "batch"));
    // SGLang names the rank after its attention data parallelism.
    if (f[kDpRank] == nullptr) {
      KVGOV_ASSIGN_OR_RETURN(f[kDpRank], FindKey(root, "attn_dp_rank", "batch"));
    }
  } else {
    return WrongType("batch", "array or map", root);
  }

  if (f[kTs] == nullptr) return Missing("ts");
  KVGOV_ASSIGN_OR_RETURN(batch.ts, ReadNumber(*f[kTs], "ts"));
  if (f[kEvents] == nullptr) return Missing("events");
  KVGOV_ASSIGN_OR_RETURN(batch.dp_rank, ReadOptionalInt64(f[kDpRank], "data_parallel_rank"));
  const msgpack::object& events = *f[kEvents];
  if (events.type != msgpack::type::ARRAY) return WrongType("events", "array", events);
  batch.events.reserve(events.via.array.size);
  for (uint32_t i = 0; i < events.via.array.size; ++i) {
    KVGOV_RETURN_IF_ERROR(
        DecodeEngineEvent(events.via.array.ptr[i], "events[" + std::to_string(i) + "]", batch));
  }
  return batch;
}

// ---------------------------------------------------------------------------
// Mooncake store events (RFC #1527 maps, as the master publishes them).

constexpr FieldNames<15> kMooncakeFields = {
    "event_type", "type",       "seq_hashes", "block_hashes", "parent_hash", "parent_block_hash",
    "token_ids",  "block_size", "lora_name",  "medium",       "tenant_id",   "additional_salt",
    "group_id",   "timestamp",  "dp_rank"};
enum MooncakeField : size_t {
  kMcEventType,
  kMcLegacyType,
  kMcSeqHashes,
  kMcLegacyHashes,
  kMcParentHash,
  kMcLegacyParent,
  kMcTokenIds,
  kMcBlockSize,
  kMcLoraName,
  kMcMedium,
  kMcTenantId,
  kMcAdditionalSalt,
  kMcGroupId,
  kMcTimestamp,
  kMcDpRank,
};
static_assert(kMooncakeFields[kMcLegacyParent] == "parent_block_hash" &&
              kMooncakeFields[kMcDpRank] == "dp_rank");
// Published fields with no place in the records: identity and topology the
// transport or the registration carries (backend, model, object key, ranks).
constexpr std::array<std::string_view, 13> kMooncakeKnown = {
    "event_id",       "model_name", "backend_id",
    "base_block_idx", "object_key", "connector_block_hash",
    "cache_prefix",   "tp_rank",    "head_or_tp_rank",
    "pcp_rank",       "dcp_rank",   "pp_rank",
    "layer_id"};

enum class MooncakeKind { kStored, kRemoved, kCleared, kUnknown };

MooncakeKind KindFromEventType(std::string_view type) {
  if (type == "stored") return MooncakeKind::kStored;
  if (type == "removed") return MooncakeKind::kRemoved;
  if (type == "cleared") return MooncakeKind::kCleared;
  return MooncakeKind::kUnknown;
}

MooncakeKind KindFromLegacyType(std::string_view type) {
  if (type == "BlockStored") return MooncakeKind::kStored;
  if (type == "BlockRemoved") return MooncakeKind::kRemoved;
  if (type == "AllBlocksCleared") return MooncakeKind::kCleared;
  return MooncakeKind::kUnknown;
}

// event_type is the RFC field; `type` is the vLLM-style alias the master adds
// for older relays. When both are sent they must name the same kind.
Result<MooncakeKind> ReadMooncakeKind(const Slots<15>& f, std::string_view where) {
  const msgpack::object* primary = f[kMcEventType];
  const msgpack::object* legacy = f[kMcLegacyType];
  std::optional<MooncakeKind> from_legacy;
  if (!IsUnset(legacy)) {
    if (legacy->type != msgpack::type::STR) return WrongType(Path(where, "type"), "str", *legacy);
    from_legacy = KindFromLegacyType(Bytes(*legacy));
  }
  if (IsUnset(primary)) {
    if (!from_legacy.has_value()) return Missing(Path(where, "event_type"));
    return *from_legacy;
  }
  if (primary->type != msgpack::type::STR) {
    return WrongType(Path(where, "event_type"), "str", *primary);
  }
  const MooncakeKind kind = KindFromEventType(Bytes(*primary));
  if (kind != MooncakeKind::kUnknown && from_legacy.has_value() && *from_legacy != kind) {
    return Status::InvalidArgument(Path(where, "type") + ": '" + std::string(Bytes(*legacy)) +
                                   "' disagrees with event_type '" + std::string(Bytes(*primary)) +
                                   "'");
  }
  return kind;
}

Result<std::vector<EngineHash>> ReadMooncakeHashes(const Slots<15>& f, std::string_view where) {
  const msgpack::object* primary = f[kMcSeqHashes];
  const msgpack::object* legacy = f[kMcLegacyHashes];
  if (IsUnset(primary) && IsUnset(legacy)) return Missing(Path(where, "seq_hashes"));
  std::optional<std::vector<EngineHash>> seq;
  if (!IsUnset(primary)) {
    KVGOV_ASSIGN_OR_RETURN(seq, ReadHashList(*primary, Path(where, "seq_hashes")));
  }
  if (IsUnset(legacy)) return *std::move(seq);
  // The alias may be sent as int64 where seq_hashes is u64: compare after
  // normalisation, which maps both to the same bits.
  KVGOV_ASSIGN_OR_RETURN(std::vector<EngineHash> alias,
                         ReadHashList(*legacy, Path(where, "block_hashes")));
  if (seq.has_value() && *seq != alias) {
    return Status::InvalidArgument(Path(where, "block_hashes") + ": disagrees with seq_hashes");
  }
  return alias;
}

Result<std::optional<EngineHash>> ReadMooncakeParent(const Slots<15>& f, std::string_view where) {
  std::optional<EngineHash> parent;
  std::optional<EngineHash> alias;
  if (!IsUnset(f[kMcParentHash])) {
    KVGOV_ASSIGN_OR_RETURN(parent, ReadHash(*f[kMcParentHash], Path(where, "parent_hash")));
  }
  if (!IsUnset(f[kMcLegacyParent])) {
    KVGOV_ASSIGN_OR_RETURN(alias, ReadHash(*f[kMcLegacyParent], Path(where, "parent_block_hash")));
  }
  if (parent.has_value() && alias.has_value() && *parent != *alias) {
    return Status::InvalidArgument(Path(where, "parent_block_hash") +
                                   ": disagrees with parent_hash");
  }
  return parent.has_value() ? parent : alias;
}

// group_id is a KV-cache group when it is a number (the connector's
// "group:N"); any other string is a Store object group, which is not a
// KV-cache group and so leaves group_idx at 0.
Result<int64_t> ReadMooncakeGroup(const msgpack::object* object, std::string_view where) {
  if (IsUnset(object)) return int64_t{0};
  const std::string path = Path(where, "group_id");
  if (object->type == msgpack::type::POSITIVE_INTEGER) return ReadInt64(*object, path);
  if (object->type != msgpack::type::STR) return WrongType(path, "int >= 0, str or nil", *object);
  std::string_view text = Bytes(*object);
  if (text.starts_with("group:")) text.remove_prefix(6);
  if (text.empty() || text.size() > 18) return int64_t{0};
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return int64_t{0};
    value = value * 10 + (c - '0');
  }
  return value;
}

// A JSON string, or null when the field is unset.
Result<std::string> JsonStringOrNull(const msgpack::object* object, std::string_view where) {
  if (IsUnset(object)) return std::string("null");
  KVGOV_ASSIGN_OR_RETURN(std::string text, ReadString(*object, where));
  std::string json;
  internal::AppendJsonString(text, json);
  return json;
}

Result<BlockStored> DecodeMooncakeStored(const Slots<15>& f, std::string_view where) {
  BlockStored stored;
  KVGOV_ASSIGN_OR_RETURN(stored.block_hashes, ReadMooncakeHashes(f, where));
  KVGOV_ASSIGN_OR_RETURN(stored.parent_block_hash, ReadMooncakeParent(f, where));
  // The master sends nil for an unconfigured block size; 0 keeps "unknown"
  // and LowerEngineEvent falls back to the worker's block size.
  if (!IsUnset(f[kMcBlockSize])) {
    KVGOV_ASSIGN_OR_RETURN(stored.block_size,
                           ReadBlockSize(*f[kMcBlockSize], Path(where, "block_size")));
  }
  if (!IsUnset(f[kMcTokenIds])) {
    KVGOV_ASSIGN_OR_RETURN(stored.token_ids,
                           ReadTokenIds(*f[kMcTokenIds], Path(where, "token_ids")));
    if (stored.block_size == 0) {
      return Status::InvalidArgument(Path(where, "token_ids") +
                                     ": sent without a block_size to check them against");
    }
    KVGOV_RETURN_IF_ERROR(CheckTokenCount(stored, where));
  }
  KVGOV_ASSIGN_OR_RETURN(stored.lora_name,
                         ReadOptionalString(f[kMcLoraName], Path(where, "lora_name")));
  KVGOV_ASSIGN_OR_RETURN(stored.medium, ReadOptionalString(f[kMcMedium], Path(where, "medium")));
  KVGOV_ASSIGN_OR_RETURN(stored.group_idx, ReadMooncakeGroup(f[kMcGroupId], where));
  // Tenants and salts namespace Mooncake's hashes: putting both into the
  // first block's extra key (which the whole chain hangs off) keeps two
  // tenants' identical hashes from ever meeting in one key.
  KVGOV_ASSIGN_OR_RETURN(std::string tenant,
                         JsonStringOrNull(f[kMcTenantId], Path(where, "tenant_id")));
  KVGOV_ASSIGN_OR_RETURN(std::string salt,
                         JsonStringOrNull(f[kMcAdditionalSalt], Path(where, "additional_salt")));
  if (!stored.block_hashes.empty()) {
    stored.extra_keys.resize(stored.block_hashes.size());
    stored.extra_keys[0] = "[\"mooncake\"," + tenant + "," + salt + "]";
  }
  return stored;
}

Result<BlockRemoved> DecodeMooncakeRemoved(const Slots<15>& f, std::string_view where) {
  BlockRemoved removed;
  KVGOV_ASSIGN_OR_RETURN(removed.block_hashes, ReadMooncakeHashes(f, where));
  KVGOV_ASSIGN_OR_RETURN(removed.medium, ReadOptionalString(f[kMcMedium], Path(where, "medium")));
  KVGOV_ASSIGN_OR_RETURN(removed.group_idx, ReadMooncakeGroup(f[kMcGroupId], where));
  return removed;
}

// Per-event timestamp and dp_rank, used when the payload has no batch
// envelope to carry them.
struct MooncakeEventMeta {
  std::optional<double> ts;
  std::optional<int64_t> dp_rank;
};

Status DecodeMooncakeEvent(const msgpack::object& event, std::string_view where,
                           EngineEventBatch& batch, MooncakeEventMeta* meta) {
  if (event.type != msgpack::type::MAP) return WrongType(where, "map", event);
  Slots<15> f{};
  KVGOV_RETURN_IF_ERROR(CollectMapFields(event, kMooncakeFields, kMooncakeKnown, f,
                                         batch.ignored.unknown_fields, where));
  if (meta != nullptr) {
    if (!IsUnset(f[kMcTimestamp])) {
      KVGOV_ASSIGN_OR_RETURN(double ms, ReadNumber(*f[kMcTimestamp], Path(where, "timestamp")));
      meta->ts = ms / 1000.0;
    }
    KVGOV_ASSIGN_OR_RETURN(meta->dp_rank, ReadOptionalInt64(f[kMcDpRank], Path(where, "dp_rank")));
  }
  KVGOV_ASSIGN_OR_RETURN(MooncakeKind kind, ReadMooncakeKind(f, where));
  switch (kind) {
    case MooncakeKind::kStored: {
      KVGOV_ASSIGN_OR_RETURN(BlockStored stored, DecodeMooncakeStored(f, where));
      batch.events.emplace_back(std::move(stored));
      break;
    }
    case MooncakeKind::kRemoved: {
      KVGOV_ASSIGN_OR_RETURN(BlockRemoved removed, DecodeMooncakeRemoved(f, where));
      batch.events.emplace_back(std::move(removed));
      break;
    }
    case MooncakeKind::kCleared:
      batch.events.emplace_back(AllBlocksCleared{});
      break;
    case MooncakeKind::kUnknown:
      ++batch.ignored.unknown_event_types;
      break;
  }
  return Status::Ok();
}

bool IsNumber(const msgpack::object& object) {
  switch (object.type) {
    case msgpack::type::POSITIVE_INTEGER:
    case msgpack::type::NEGATIVE_INTEGER:
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return true;
    default:
      return false;
  }
}

std::string EventPath(uint32_t index) { return "events[" + std::to_string(index) + "]"; }

Result<EngineEventBatch> DecodeMooncakeObject(const msgpack::object& root) {
  EngineEventBatch batch;
  if (root.type == msgpack::type::MAP) {
    MooncakeEventMeta meta;
    KVGOV_RETURN_IF_ERROR(DecodeMooncakeEvent(root, EventPath(0), batch, &meta));
    batch.ts = meta.ts.value_or(0);
    batch.dp_rank = meta.dp_rank;
    return batch;
  }
  if (root.type != msgpack::type::ARRAY) return WrongType("batch", "array or map", root);
  const uint32_t size = root.via.array.size;
  if (size == 0) return batch;
  const msgpack::object& first = root.via.array.ptr[0];
  if (first.type == msgpack::type::MAP) {
    // A bare list of event maps: the first event speaks for the batch.
    batch.events.reserve(size);
    for (uint32_t i = 0; i < size; ++i) {
      MooncakeEventMeta meta;
      KVGOV_RETURN_IF_ERROR(DecodeMooncakeEvent(root.via.array.ptr[i], EventPath(i), batch,
                                                i == 0 ? &meta : nullptr));
      if (i == 0) {
        batch.ts = meta.ts.value_or(0);
        batch.dp_rank = meta.dp_rank;
      }
    }
    return batch;
  }
  if (!IsNumber(first) || size < 2) {
    return Status::InvalidArgument(
        "batch: want [timestamp_ms, [event maps], dp_rank], an event map or an array of event "
        "maps; got an array starting with " +
        std::string(internal::TypeName(first)) + " of " + std::to_string(size) + " element(s)");
  }
  KVGOV_ASSIGN_OR_RETURN(double ms, ReadNumber(first, "timestamp_ms"));
  batch.ts = ms / 1000.0;
  const msgpack::object& events = root.via.array.ptr[1];
  if (events.type != msgpack::type::ARRAY) return WrongType("events", "array", events);
  if (size >= 3) {
    KVGOV_ASSIGN_OR_RETURN(batch.dp_rank, ReadOptionalInt64(&root.via.array.ptr[2], "dp_rank"));
  }
  batch.ignored.unknown_fields += size > 3 ? size - 3 : 0;
  batch.events.reserve(events.via.array.size);
  for (uint32_t i = 0; i < events.via.array.size; ++i) {
    KVGOV_RETURN_IF_ERROR(
        DecodeMooncakeEvent(events.via.array.ptr[i], EventPath(i), batch, nullptr));
  }
  return batch;
}

// The exception edge: nothing thrown below (allocation failure is the only
// thing that can still throw after unpacking) leaves this function.
template <typename Decode>
Result<EngineEventBatch> DecodePayload(std::string_view payload, const MsgpackLimits& limits,
                                       Decode decode) {
  try {
    KVGOV_ASSIGN_OR_RETURN(msgpack::object_handle handle, UnpackUntrusted(payload, limits));
    return decode(handle.get());
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("payload: out of memory while decoding");
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("payload: ") + e.what());
  } catch (...) {
    return Status::Corruption("payload: decode failed");
  }
}

}  // namespace

namespace internal {

Result<EngineEventBatch> DecodeEngineBatchByObjects(std::string_view payload,
                                                    const MsgpackLimits& limits) {
  return DecodePayload(payload, limits, DecodeEngineBatchObject);
}

}  // namespace internal

// The one pass takes what engines send; anything else, every error
// included, goes the object path, which names it (docs/adr/0025).
Result<EngineEventBatch> DecodeEngineBatch(std::string_view payload, const MsgpackLimits& limits) {
  if (std::optional<EngineEventBatch> batch =
          internal::DecodeEngineBatchInOnePass(payload, limits)) {
    return std::move(*batch);
  }
  return internal::DecodeEngineBatchByObjects(payload, limits);
}

Result<EngineEventBatch> DecodeMooncakeEvents(std::string_view payload,
                                              const MsgpackLimits& limits) {
  return DecodePayload(payload, limits, DecodeMooncakeObject);
}

std::string_view DecodeErrorReason(const Status& status) {
  switch (status.code()) {
    case StatusCode::kResourceExhausted:
      return "limit_exceeded";
    case StatusCode::kCorruption:
      return "malformed_msgpack";
    default:
      return "bad_schema";
  }
}

}  // namespace kvgov::adapters
