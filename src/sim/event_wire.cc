#include "kvgov/sim/event_wire.h"

#include <msgpack.hpp>
#include <nlohmann/json.hpp>

#include <functional>
#include <variant>

namespace kvgov::sim {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;
using Json = nlohmann::json;

// One field of an event: its name in the map encoding and how it packs.
// `present` false is a default (None) that msgspec's omit_defaults leaves
// out: absent from a map, trimmed from an array's end, nil inside one.
struct Field {
  const char* name;
  bool present;
  std::function<void(Packer&)> pack;
};

void PackEvent(Packer& pk, WireEncoding encoding, std::string_view tag,
               const std::vector<Field>& fields) {
  if (encoding == WireEncoding::kMap) {
    uint32_t present = 1;
    for (const Field& field : fields) present += field.present ? 1 : 0;
    pk.pack_map(present);
    pk.pack(std::string_view("type"));
    pk.pack(tag);
    for (const Field& field : fields) {
      if (!field.present) continue;
      pk.pack(std::string_view(field.name));
      field.pack(pk);
    }
    return;
  }
  size_t length = fields.size();
  while (length > 0 && !fields[length - 1].present) --length;
  pk.pack_array(static_cast<uint32_t>(1 + length));
  pk.pack(tag);
  for (size_t i = 0; i < length; ++i) {
    if (fields[i].present) {
      fields[i].pack(pk);
    } else {
      pk.pack_nil();
    }
  }
}

bool Encodable(const Json& value) {
  switch (value.type()) {
    case Json::value_t::array:
      for (const Json& element : value) {
        if (!Encodable(element)) return false;
      }
      return true;
    case Json::value_t::string:
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::boolean:
    case Json::value_t::null:
      return true;
    default:
      return false;
  }
}

void PackJson(Packer& pk, const Json& value) {
  switch (value.type()) {
    case Json::value_t::array:
      pk.pack_array(static_cast<uint32_t>(value.size()));
      for (const Json& element : value) PackJson(pk, element);
      return;
    case Json::value_t::string:
      pk.pack(value.get_ref<const std::string&>());
      return;
    case Json::value_t::number_integer:
      pk.pack(value.get<int64_t>());
      return;
    case Json::value_t::number_unsigned:
      pk.pack(value.get<uint64_t>());
      return;
    case Json::value_t::boolean:
      pk.pack(value.get<bool>());
      return;
    default:
      pk.pack_nil();
      return;
  }
}

// Parses every extra key up front so that a bad entry fails the batch
// before anything is packed. A null Json stands for "" (nil on the wire).
Result<std::vector<Json>> ParseExtraKeys(const std::vector<std::string>& extra_keys) {
  std::vector<Json> parsed;
  parsed.reserve(extra_keys.size());
  for (size_t i = 0; i < extra_keys.size(); ++i) {
    if (extra_keys[i].empty()) {
      parsed.emplace_back(nullptr);
      continue;
    }
    Json value = Json::parse(extra_keys[i], nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded() || !value.is_array() || !Encodable(value)) {
      return Status::InvalidArgument(
          "extra_keys[" + std::to_string(i) +
          "]: want the canonical JSON text of an array of strings, integers, booleans, "
          "nulls and arrays");
    }
    parsed.push_back(std::move(value));
  }
  return parsed;
}

Status PackStored(Packer& pk, WireEncoding encoding, const BlockStored& stored) {
  KVGOV_ASSIGN_OR_RETURN(const std::vector<Json> extra_keys, ParseExtraKeys(stored.extra_keys));
  // vLLM's field order (engine-events.md §2); lora_id is deprecated and
  // never set here.
  PackEvent(
      pk, encoding, "BlockStored",
      {
          {"block_hashes", true, [&](Packer& p) { p.pack(stored.block_hashes); }},
          {"parent_block_hash", stored.parent_block_hash.has_value(),
           [&](Packer& p) { p.pack(*stored.parent_block_hash); }},
          {"token_ids", true, [&](Packer& p) { p.pack(stored.token_ids); }},
          {"block_size", true, [&](Packer& p) { p.pack(stored.block_size); }},
          {"lora_id", false, nullptr},
          {"medium", !stored.medium.empty(), [&](Packer& p) { p.pack(stored.medium); }},
          {"lora_name", !stored.lora_name.empty(), [&](Packer& p) { p.pack(stored.lora_name); }},
          {"extra_keys", !extra_keys.empty(),
           [&](Packer& p) {
             p.pack_array(static_cast<uint32_t>(extra_keys.size()));
             for (const Json& entry : extra_keys) PackJson(p, entry);
           }},
          {"group_idx", stored.group_idx != 0, [&](Packer& p) { p.pack(stored.group_idx); }},
          {"kv_cache_spec_kind", !stored.kv_cache_spec_kind.empty(),
           [&](Packer& p) { p.pack(stored.kv_cache_spec_kind); }},
      });
  return Status::Ok();
}

void PackRemoved(Packer& pk, WireEncoding encoding, const BlockRemoved& removed) {
  PackEvent(
      pk, encoding, "BlockRemoved",
      {
          {"block_hashes", true, [&](Packer& p) { p.pack(removed.block_hashes); }},
          {"medium", !removed.medium.empty(), [&](Packer& p) { p.pack(removed.medium); }},
          {"group_idx", removed.group_idx != 0, [&](Packer& p) { p.pack(removed.group_idx); }},
      });
}

}  // namespace

Result<std::string> EncodeEventBatch(const EngineEventBatch& batch, WireEncoding encoding) {
  msgpack::sbuffer buffer;
  Packer pk(buffer);
  // The batch stays positional in both encodings, as vLLM 0.26 sends it;
  // data_parallel_rank is omitted when unset (a trailing default).
  pk.pack_array(batch.dp_rank.has_value() ? 3 : 2);
  pk.pack(batch.ts);
  pk.pack_array(static_cast<uint32_t>(batch.events.size()));
  for (const EngineEvent& event : batch.events) {
    if (const auto* stored = std::get_if<BlockStored>(&event)) {
      KVGOV_RETURN_IF_ERROR(PackStored(pk, encoding, *stored));
    } else if (const auto* removed = std::get_if<BlockRemoved>(&event)) {
      PackRemoved(pk, encoding, *removed);
    } else {
      PackEvent(pk, encoding, "AllBlocksCleared", {});
    }
  }
  if (batch.dp_rank.has_value()) pk.pack(*batch.dp_rank);
  return std::string(buffer.data(), buffer.size());
}

}  // namespace kvgov::sim
