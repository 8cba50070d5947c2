#pragma once

// Internal to kvgov_cert. The one canonical JSON encoder of kvgov's signed
// documents (RFC 8785, JCS, over the value space the certificate schema
// uses), and the strict parser that reads them back. Format:
// docs/formats/certificate.md, section 3.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "json/bounded_json.h"
#include "kvgov/core/status.h"

namespace kvgov::cert_internal {

using json_internal::ChildPath;
using json_internal::IndexPath;
using json_internal::Json;
using json_internal::ParseJson;
using json_internal::ParseLimits;
using json_internal::PathError;

/// The largest integer magnitude a canonical document may hold: 2^53 - 1,
/// the last integer an IEEE-754 double (JCS's number model) holds exactly,
/// so that JCS's number rule prints every integer we write as its plain
/// decimal digits.
inline constexpr uint64_t kMaxSafeInteger = (uint64_t{1} << 53) - 1;

/// The RFC 8785 canonical form of `value`, for the subset of JSON that
/// kvgov signs:
///  - objects, with keys sorted by their UTF-16 code units (every key must
///    be ASCII, where that order is plain byte order);
///  - arrays, in their order;
///  - strings, valid UTF-8, with the minimal escapes (\" \\ \b \f \n \r \t,
///    other controls below 0x20 as \u00xx in lowercase hex, everything else
///    as its UTF-8 bytes);
///  - integers in [-(2^53-1), 2^53-1], as decimal digits;
///  - true and false.
/// No whitespace anywhere. Returns InvalidArgument naming the path ("$.a[2]")
/// for a non-ASCII key, invalid UTF-8, an integer out of range, a float, a
/// null or a binary value.
Result<std::string> CanonicalJson(const Json& value);

/// Appends the JCS form of one string (quotes included) to `out`.
/// InvalidArgument when `text` is not valid UTF-8 (overlong forms,
/// surrogates and code points past U+10FFFF are invalid).
Status AppendCanonicalString(std::string_view text, std::string& out);

}  // namespace kvgov::cert_internal
