#include "adapters/msgpack_cursor.h"

#include <bit>

namespace kvgov::adapters::internal {

bool MsgpackCursor::Sized(WireValue& value, WireKind kind, uint32_t size, uint32_t limit) {
  if (size > limit) return false;
  const unsigned char* bytes = nullptr;
  if (!Take(size, bytes)) return false;
  value.kind = kind;
  value.bytes = {reinterpret_cast<const char*>(bytes), size};
  return true;
}

bool MsgpackCursor::Container(WireValue& value, WireKind kind, uint32_t count, uint32_t depth) {
  const bool map = kind == WireKind::kMap;
  if (count > (map ? limits_.max_map : limits_.max_array)) return false;
  if (depth + 1 > limits_.max_depth) return false;
  // Every element takes at least one byte: a count the rest of the payload
  // cannot hold is a lie, refused before anyone sizes a vector by it.
  const uint64_t least = map ? uint64_t{count} * 2 : count;
  if (least > static_cast<uint64_t>(end_ - at_)) return false;
  value.kind = kind;
  value.count = count;
  return true;
}

bool MsgpackCursor::Next(WireValue& value, uint32_t depth) {
  if (at_ == end_) return false;
  const unsigned char lead = *at_++;
  if (lead <= 0x7f) {
    value.kind = WireKind::kUint;
    value.uint = lead;
    return true;
  }
  if (lead >= 0xe0) {
    value.kind = WireKind::kInt;
    value.sint = static_cast<int64_t>(lead) - 0x100;  // 111xxxxx: -32 to -1
    return true;
  }
  if (lead >= 0xa0 && lead <= 0xbf)
    return Sized(value, WireKind::kStr, lead & 0x1fu, limits_.max_str);
  if (lead >= 0x90 && lead <= 0x9f) return Container(value, WireKind::kArray, lead & 0x0fu, depth);
  if (lead >= 0x80 && lead <= 0x8f) return Container(value, WireKind::kMap, lead & 0x0fu, depth);
  switch (lead) {
    case 0xc0:
      value.kind = WireKind::kNil;
      return true;
    case 0xc2:
    case 0xc3:
      value.kind = WireKind::kBool;
      value.boolean = lead == 0xc3;
      return true;
    case 0xcc:
      return Unsigned<uint8_t>(value);
    case 0xcd:
      return Unsigned<uint16_t>(value);
    case 0xce:
      return Unsigned<uint32_t>(value);
    case 0xcf:
      return Unsigned<uint64_t>(value);
    case 0xd0:
      return Signed<uint8_t, int8_t>(value);
    case 0xd1:
      return Signed<uint16_t, int16_t>(value);
    case 0xd2:
      return Signed<uint32_t, int32_t>(value);
    case 0xd3:
      return Signed<uint64_t, int64_t>(value);
    case 0xca: {
      uint32_t bits = 0;
      if (!BigEndian(bits)) return false;
      float f = 0;
      std::memcpy(&f, &bits, sizeof(f));
      value.kind = WireKind::kFloat;
      value.number = f;
      return true;
    }
    case 0xcb: {
      uint64_t bits = 0;
      if (!BigEndian(bits)) return false;
      std::memcpy(&value.number, &bits, sizeof(value.number));
      value.kind = WireKind::kFloat;
      return true;
    }
    case 0xd9:
      return SizedBy<uint8_t>(value, WireKind::kStr, limits_.max_str);
    case 0xda:
      return SizedBy<uint16_t>(value, WireKind::kStr, limits_.max_str);
    case 0xdb:
      return SizedBy<uint32_t>(value, WireKind::kStr, limits_.max_str);
    case 0xc4:
      return SizedBy<uint8_t>(value, WireKind::kBin, limits_.max_bin);
    case 0xc5:
      return SizedBy<uint16_t>(value, WireKind::kBin, limits_.max_bin);
    case 0xc6:
      return SizedBy<uint32_t>(value, WireKind::kBin, limits_.max_bin);
    case 0xdc:
      return ContainerBy<uint16_t>(value, WireKind::kArray, depth);
    case 0xdd:
      return ContainerBy<uint32_t>(value, WireKind::kArray, depth);
    case 0xde:
      return ContainerBy<uint16_t>(value, WireKind::kMap, depth);
    case 0xdf:
      return ContainerBy<uint32_t>(value, WireKind::kMap, depth);
    default:
      // 0xc1 (never used) and every ext: the object path decides.
      return false;
  }
}

bool MsgpackCursor::NextTokenIds(size_t count, int64_t max, int64_t* out) {
  const unsigned char* at = at_;
  for (size_t i = 0; i < count; ++i) {
    uint64_t value = 0;
    // A vocabulary's ids are fixints and uint8/16/32, split about evenly
    // between uint16 and uint32 for a 128k vocabulary: read without a branch
    // on the width, from 8 bytes loaded at once while 9 remain.
    uint64_t word = 0;
    unsigned lead = 0xc1;
    if (end_ - at >= 9) {
      std::memcpy(&word, at, sizeof(word));
      if constexpr (std::endian::native == std::endian::little) word = __builtin_bswap64(word);
      lead = static_cast<unsigned>(word >> 56);
    }
    const bool fixint = lead <= 0x7f;
    if (fixint || lead - 0xccu <= 2u) {
      const unsigned width = fixint ? 0u : 1u << (lead - 0xccu);  // bytes after the lead
      const unsigned shift = 64u - 8u * (width == 0 ? 1u : width);
      value = fixint ? lead : (word << 8) >> shift;
      at += 1 + width;
    } else {
      // Near the end, or another encoding: the general reader.
      at_ = at;
      WireValue general;
      if (!Next(general, 0) || general.kind != WireKind::kUint) return false;
      value = general.uint;
      at = at_;
    }
    if (value > static_cast<uint64_t>(max)) return false;
    out[i] = static_cast<int64_t>(value);
  }
  at_ = at;
  return true;
}

bool MsgpackCursor::SkipContents(const WireValue& container, uint32_t depth) {
  uint64_t values = 0;
  if (container.kind == WireKind::kArray) values = container.count;
  if (container.kind == WireKind::kMap) values = uint64_t{container.count} * 2;
  for (uint64_t i = 0; i < values; ++i) {
    if (!SkipValue(depth + 1)) return false;
  }
  return true;
}

bool MsgpackCursor::SkipValue(uint32_t depth) {
  WireValue value;
  return Next(value, depth) && SkipContents(value, depth);
}

}  // namespace kvgov::adapters::internal
