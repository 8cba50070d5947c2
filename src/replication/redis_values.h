#pragma once

// Internal to kvgov_replication: what the stores it keeps in Redis share
// (the governance log, the claims, the boards, the snapshot store): untrusted
// JSON parsed with bounds, a reply's shape checked, keys scanned and read in
// bounded batches. Pure functions but for the Redis round trips; a
// connection is the caller's (thread-compatible).

#include <chrono>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvgov/core/status.h"
#include "kvgov/replication/redis.h"

namespace kvgov::replication::redis_values {

using Json = nlohmann::json;

/// For messages: at most 64 bytes of untrusted text, printable ASCII only,
/// so a hostile value cannot put control bytes into a log line.
std::string Quoted(std::string_view text);

/// InvalidArgument "<path>: <problem>".
Status FieldError(std::string_view path, std::string_view problem);

/// Untrusted JSON, the caller having checked its size: nested at most 8
/// levels, a key repeated in one object refused (nlohmann would keep the
/// last silently). Never throws.
Result<Json> ParseBounded(std::string_view text, std::string_view noun);

/// Members of an object, named in errors by `path`.
Result<std::string> StringField(const Json& object, std::string_view name, std::string_view path);
Result<int64_t> IntegerField(const Json& object, std::string_view name, std::string_view path);
/// An array of [string, string].
Result<std::vector<std::pair<std::string, std::string>>> StringPairs(const Json& object,
                                                                     std::string_view name);

/// Unavailable: the reply to `command` is not what Redis sends.
Status UnexpectedReply(std::string_view command, std::string_view problem);
/// Decimal digits only, no sign, fitting in 64 bits.
bool ParseUint64(std::string_view text, uint64_t* out);
/// An integer reply of a script: 1 is true.
Result<bool> IntegerAsBool(const Result<RedisReply>& reply, std::string_view command);
/// InvalidArgument below 1 ms.
Status CheckTtl(std::chrono::milliseconds ttl);

/// Every key under `prefix` but `skip` (SCAN, each key once); at most
/// 65,536 keys and 2^20 rounds, ResourceExhausted past either.
Result<std::set<std::string>> ScanKeys(RedisConnection& connection, const std::string& prefix,
                                       const std::string& skip);
/// MGET of `keys` in batches of 100; `each` gets every string value (a key
/// that expired in between answers nil and is left out).
Status MgetEach(RedisConnection& connection, const std::set<std::string>& keys,
                const std::function<void(const std::string&)>& each);

}  // namespace kvgov::replication::redis_values
