// Claims (docs/formats/governance-log.md, "Claims"): a name held by one
// replica at a time, for a TTL it renews.

#include "kvgov/replication/governance_log.h"

#include "replication/redis_values.h"

namespace kvgov::replication {
namespace {

using redis_values::CheckTtl;
using redis_values::IntegerAsBool;
using redis_values::UnexpectedReply;

// Claim scripts: each compares the holder with the caller before it
// touches the key, atomically, so a replica whose claim lapsed and was
// taken by another never extends or drops the new holder's claim.
constexpr std::string_view kAcquireScript = R"lua(
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
)lua";

constexpr std::string_view kRenewScript = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
)lua";

constexpr std::string_view kReleaseScript = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
)lua";

}  // namespace

ClaimStore::ClaimStore(const RedisEndpoint& endpoint, std::string key_prefix,
                       std::chrono::milliseconds timeout)
    : prefix_(std::move(key_prefix)), connection_(endpoint, timeout) {}

Result<bool> ClaimStore::Acquire(std::string_view name, std::string_view owner,
                                 std::chrono::milliseconds ttl) {
  KVGOV_RETURN_IF_ERROR(CheckTtl(ttl));
  if (owner.empty()) return Status::InvalidArgument("owner: empty");
  const std::string key = prefix_ + std::string(name);
  const std::string ttl_text = std::to_string(ttl.count());
  MutexLock lock(mu_);
  // The common case, a free claim, takes one plain command; the script is
  // for a claim that is held, possibly by `owner` itself.
  KVGOV_ASSIGN_OR_RETURN(RedisReply set,
                         connection_.Command({"SET", key, owner, "NX", "PX", ttl_text}));
  if (set.type == RedisReply::Type::kStatus && set.text == "OK") return true;
  if (set.type != RedisReply::Type::kNil) return UnexpectedReply("SET", "want OK or nil");
  return IntegerAsBool(connection_.Command({"EVAL", kAcquireScript, "1", key, owner, ttl_text}),
                       "EVAL");
}

Result<bool> ClaimStore::Renew(std::string_view name, std::string_view owner,
                               std::chrono::milliseconds ttl) {
  KVGOV_RETURN_IF_ERROR(CheckTtl(ttl));
  const std::string key = prefix_ + std::string(name);
  const std::string ttl_text = std::to_string(ttl.count());
  MutexLock lock(mu_);
  return IntegerAsBool(connection_.Command({"EVAL", kRenewScript, "1", key, owner, ttl_text}),
                       "EVAL");
}

Status ClaimStore::Release(std::string_view name, std::string_view owner) {
  const std::string key = prefix_ + std::string(name);
  MutexLock lock(mu_);
  return IntegerAsBool(connection_.Command({"EVAL", kReleaseScript, "1", key, owner}), "EVAL")
      .status();
}

Result<std::optional<std::string>> ClaimStore::Holder(std::string_view name) {
  const std::string key = prefix_ + std::string(name);
  MutexLock lock(mu_);
  KVGOV_ASSIGN_OR_RETURN(RedisReply reply, connection_.Command({"GET", key}));
  if (reply.type == RedisReply::Type::kNil) return std::optional<std::string>();
  if (reply.type != RedisReply::Type::kString)
    return UnexpectedReply("GET", "want a string or nil");
  return std::optional<std::string>(std::move(reply.text));
}

}  // namespace kvgov::replication
