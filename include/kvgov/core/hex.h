#pragma once

// Lowercase hexadecimal, the one codec for every module: ids, digests,
// keys, and the spelling of a span digest. Pure functions; thread-safe.

#include <cstdint>
#include <string>
#include <string_view>

#include "kvgov/core/status.h"

namespace kvgov {

/// Two lowercase hex digits per byte of `bytes`, appended to `out`.
void AppendHex(std::string_view bytes, std::string& out);

/// Two lowercase hex digits per byte of `bytes`.
std::string HexEncode(std::string_view bytes);

/// The bytes `hex` spells (either case). InvalidArgument naming `what` and
/// the fault: an odd length, or the first character that is not a hex digit
/// and where it is.
Result<std::string> HexDecode(std::string_view hex, std::string_view what);

/// `value` as 16 lowercase hex digits, zero-padded: the spelling of a span
/// digest (docs/formats/envelope.md), so a block's key names the same span
/// whatever reported it. Written over `out`, which keeps its capacity.
void WriteHex64(uint64_t value, std::string& out);
std::string Hex64(uint64_t value);

/// `value` as "0x" and its lowercase hex digits without leading zeros: a
/// number in a message ("0x0" for zero).
std::string HexNumber(uint64_t value);

}  // namespace kvgov
