#pragma once

// A small synchronous Redis client over hiredis: what kvgov's replicas need
// (streams, SET NX PX claims, a load board) and nothing more. Wire and key
// layout: docs/formats/governance-log.md.

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/status.h"

namespace kvgov::replication {

/// Where Redis is: `redis://[:PASSWORD@]HOST[:PORT][/DB]`.
struct RedisEndpoint {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string password;  // never logged; Describe() leaves it out

  /// The URL without the password, for logs and errors.
  std::string Describe() const;
};

/// InvalidArgument naming what is wrong (scheme, port, db).
Result<RedisEndpoint> ParseRedisUrl(std::string_view url);

/// `url` with `password` put into it (percent-encoded), for a password kept
/// in a file rather than in the URL, where it would show in the process's
/// arguments and in --print-config. InvalidArgument when the URL has a
/// password of its own (two would be ambiguous) or does not parse.
Result<std::string> RedisUrlWithPassword(std::string_view url, std::string_view password);

/// The password a file holds (--redis-password-file): its bytes without
/// trailing whitespace, at most 1 KiB, not empty. The file must be private
/// as kvgov's other secret files (CheckSecretFileMode). Errors name the
/// file, never its content.
Result<std::string> ReadRedisPasswordFile(const std::string& path);

/// One reply, converted out of hiredis so no hiredis type leaves the module.
struct RedisReply {
  enum class Type { kNil, kString, kInteger, kArray, kStatus };
  Type type = Type::kNil;
  std::string text;  // kString, kStatus
  int64_t integer = 0;
  std::vector<RedisReply> elements;  // kArray
};

/// One connection. Connects lazily; after a broken connection the next
/// command reconnects (with AUTH and SELECT). Every call is bounded by the
/// connect and command timeouts.
///
/// Errors: Unavailable when Redis cannot be reached or the connection
/// breaks (it is dropped, and made again on the next call);
/// FailedPrecondition carrying Redis's own message for an error reply.
///
/// Thread-compatible: one thread at a time (the classes below hold one
/// per purpose behind a mutex).
class RedisConnection {
 public:
  RedisConnection(RedisEndpoint endpoint, std::chrono::milliseconds timeout);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  Result<RedisReply> Command(std::span<const std::string> args);
  Result<RedisReply> Command(std::initializer_list<std::string_view> args);
  /// For a command that blocks on the server (XREAD BLOCK): the socket
  /// timeout is `timeout` for this call only.
  Result<RedisReply> BlockingCommand(std::span<const std::string> args,
                                     std::chrono::milliseconds timeout);

  bool connected() const;

 private:
  struct Context;
  Status EnsureConnected();
  Result<RedisReply> Run(std::span<const std::string> args, std::chrono::milliseconds timeout);

  const RedisEndpoint endpoint_;
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<Context> context_;
};

}  // namespace kvgov::replication
