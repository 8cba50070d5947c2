#include "adapters/one_pass_decoder.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "adapters/engine_schema.h"
#include "adapters/msgpack_cursor.h"
#include "adapters/wire_values.h"
#include "kvgov/core/json_string.h"

namespace kvgov::adapters::internal {
namespace {

// Every rule below is the object path's (engine_wire.cc), restated over the
// cursor; where the object path would refuse, or where a form is rare
// (SGLang's metadata map and EAGLE bigrams, map or float extra keys,
// repeated keys), the answer is "not here" and the object path decides.

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// A BlockStored's fields (engine_schema.h) and one more read by name only:
// SGLang's map events carry the salt beside the hashes.
constexpr uint8_t kCacheSalt = kStoredFieldCount;
constexpr uint8_t kFieldCount = kCacheSalt + 1;

constexpr uint32_t Bit(uint8_t field) { return uint32_t{1} << field; }
constexpr uint32_t kRemovedFieldBits = [] {
  uint32_t bits = 0;
  for (StoredField field : kRemovedFieldOrder) bits |= Bit(field);
  return bits;
}();
// What a BlockStored decodes: every positional field and the salt.
constexpr uint32_t kStoredFieldBits = (Bit(kStoredFieldCount) - 1) | Bit(kCacheSalt);

enum class EventType : uint8_t { kStored, kRemoved, kCleared, kOther };

EventType TypeOf(std::string_view tag) {
  if (tag == "BlockStored") return EventType::kStored;
  if (tag == "BlockRemoved") return EventType::kRemoved;
  if (tag == "AllBlocksCleared") return EventType::kCleared;
  return EventType::kOther;
}

// The field a map key names; kFieldCount for none.
uint8_t FieldOf(std::string_view key) {
  if (key == "cache_salt") return kCacheSalt;
  for (uint8_t f = 0; f < kStoredFieldCount; ++f) {
    if (kStoredFields[f] == key) return f;
  }
  return kFieldCount;
}

// A BlockStored being read, whatever the event turns out to be: a map
// event's tag may come after its fields.
struct EventFields {
  BlockStored stored;
  std::string cache_salt;
  uint32_t present = 0;     // Bit(field) for every field read
  bool extra_keys = false;  // an array of them was read (nil is none)
};

class OnePass {
 public:
  OnePass(std::string_view payload, const MsgpackLimits& limits) : cursor_(payload, limits) {}

  bool Batch(EngineEventBatch& batch) {
    WireValue root;
    if (!cursor_.Next(root, 0)) return false;
    bool have_ts = false;
    bool have_events = false;
    bool have_rank = false;
    const auto field = [&](uint32_t index, WireValue& value, uint32_t depth) -> bool {
      switch (index) {
        case 0:
          have_ts = true;
          return Number(value, batch.ts);
        case 1:
          have_events = true;
          return Events(value, depth, batch);
        case 2:
          have_rank = true;
          return OptionalInt64(value, batch.dp_rank);
        default:
          return false;
      }
    };
    if (root.kind == WireKind::kArray) {
      if (root.count < 2) return false;
      for (uint32_t i = 0; i < root.count; ++i) {
        WireValue value;
        if (!cursor_.Next(value, 1)) return false;
        if (i < 3) {
          if (!field(i, value, 1)) return false;
        } else {
          ++batch.ignored.unknown_fields;
          if (!cursor_.SkipContents(value, 1)) return false;
        }
      }
    } else if (root.kind == WireKind::kMap) {
      bool have_attn_rank = false;
      std::optional<int64_t> attn_rank;
      for (uint32_t i = 0; i < root.count; ++i) {
        WireValue key;
        WireValue value;
        if (!cursor_.Next(key, 1) || key.kind != WireKind::kStr) return false;
        if (!cursor_.Next(value, 1)) return false;
        uint32_t index = 3;
        if (key.bytes == "ts") index = 0;
        if (key.bytes == "events") index = 1;
        if (key.bytes == "data_parallel_rank") index = 2;
        if (index < 3) {
          const bool seen = index == 0 ? have_ts : index == 1 ? have_events : have_rank;
          if (seen || !field(index, value, 1)) return false;
        } else if (key.bytes == "attn_dp_rank") {
          // SGLang's name for the rank, used when the standard one is absent.
          if (have_attn_rank || !OptionalInt64(value, attn_rank)) return false;
          have_attn_rank = true;
        } else {
          ++batch.ignored.unknown_fields;
          if (!cursor_.SkipContents(value, 1)) return false;
        }
      }
      if (!have_rank && have_attn_rank) batch.dp_rank = attn_rank;
    } else {
      return false;
    }
    return have_ts && have_events && cursor_.AtEnd();
  }

 private:
  static bool Number(const WireValue& value, double& out) {
    switch (value.kind) {
      case WireKind::kFloat:
        if (!std::isfinite(value.number)) return false;
        out = value.number;
        return true;
      case WireKind::kUint:
        out = static_cast<double>(value.uint);
        return true;
      case WireKind::kInt:
        out = static_cast<double>(value.sint);
        return true;
      default:
        return false;
    }
  }

  static bool Int64(const WireValue& value, int64_t& out) {
    if (value.kind == WireKind::kInt) {
      out = value.sint;
      return true;
    }
    if (value.kind != WireKind::kUint || value.uint > static_cast<uint64_t>(kInt64Max)) {
      return false;
    }
    out = static_cast<int64_t>(value.uint);
    return true;
  }

  static bool OptionalInt64(const WireValue& value, std::optional<int64_t>& out) {
    if (value.kind == WireKind::kNil) {
      out.reset();
      return true;
    }
    int64_t v = 0;
    if (!Int64(value, v)) return false;
    out = v;
    return true;
  }

  static bool NonNegative(const WireValue& value, int64_t& out) {
    std::optional<int64_t> v;
    if (!OptionalInt64(value, v) || v.value_or(0) < 0) return false;
    out = v.value_or(0);
    return true;
  }

  static bool OptionalString(const WireValue& value, std::string* out) {
    if (value.kind == WireKind::kNil) {
      if (out != nullptr) out->clear();
      return true;
    }
    if (value.kind != WireKind::kStr || !IsValidUtf8(value.bytes)) return false;
    if (out != nullptr) out->assign(value.bytes);
    return true;
  }

  static bool Hash(const WireValue& value, EngineHash& out) {
    switch (value.kind) {
      case WireKind::kUint:
        out = value.uint;
        return true;
      case WireKind::kInt:
        out = static_cast<EngineHash>(value.sint);
        return true;
      case WireKind::kBin:
        if (value.bytes.empty()) return false;
        out = HashOfBytes(value.bytes);
        return true;
      default:
        return false;
    }
  }

  bool Hashes(const WireValue& array, uint32_t depth, std::vector<EngineHash>& out) {
    if (array.kind != WireKind::kArray) return false;
    out.reserve(array.count);
    for (uint32_t i = 0; i < array.count; ++i) {
      WireValue element;
      EngineHash hash = 0;
      if (!cursor_.Next(element, depth + 1) || !Hash(element, hash)) return false;
      out.push_back(hash);
    }
    return true;
  }

  bool TokenIds(const WireValue& array, std::vector<int64_t>& out) {
    if (array.kind != WireKind::kArray) return false;
    out.resize(array.count);
    return cursor_.NextTokenIds(out.size(), kMaxTokenId, out.data());
  }

  // The canonical JSON of an extra key (wire_values.h, CanonicalJson) for
  // the values engines put there; maps and floats are left to the object
  // path.
  bool Canonical(const WireValue& value, uint32_t depth, std::string& out) {
    switch (value.kind) {
      case WireKind::kNil:
        out += "null";
        return true;
      case WireKind::kBool:
        out += value.boolean ? "true" : "false";
        return true;
      case WireKind::kUint:
        out += std::to_string(value.uint);
        return true;
      case WireKind::kInt:
        out += std::to_string(value.sint);
        return true;
      case WireKind::kStr:
        if (!IsValidUtf8(value.bytes)) return false;
        kvgov::AppendJsonString(out, value.bytes);
        return true;
      case WireKind::kBin:
        AppendBinJson(value.bytes, out);
        return true;
      case WireKind::kArray:
        out += '[';
        for (uint32_t i = 0; i < value.count; ++i) {
          if (i > 0) out += ',';
          WireValue element;
          if (!cursor_.Next(element, depth + 1) || !Canonical(element, depth + 1, out)) {
            return false;
          }
        }
        out += ']';
        return true;
      default:
        return false;
    }
  }

  bool ExtraKeys(const WireValue& value, uint32_t depth, std::vector<std::string>& out) {
    out.clear();
    if (value.kind == WireKind::kNil) return true;
    if (value.kind != WireKind::kArray) return false;
    out.resize(value.count);
    for (std::string& key : out) {
      WireValue element;
      if (!cursor_.Next(element, depth + 1)) return false;
      // A block without extra keys is "", not "null".
      if (element.kind != WireKind::kNil && !Canonical(element, depth + 1, key)) return false;
    }
    return true;
  }

  // Reads one field's value (its header already read at `depth`).
  bool ReadField(uint8_t field, const WireValue& value, uint32_t depth, EventFields& fields) {
    fields.present |= Bit(field);
    BlockStored& s = fields.stored;
    if (field == kCacheSalt) return OptionalString(value, &fields.cache_salt);
    switch (static_cast<StoredField>(field)) {
      case kBlockHashes:
        return Hashes(value, depth, s.block_hashes);
      case kParentBlockHash: {
        if (value.kind == WireKind::kNil) return true;
        EngineHash parent = 0;
        if (!Hash(value, parent)) return false;
        s.parent_block_hash = parent;
        return true;
      }
      case kTokenIds:
        return TokenIds(value, s.token_ids);
      case kBlockSize:
        return Int64(value, s.block_size) && s.block_size > 0;
      case kLoraId: {
        std::optional<int64_t> ignored;  // deprecated: checked, not kept
        return OptionalInt64(value, ignored);
      }
      case kMedium:
        return OptionalString(value, &s.medium);
      case kLoraName:
        return OptionalString(value, &s.lora_name);
      case kExtraKeys:
        fields.extra_keys = value.kind == WireKind::kArray;
        return ExtraKeys(value, depth, s.extra_keys);
      case kGroupIdx:
        return NonNegative(value, s.group_idx);
      case kSpecKind:
        return OptionalString(value, &s.kv_cache_spec_kind);
      case kSpecSlidingWindow:
        return NonNegative(value, s.kv_cache_spec_sliding_window);
      case kLocality:
        return OptionalString(value, &s.locality);
      case kOwnership:
      case kSessionId:
        return OptionalString(value, nullptr);  // checked, not kept
      case kStoredFieldCount:
        break;
    }
    return false;
  }

  // The event's record from the fields read, the tag known.
  static bool Finish(EventType type, EventFields& fields, EngineEventBatch& batch) {
    BlockStored& s = fields.stored;
    switch (type) {
      case EventType::kStored: {
        constexpr uint32_t kRequired = Bit(kBlockHashes) | Bit(kTokenIds) | Bit(kBlockSize);
        if ((fields.present & kRequired) != kRequired) return false;
        const size_t block_size = static_cast<size_t>(s.block_size);
        if (s.token_ids.size() % block_size != 0 ||
            s.token_ids.size() / block_size != s.block_hashes.size()) {
          return false;
        }
        if (fields.extra_keys && s.extra_keys.size() != s.block_hashes.size()) return false;
        AddReportedExtraKeys(s, fields.cache_salt);
        batch.events.emplace_back(std::move(s));
        return true;
      }
      case EventType::kRemoved: {
        if ((fields.present & Bit(kBlockHashes)) == 0) return false;
        BlockRemoved removed;
        removed.block_hashes = std::move(s.block_hashes);
        removed.medium = std::move(s.medium);
        removed.group_idx = s.group_idx;
        removed.locality = std::move(s.locality);
        batch.events.emplace_back(std::move(removed));
        return true;
      }
      case EventType::kCleared:
        batch.events.emplace_back(AllBlocksCleared{});
        return true;
      case EventType::kOther:
        ++batch.ignored.unknown_event_types;
        return true;
    }
    return false;
  }

  bool Events(const WireValue& array, uint32_t depth, EngineEventBatch& batch) {
    if (array.kind != WireKind::kArray) return false;
    batch.events.reserve(array.count);
    for (uint32_t i = 0; i < array.count; ++i) {
      WireValue event;
      if (!cursor_.Next(event, depth + 1)) return false;
      const bool read = event.kind == WireKind::kArray ? PositionalEvent(event, depth + 1, batch)
                        : event.kind == WireKind::kMap ? MapEvent(event, depth + 1, batch)
                                                       : false;
      if (!read) return false;
    }
    return true;
  }

  // [tag, fields...]: the tag first, so fields go by the type's positions.
  // `depth` is where the event was read; its elements are one deeper.
  bool PositionalEvent(const WireValue& event, uint32_t depth, EngineEventBatch& batch) {
    if (event.count == 0) return false;
    const uint32_t inner = depth + 1;
    WireValue tag;
    if (!cursor_.Next(tag, inner) || tag.kind != WireKind::kStr) return false;
    const EventType type = TypeOf(tag.bytes);
    uint32_t positions = 0;
    if (type == EventType::kStored) positions = kStoredFieldCount;
    if (type == EventType::kRemoved) positions = kRemovedFieldOrder.size();
    EventFields fields;
    for (uint32_t i = 1; i < event.count; ++i) {
      WireValue value;
      if (!cursor_.Next(value, inner)) return false;
      const uint32_t k = i - 1;
      if (k < positions) {
        const uint8_t field =
            type == EventType::kStored ? static_cast<uint8_t>(k) : uint8_t{kRemovedFieldOrder[k]};
        if (!ReadField(field, value, inner, fields)) return false;
        continue;
      }
      if (type != EventType::kOther) ++batch.ignored.unknown_fields;
      if (!cursor_.SkipContents(value, inner)) return false;
    }
    return Finish(type, fields, batch);
  }

  // {"type": tag, name: value...}: fields are read as they come and sorted
  // out once the tag is known; a field the type does not have counts as
  // unknown, as the object path counts it.
  bool MapEvent(const WireValue& event, uint32_t depth, EngineEventBatch& batch) {
    const uint32_t inner = depth + 1;
    EventFields fields;
    std::string_view tag;
    bool have_tag = false;
    uint64_t unknown = 0;
    for (uint32_t i = 0; i < event.count; ++i) {
      WireValue key;
      WireValue value;
      if (!cursor_.Next(key, inner) || key.kind != WireKind::kStr) return false;
      if (!cursor_.Next(value, inner)) return false;
      if (key.bytes == "type") {
        if (have_tag || value.kind != WireKind::kStr) return false;
        tag = value.bytes;
        have_tag = true;
        continue;
      }
      const uint8_t field = FieldOf(key.bytes);
      if (field == kFieldCount) {
        ++unknown;
        if (!cursor_.SkipContents(value, inner)) return false;
        continue;
      }
      if ((fields.present & Bit(field)) != 0) return false;  // repeated
      if (!ReadField(field, value, inner, fields)) return false;
    }
    if (!have_tag) return false;
    const EventType type = TypeOf(tag);
    // What the type does not decode counts as unknown (a stored event's
    // cache_salt is its own; an unknown type's fields are not looked at).
    uint32_t own = 0;
    if (type == EventType::kStored) own = kStoredFieldBits;
    if (type == EventType::kRemoved) own = kRemovedFieldBits;
    if (type != EventType::kOther) {
      batch.ignored.unknown_fields += unknown + std::popcount(fields.present & ~own);
    }
    return Finish(type, fields, batch);
  }

  MsgpackCursor cursor_;
};

}  // namespace

std::optional<EngineEventBatch> DecodeEngineBatchInOnePass(std::string_view payload,
                                                           const MsgpackLimits& limits) {
  if (payload.empty() || payload.size() > limits.max_payload_bytes) return std::nullopt;
  try {
    EngineEventBatch batch;
    OnePass pass(payload, limits);
    if (!pass.Batch(batch)) return std::nullopt;
    return batch;
  } catch (const std::bad_alloc&) {
    return std::nullopt;  // the object path reports it
  }
}

}  // namespace kvgov::adapters::internal
