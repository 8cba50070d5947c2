#pragma once

// A forward-only reader of untrusted msgpack bytes that checks the limits
// as it reads: the one-pass decoder's view of a payload. Internal to
// kvgov_adapters. It allocates nothing; a str or bin is a view into the
// payload.
//
// Every read answers false, rather than an error, for anything it does not
// accept (bytes that end early, the never-used byte 0xc1, an ext, a size
// over its limit, nesting past max_depth): the one-pass decoder then gives
// the payload to the object path, which names what is wrong.
//
// Thread-compatible: one cursor per payload.

#include <cstdint>
#include <cstring>
#include <string_view>

#include "kvgov/adapters/engine_wire.h"

namespace kvgov::adapters::internal {

enum class WireKind : uint8_t { kNil, kBool, kUint, kInt, kFloat, kStr, kBin, kArray, kMap };

/// One value's header. An int whose value is >= 0 is kUint whatever its
/// encoding (msgpack-c's POSITIVE_INTEGER); kInt holds the negative ones.
struct WireValue {
  WireKind kind = WireKind::kNil;
  bool boolean = false;
  uint64_t uint = 0;
  int64_t sint = 0;
  double number = 0;       // kFloat, float32 widened as msgpack-c does
  std::string_view bytes;  // kStr, kBin
  uint32_t count = 0;      // kArray elements, kMap pairs
};

class MsgpackCursor {
 public:
  MsgpackCursor(std::string_view payload, const MsgpackLimits& limits)
      : at_(reinterpret_cast<const unsigned char*>(payload.data())),
        end_(at_ + payload.size()),
        limits_(limits) {}

  /// Reads the next value's header into `value`; a str's or bin's bytes are
  /// consumed with it, an array's or map's elements are not. `depth` is the
  /// nesting of the container holding it (0 at the top level): an array or
  /// map opened past limits.max_depth is refused, like one whose claimed
  /// elements could not each have a byte left.
  bool Next(WireValue& value, uint32_t depth);

  /// Reads the next `count` values as token ids (ints in 0..max) into
  /// `out`: the hot loop of a BlockStored, with the encodings a vocabulary
  /// takes (fixint, uint8/16/32) read in place.
  bool NextTokenIds(size_t count, int64_t max, int64_t* out);

  /// Skips the elements of `container` (read by Next at `depth`), every
  /// nested value checked against the limits as they are passed.
  bool SkipContents(const WireValue& container, uint32_t depth);
  /// Reads and skips one whole value.
  bool SkipValue(uint32_t depth);

  bool AtEnd() const { return at_ == end_; }

 private:
  bool Take(size_t n, const unsigned char*& out) {
    if (static_cast<size_t>(end_ - at_) < n) return false;
    out = at_;
    at_ += n;
    return true;
  }
  template <typename T>
  bool BigEndian(T& out) {
    const unsigned char* bytes = nullptr;
    if (!Take(sizeof(T), bytes)) return false;
    T value = 0;
    for (size_t i = 0; i < sizeof(T); ++i) value = static_cast<T>((value << 8) | bytes[i]);
    out = value;
    return true;
  }
  bool Sized(WireValue& value, WireKind kind, uint32_t size, uint32_t limit);
  bool Container(WireValue& value, WireKind kind, uint32_t count, uint32_t depth);
  // The encodings whose header is followed by a big-endian U: a value, or
  // the size or count of what follows.
  template <typename U>
  bool Unsigned(WireValue& value) {
    U v = 0;
    if (!BigEndian(v)) return false;
    value.kind = WireKind::kUint;
    value.uint = v;
    return true;
  }
  // A signed encoding; a value >= 0 reads as unsigned, as msgpack-c has it.
  template <typename U, typename S>
  bool Signed(WireValue& value) {
    U bits = 0;
    if (!BigEndian(bits)) return false;
    // Two's complement, as msgpack writes it: int 8's S is signed char,
    // read as a number on purpose.
    // NOLINTNEXTLINE(bugprone-signed-char-misuse)
    const auto v = static_cast<int64_t>(static_cast<S>(bits));
    if (v < 0) {
      value.kind = WireKind::kInt;
      value.sint = v;
    } else {
      value.kind = WireKind::kUint;
      value.uint = static_cast<uint64_t>(v);
    }
    return true;
  }
  template <typename U>
  bool SizedBy(WireValue& value, WireKind kind, uint32_t limit) {
    U size = 0;
    return BigEndian(size) && Sized(value, kind, size, limit);
  }
  template <typename U>
  bool ContainerBy(WireValue& value, WireKind kind, uint32_t depth) {
    U count = 0;
    return BigEndian(count) && Container(value, kind, count, depth);
  }

  const unsigned char* at_;
  const unsigned char* const end_;
  const MsgpackLimits& limits_;
};

}  // namespace kvgov::adapters::internal
