#include "kvgov/replication/redis.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "testing/redis_server_process.h"

namespace kvgov::replication {
namespace {

using std::chrono::milliseconds;
using test_support::RedisServerProcess;

RedisEndpoint Endpoint(const RedisServerProcess& server) {
  Result<RedisEndpoint> endpoint = ParseRedisUrl(server.url());
  EXPECT_TRUE(endpoint.ok()) << endpoint.status().ToString();
  return endpoint.ok() ? *endpoint : RedisEndpoint{};
}

TEST(ParseRedisUrlTest, AcceptsTheDocumentedForms) {
  Result<RedisEndpoint> plain = ParseRedisUrl("redis://localhost");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->host, "localhost");
  EXPECT_EQ(plain->port, 6379);
  EXPECT_EQ(plain->db, 0);
  EXPECT_EQ(plain->password, "");
  EXPECT_EQ(plain->Describe(), "redis://localhost:6379/0");

  Result<RedisEndpoint> full = ParseRedisUrl("redis://:s3cret@10.0.0.5:7000/3");
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->host, "10.0.0.5");
  EXPECT_EQ(full->port, 7000);
  EXPECT_EQ(full->db, 3);
  EXPECT_EQ(full->password, "s3cret");
  EXPECT_EQ(full->Describe(), "redis://10.0.0.5:7000/3");

  // A user name is accepted and ignored; the password is percent-decoded,
  // and the last '@' ends it.
  Result<RedisEndpoint> user = ParseRedisUrl("redis://kvgov:p%40ss:w@rd@redis.internal/");
  ASSERT_TRUE(user.ok()) << user.status().ToString();
  EXPECT_EQ(user->host, "redis.internal");
  EXPECT_EQ(user->password, "p@ss:w@rd");
  EXPECT_EQ(user->db, 0);

  Result<RedisEndpoint> ipv6 = ParseRedisUrl("redis://[::1]:6380/1");
  ASSERT_TRUE(ipv6.ok()) << ipv6.status().ToString();
  EXPECT_EQ(ipv6->host, "::1");
  EXPECT_EQ(ipv6->port, 6380);
  EXPECT_EQ(ipv6->Describe(), "redis://[::1]:6380/1");

  EXPECT_TRUE(ParseRedisUrl("REDIS://h:1").ok());
  EXPECT_TRUE(ParseRedisUrl("redis://h:65535/15").ok());
}

TEST(ParseRedisUrlTest, RefusesBadUrlsNamingThePart) {
  struct Case {
    const char* url;
    const char* prefix;
  };
  const Case cases[] = {
      {"localhost:6379", "scheme:"},
      {"http://localhost", "scheme:"},
      {"rediss://localhost", "scheme:"},
      {"redis://", "host:"},
      {"redis://:pw@", "host:"},
      {"redis://:6379", "host:"},
      {"redis://[::1", "host:"},
      {"redis://h:0", "port:"},
      {"redis://h:65536", "port:"},
      {"redis://h:-1", "port:"},
      {"redis://h:abc", "port:"},
      {"redis://h:", "port:"},
      {"redis://h:99999999999999999999", "port:"},
      {"redis://h/-1", "db:"},
      {"redis://h/x", "db:"},
      {"redis://h/1.5", "db:"},
      {"redis://h/99999999999", "db:"},
      {"redis://h?db=1", "url:"},
      {"redis://justapassword@h", "password:"},
      {"redis://:bad%zzescape@h", "password:"},
  };
  for (const Case& c : cases) {
    Result<RedisEndpoint> endpoint = ParseRedisUrl(c.url);
    ASSERT_FALSE(endpoint.ok()) << c.url;
    EXPECT_EQ(endpoint.status().code(), StatusCode::kInvalidArgument) << c.url;
    EXPECT_EQ(endpoint.status().message().rfind(c.prefix, 0), 0u)
        << c.url << " -> " << endpoint.status().message();
  }
}

TEST(ParseRedisUrlTest, ErrorsNeverShowThePassword) {
  for (const char* url : {"redis://:hunter2@h:99999", "redis://:hunter2@h/x", "redis://:hunter2@",
                          "redis://u:hunter2%@h"}) {
    Result<RedisEndpoint> endpoint = ParseRedisUrl(url);
    ASSERT_FALSE(endpoint.ok()) << url;
    EXPECT_EQ(endpoint.status().message().find("hunter2"), std::string::npos)
        << endpoint.status().message();
  }
}

class RedisConnectionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new RedisServerProcess();
    const Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  static std::string Key(std::string_view suffix) {
    return std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ":" +
           std::string(suffix);
  }

  static RedisServerProcess* server_;
};

RedisServerProcess* RedisConnectionTest::server_ = nullptr;

TEST_F(RedisConnectionTest, RunsCommandsAndConvertsEveryReplyType) {
  RedisConnection redis(Endpoint(*server_), milliseconds(2000));
  EXPECT_FALSE(redis.connected());  // lazily

  Result<RedisReply> pong = redis.Command({"PING"});
  ASSERT_TRUE(pong.ok()) << pong.status().ToString();
  EXPECT_EQ(pong->type, RedisReply::Type::kStatus);
  EXPECT_EQ(pong->text, "PONG");
  EXPECT_TRUE(redis.connected());

  // Binary-safe both ways: NUL, CR LF and high bytes survive.
  const std::string value("a\0b\r\n\xff", 6);
  ASSERT_TRUE(redis.Command({"SET", Key("bin"), value}).ok());
  Result<RedisReply> got = redis.Command({"GET", Key("bin")});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->type, RedisReply::Type::kString);
  EXPECT_EQ(got->text, value);

  Result<RedisReply> missing = redis.Command({"GET", Key("missing")});
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->type, RedisReply::Type::kNil);

  Result<RedisReply> count = redis.Command({"INCRBY", Key("n"), "-7"});
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(count->type, RedisReply::Type::kInteger);
  EXPECT_EQ(count->integer, -7);

  const std::vector<std::string> push = {"RPUSH", Key("list"), "x", "", "z"};
  ASSERT_TRUE(redis.Command(push).ok());
  Result<RedisReply> list = redis.Command({"LRANGE", Key("list"), "0", "-1"});
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->type, RedisReply::Type::kArray);
  ASSERT_EQ(list->elements.size(), 3u);
  EXPECT_EQ(list->elements[0].text, "x");
  EXPECT_EQ(list->elements[1].text, "");
  EXPECT_EQ(list->elements[2].text, "z");

  // Nested arrays: SCAN answers [cursor, [keys]].
  Result<RedisReply> scan = redis.Command({"SCAN", "0", "MATCH", Key("li*"), "COUNT", "1000"});
  ASSERT_TRUE(scan.ok());
  ASSERT_EQ(scan->type, RedisReply::Type::kArray);
  ASSERT_EQ(scan->elements.size(), 2u);
  EXPECT_EQ(scan->elements[1].type, RedisReply::Type::kArray);
}

TEST_F(RedisConnectionTest, ErrorReplyIsFailedPreconditionAndKeepsTheConnection) {
  RedisConnection redis(Endpoint(*server_), milliseconds(2000));
  ASSERT_TRUE(redis.Command({"SET", Key("text"), "not a number"}).ok());
  Result<RedisReply> incr = redis.Command({"INCR", Key("text")});
  ASSERT_FALSE(incr.ok());
  EXPECT_EQ(incr.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(incr.status().message().find("ERR"), std::string::npos) << incr.status().ToString();
  EXPECT_TRUE(redis.connected());

  Result<RedisReply> unknown = redis.Command({"NOSUCHCOMMAND"});
  EXPECT_EQ(unknown.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(redis.Command({"PING"}).ok());
  EXPECT_EQ(redis.Command(std::span<const std::string>()).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(RedisConnectionTest, SelectsTheDatabase) {
  RedisEndpoint db2 = Endpoint(*server_);
  db2.db = 2;
  RedisConnection in_db2(db2, milliseconds(2000));
  RedisConnection in_db0(Endpoint(*server_), milliseconds(2000));
  ASSERT_TRUE(in_db2.Command({"SET", Key("k"), "v"}).ok());
  Result<RedisReply> there = in_db2.Command({"GET", Key("k")});
  ASSERT_TRUE(there.ok());
  EXPECT_EQ(there->text, "v");
  Result<RedisReply> not_here = in_db0.Command({"GET", Key("k")});
  ASSERT_TRUE(not_here.ok());
  EXPECT_EQ(not_here->type, RedisReply::Type::kNil);

  RedisEndpoint too_far = Endpoint(*server_);
  too_far.db = 100000;  // beyond redis-server's 16 databases
  RedisConnection bad(too_far, milliseconds(2000));
  Result<RedisReply> refused = bad.Command({"PING"});
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("SELECT"), std::string::npos);
  EXPECT_FALSE(bad.connected());
}

TEST_F(RedisConnectionTest, BlockingCommandTimesOutAsUnavailableThenReconnects) {
  RedisConnection redis(Endpoint(*server_), milliseconds(2000));
  const std::vector<std::string> blpop = {"BLPOP", Key("empty"), "5"};
  const auto start = std::chrono::steady_clock::now();
  Result<RedisReply> reply = redis.BlockingCommand(blpop, milliseconds(200));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(reply.status().message().find("timed out after 200 ms"), std::string::npos)
      << reply.status().ToString();
  EXPECT_LT(elapsed, std::chrono::seconds(3));
  EXPECT_FALSE(redis.connected());
  EXPECT_TRUE(redis.Command({"PING"}).ok());
}

// --redis-password-file: the file's password goes into the URL escaped, so
// the URL parser gives back exactly the bytes the file held.
TEST(RedisUrlWithPasswordTest, EscapesThePasswordAndRoundTripsThroughTheParser) {
  for (const std::string password : {"plain", "p@ss/w:rd", "100%", "sp ace#?"}) {
    Result<std::string> url = RedisUrlWithPassword("redis://kvgov-redis:6380/2", password);
    ASSERT_TRUE(url.ok()) << url.status().ToString();
    Result<RedisEndpoint> endpoint = ParseRedisUrl(*url);
    ASSERT_TRUE(endpoint.ok()) << *url << ": " << endpoint.status().ToString();
    EXPECT_EQ(endpoint->password, password);
    EXPECT_EQ(endpoint->host, "kvgov-redis");
    EXPECT_EQ(endpoint->port, 6380);
    EXPECT_EQ(endpoint->db, 2);
  }
}

TEST(RedisUrlWithPasswordTest, RefusesAUrlWithAPasswordOfItsOwn) {
  Result<std::string> url = RedisUrlWithPassword("redis://:inline@host", "fromfile");
  EXPECT_EQ(url.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(url.status().message().find("inline"), std::string::npos);
  EXPECT_EQ(url.status().message().find("fromfile"), std::string::npos);
  EXPECT_EQ(RedisUrlWithPassword("http://host", "x").status().code(), StatusCode::kInvalidArgument);
}

TEST(RedisConnectionAuthTest, AuthenticatesWithThePasswordAndNeverShowsIt) {
  RedisServerProcess server;
  ASSERT_TRUE(server.Start().ok());
  {
    RedisConnection admin(Endpoint(server), milliseconds(2000));
    ASSERT_TRUE(admin.Command({"CONFIG", "SET", "requirepass", "open sesame"}).ok());
  }
  RedisEndpoint good = Endpoint(server);
  good.password = "open sesame";
  RedisConnection authed(good, milliseconds(2000));
  Result<RedisReply> pong = authed.Command({"PING"});
  EXPECT_TRUE(pong.ok()) << pong.status().ToString();

  RedisEndpoint wrong = Endpoint(server);
  wrong.password = "wrong-guess-xyz";
  RedisConnection refused(wrong, milliseconds(2000));
  Result<RedisReply> reply = refused.Command({"PING"});
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(reply.status().message().find("AUTH"), std::string::npos);
  EXPECT_EQ(reply.status().message().find("wrong-guess-xyz"), std::string::npos)
      << reply.status().ToString();
  EXPECT_FALSE(refused.connected());

  RedisConnection anonymous(Endpoint(server), milliseconds(2000));
  EXPECT_EQ(anonymous.Command({"GET", "k"}).status().code(), StatusCode::kFailedPrecondition);
}

TEST(RedisConnectionRestartTest, UnavailableWhileRedisIsGoneThenReconnects) {
  RedisServerProcess server;
  ASSERT_TRUE(server.Start().ok());
  const RedisEndpoint endpoint = Endpoint(server);
  RedisConnection redis(endpoint, milliseconds(1000));
  ASSERT_TRUE(redis.Command({"SET", "k", "v"}).ok());
  ASSERT_TRUE(redis.connected());

  server.Kill();
  Result<RedisReply> broken = redis.Command({"GET", "k"});
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(broken.status().message().find(endpoint.Describe()), std::string::npos)
      << broken.status().ToString();
  EXPECT_FALSE(redis.connected());

  // Nothing listens now: the reconnect itself fails, as Unavailable.
  Result<RedisReply> refused = redis.Command({"GET", "k"});
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("connect"), std::string::npos)
      << refused.status().ToString();

  ASSERT_TRUE(server.Restart().ok());
  Result<RedisReply> again = redis.Command({"GET", "k"});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->type, RedisReply::Type::kNil);  // nothing persisted
  EXPECT_TRUE(redis.connected());
}

// A connection Redis dropped while it sat idle (here: Redis restarted in
// between) is found closed before the next command is sent on it, so that
// command is the first on a new connection and succeeds: the caller never
// sees the old connection's failure.
TEST(RedisConnectionRestartTest, AConnectionClosedWhileIdleIsMadeAnewBeforeTheNextCommand) {
  RedisServerProcess server;
  ASSERT_TRUE(server.Start().ok());
  RedisConnection redis(Endpoint(server), milliseconds(1000));
  ASSERT_TRUE(redis.Command({"SET", "k", "v"}).ok());
  server.Kill();
  ASSERT_TRUE(server.Restart().ok());
  ASSERT_TRUE(redis.connected());  // it does not know yet

  Result<RedisReply> first = redis.Command({"SET", "k", "again"});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->type, RedisReply::Type::kStatus);
  Result<RedisReply> read = redis.Command({"GET", "k"});
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->text, "again");
}

}  // namespace
}  // namespace kvgov::replication
