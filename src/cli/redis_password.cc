#include "cli/redis_password.h"

#include "kvgov/replication/redis.h"

namespace kvgov::cli {

Result<std::string> WithRedisPasswordFile(const std::string& redis_url,
                                          const std::string& password_file) {
  if (redis_url.empty()) {
    return Status::InvalidArgument(
        "--redis-password-file: the password of --redis, which is not "
        "given");
  }
  KVGOV_ASSIGN_OR_RETURN(const std::string password,
                         replication::ReadRedisPasswordFile(password_file));
  Result<std::string> url = replication::RedisUrlWithPassword(redis_url, password);
  if (!url.ok()) return url.status().WithContext("--redis");
  return url;
}

}  // namespace kvgov::cli
