// The boards replicas publish to one another with a TTL: each one's load
// by worker, and the newest log entry each has applied.

#include "kvgov/replication/governance_log.h"

#include <limits>
#include <map>
#include <set>

#include "kvgov/core/utf8.h"
#include "replication/redis_values.h"

namespace kvgov::replication {
namespace {

using redis_values::CheckTtl;
using redis_values::FieldError;
using redis_values::Json;
using redis_values::MgetEach;
using redis_values::ParseBounded;
using redis_values::Quoted;
using redis_values::ScanKeys;
using redis_values::UnexpectedReply;

// A load board value is a handful of worker counts.
constexpr size_t kMaxLoadValueBytes = size_t{1} << 20;

// A peer's published load, or nullopt when it is not what Publish writes.
std::optional<std::map<std::string, uint64_t, std::less<>>> DecodeLoad(std::string_view text) {
  if (text.size() > kMaxLoadValueBytes) return std::nullopt;
  Result<Json> parsed = ParseBounded(text, "load");
  if (!parsed.ok() || !parsed->is_object()) return std::nullopt;
  std::map<std::string, uint64_t, std::less<>> load;
  for (const auto& [worker, blocks] : parsed->items()) {
    if (!blocks.is_number_unsigned()) return std::nullopt;
    load[worker] = blocks.get<uint64_t>();
  }
  return load;
}

}  // namespace

LoadBoard::LoadBoard(const RedisEndpoint& endpoint, std::string key_prefix, std::string replica_id,
                     std::chrono::milliseconds ttl, std::chrono::milliseconds timeout)
    : prefix_(std::move(key_prefix)),
      replica_id_(std::move(replica_id)),
      ttl_(ttl),
      connection_(endpoint, timeout) {}

Status LoadBoard::Publish(const std::map<std::string, uint64_t, std::less<>>& blocks_by_worker) {
  KVGOV_RETURN_IF_ERROR(CheckTtl(ttl_));
  Json object = Json::object();
  for (const auto& [worker, blocks] : blocks_by_worker) {
    if (!IsValidUtf8(worker)) {
      return FieldError("worker " + Quoted(worker), "not valid UTF-8");
    }
    object[worker] = blocks;
  }
  const std::string args[] = {"SET", prefix_ + replica_id_, object.dump(), "PX",
                              std::to_string(ttl_.count())};
  MutexLock lock(mu_);
  KVGOV_ASSIGN_OR_RETURN(RedisReply reply, connection_.Command(args));
  if (reply.type != RedisReply::Type::kStatus || reply.text != "OK") {
    return UnexpectedReply("SET", "want OK");
  }
  return Status::Ok();
}

Result<std::map<std::string, uint64_t, std::less<>>> LoadBoard::PeerTotals() {
  MutexLock lock(mu_);
  KVGOV_ASSIGN_OR_RETURN(std::set<std::string> keys,
                         ScanKeys(connection_, prefix_, prefix_ + replica_id_));
  std::map<std::string, uint64_t, std::less<>> totals;
  KVGOV_RETURN_IF_ERROR(MgetEach(connection_, keys, [&](const std::string& value) {
    const auto load = DecodeLoad(value);
    if (!load.has_value()) return;
    for (const auto& [worker, blocks] : *load) {
      uint64_t& total = totals[worker];
      total = blocks > std::numeric_limits<uint64_t>::max() - total
                  ? std::numeric_limits<uint64_t>::max()
                  : total + blocks;
    }
  }));
  return totals;
}

AppliedBoard::AppliedBoard(const RedisEndpoint& endpoint, std::string key_prefix,
                           std::string replica_id, std::chrono::milliseconds ttl,
                           std::chrono::milliseconds timeout)
    : prefix_(std::move(key_prefix)),
      replica_id_(std::move(replica_id)),
      ttl_(ttl),
      connection_(endpoint, timeout) {}

Status AppliedBoard::Publish(const StreamId& applied) {
  KVGOV_RETURN_IF_ERROR(CheckTtl(ttl_));
  MutexLock lock(mu_);
  KVGOV_ASSIGN_OR_RETURN(
      RedisReply reply, connection_.Command({"SET", prefix_ + replica_id_, applied.ToString(), "PX",
                                             std::to_string(ttl_.count())}));
  if (reply.type != RedisReply::Type::kStatus || reply.text != "OK") {
    return UnexpectedReply("SET", "want OK");
  }
  return Status::Ok();
}

Result<std::optional<StreamId>> AppliedBoard::Lowest() {
  MutexLock lock(mu_);
  KVGOV_ASSIGN_OR_RETURN(std::set<std::string> keys, ScanKeys(connection_, prefix_, ""));
  std::optional<StreamId> lowest;
  KVGOV_RETURN_IF_ERROR(MgetEach(connection_, keys, [&](const std::string& value) {
    // A value that is not an id is not a replica's: it holds nothing back.
    Result<StreamId> id = ParseStreamId(value);
    if (id.ok() && (!lowest || *id < *lowest)) lowest = *id;
  }));
  return lowest;
}

}  // namespace kvgov::replication
