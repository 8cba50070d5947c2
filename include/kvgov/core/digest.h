#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace kvgov {

/// Lowercase hex SHA-256 of raw bytes.
std::string Sha256Hex(std::string_view bytes);

/// Lowercase hex SHA-256 over a domain tag and a list of fields, each framed
/// as an 8-byte big-endian length followed by its bytes. The framing makes
/// the digest injective over field lists: ("a","bc") and ("ab","c") differ,
/// and so do fields that contain NUL. The domain tag keeps digests of
/// different record kinds apart. Format: docs/formats/envelope.md.
std::string DigestFields(std::string_view domain, std::initializer_list<std::string_view> fields);

/// Digest of a token-id sequence: domain "kvgov.token_ids.v1", the count,
/// then each id as an 8-byte big-endian two's-complement int64.
std::string DigestTokenIds(std::span<const int64_t> token_ids);

/// Lowercase hex HMAC-SHA256 (RFC 2104) of `message` under `key`.
std::string HmacSha256Hex(std::string_view key, std::string_view message);

}  // namespace kvgov
