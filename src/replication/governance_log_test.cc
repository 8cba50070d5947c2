#include "kvgov/replication/governance_log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <limits>
#include <string>
#include <thread>

#include "testing/redis_server_process.h"

namespace kvgov::replication {
namespace {

using std::chrono::milliseconds;
using test_support::RedisServerProcess;
using Clock = std::chrono::steady_clock;
using Load = std::map<std::string, uint64_t, std::less<>>;

constexpr milliseconds kTimeout(2000);

LogEntry SampleEntry() {
  LogEntry entry;
  entry.write_id = "w-1";
  entry.origin = "replica-a";
  entry.actor = "token:ops";
  entry.kind = "worker.drain";
  entry.subject = "w1";
  entry.payload = R"({"reason":"maintenance","note":"é \"quoted\"\n"})";
  entry.time_ms = 1796000000123;
  entry.writes = {
      {.column = "governance", .key = "drain/w1", .value = std::string(R"({"since":1})")},
      {.column = "tokens", .key = "gateway", .value = std::nullopt},
      {.column = "governance", .key = "lease/l1", .value = std::string()},
  };
  return entry;
}

TEST(LogEntryCodecTest, RoundTripsEveryField) {
  const LogEntry entry = SampleEntry();
  const std::string encoded = EncodeLogEntry(entry);
  EXPECT_EQ(
      encoded.rfind(
          R"({"v":3,"write_id":"w-1","origin":"replica-a","actor":"token:ops","kind":"worker.drain",)",
          0),
      0u)
      << encoded;
  EXPECT_NE(encoded.find(R"({"column":"tokens","key":"gateway","erase":true})"), std::string::npos)
      << encoded;

  Result<LogEntry> decoded = DecodeLogEntry(encoded, "5-1");
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  LogEntry expected = entry;
  expected.id = "5-1";
  EXPECT_EQ(*decoded, expected);

  // A state-only entry (empty kind, no writes) and extreme times survive too.
  LogEntry heartbeat;
  heartbeat.write_id = "0123456789abcdef0123456789abcdef";
  heartbeat.origin = "r";
  heartbeat.time_ms = std::numeric_limits<int64_t>::min();
  Result<LogEntry> again = DecodeLogEntry(EncodeLogEntry(heartbeat), "");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, heartbeat);
}

// Entries a version-1 replica appended still apply, without an actor; a
// version-1 entry that names one is not a version-1 entry.
TEST(LogEntryCodecTest, ReadsVersion1Entries) {
  const std::string v1 =
      R"({"v":1,"origin":"o","kind":"k","subject":"s","payload":"p","time_ms":1,"writes":[]})";
  Result<LogEntry> entry = DecodeLogEntry(v1, "1-0");
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  EXPECT_EQ(entry->origin, "o");
  EXPECT_EQ(entry->actor, "");
  EXPECT_EQ(entry->kind, "k");

  Result<LogEntry> with_actor = DecodeLogEntry(
      R"({"v":1,"origin":"o","actor":"local","kind":"k","subject":"s","payload":"p","time_ms":1,"writes":[]})",
      "1-0");
  ASSERT_FALSE(with_actor.ok());
  EXPECT_EQ(with_actor.status().message(), "'actor': unknown field");

  Result<LogEntry> without_actor = DecodeLogEntry(
      R"({"v":2,"origin":"o","kind":"k","subject":"s","payload":"p","time_ms":1,"writes":[]})",
      "1-0");
  ASSERT_FALSE(without_actor.ok());
  EXPECT_EQ(without_actor.status().message(), "actor: missing");

  Result<LogEntry> with_write_id = DecodeLogEntry(
      R"({"v":2,"write_id":"w","origin":"o","actor":"","kind":"k","subject":"s","payload":"p","time_ms":1,"writes":[]})",
      "1-0");
  ASSERT_FALSE(with_write_id.ok());
  EXPECT_EQ(with_write_id.status().message(), "'write_id': unknown field");

  Result<LogEntry> future = DecodeLogEntry(R"({"v":4})", "1-0");
  ASSERT_FALSE(future.ok());
  EXPECT_EQ(future.status().message(), "v: version 4 is not supported (want 1 to 3)");
}

// Version 3 carries the writer's write id, which must be a short plain
// token; a version-2 entry still reads, with no write id (never deduplicated).
TEST(LogEntryCodecTest, Version3CarriesAWriteId) {
  Result<LogEntry> v2 = DecodeLogEntry(
      R"({"v":2,"origin":"o","actor":"a","kind":"k","subject":"s","payload":"p","time_ms":1,"writes":[]})",
      "1-0");
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_EQ(v2->write_id, "");
  const std::string rest =
      R"("origin":"o","actor":"a","kind":"k","subject":"s","payload":"p","time_ms":1,"writes":[]})";
  // Left out, it is an entry never deduplicated, as an older version's is,
  // and it encodes back the same way (kvgov's Append always writes one).
  Result<LogEntry> unnamed = DecodeLogEntry(R"({"v":3,)" + rest, "1-0");
  ASSERT_TRUE(unnamed.ok()) << unnamed.status().ToString();
  EXPECT_EQ(unnamed->write_id, "");
  Result<LogEntry> again = DecodeLogEntry(EncodeLogEntry(*unnamed), "1-0");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, *unnamed);
  const std::pair<std::string, std::string> bad[] = {
      {R"({"v":3,"write_id":"",)" + rest, "write_id: want 1 to 64 characters"},
      {R"({"v":3,"write_id":")" + std::string(65, 'a') + R"(",)" + rest,
       "write_id: want 1 to 64 characters"},
      {R"({"v":3,"write_id":"a b",)" + rest,
       "write_id: want letters, digits, '-', '_' or '.' only"},
      {R"({"v":3,"write_id":7,)" + rest, "write_id: want a string"},
  };
  for (const auto& [text, message] : bad) {
    Result<LogEntry> decoded = DecodeLogEntry(text, "1-0");
    ASSERT_FALSE(decoded.ok()) << text;
    EXPECT_EQ(decoded.status().message(), message) << text;
  }
}

TEST(LogEntryCodecTest, DecodeErrorsNameTheField) {
  const std::string base = R"("origin":"o","kind":"k","subject":"s","payload":"p","time_ms":1)";
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {"not json", "entry: not valid JSON"},
      {"{\"v\":1,", "entry: not valid JSON"},
      {"{} trailing", "entry: not valid JSON"},
      {"[1]", "entry: want an object"},
      {"{" + base + R"(,"writes":[]})", "v: missing"},
      {R"({"v":"1",)" + base + R"(,"writes":[]})", "v: want an integer"},
      {R"({"v":1.0,)" + base + R"(,"writes":[]})", "v: want an integer"},
      {R"({"v":9,)" + base + R"(,"writes":[]})", "v: version 9 is not supported (want 1 to 3)"},
      {R"({"v":1,"origin":7,"kind":"k","subject":"s","payload":"p","time_ms":1,"writes":[]})",
       "origin: want a string"},
      {R"({"v":1,"origin":"o","subject":"s","payload":"p","time_ms":1,"writes":[]})",
       "kind: missing"},
      {R"({"v":1,"origin":"o","kind":"k","subject":"s","payload":"p","time_ms":1.5,"writes":[]})",
       "time_ms: want an integer"},
      {R"({"v":1,"origin":"o","kind":"k","subject":"s","payload":"p","time_ms":9223372036854775808,"writes":[]})",
       "time_ms: out of range for a signed 64-bit integer"},
      {R"({"v":1,)" + base + "}", "writes: missing"},
      {R"({"v":1,)" + base + R"(,"writes":{}})", "writes: want an array"},
      {R"({"v":1,)" + base + R"(,"writes":["x"]})", "writes[0]: want an object"},
      {R"({"v":1,)" + base + R"(,"writes":[{"column":"governance","value":"x"}]})",
       "writes[0].key: missing"},
      {R"({"v":1,)" + base + R"(,"writes":[{"key":"k","value":"x"}]})",
       "writes[0].column: missing"},
      {R"({"v":1,)" + base +
           R"(,"writes":[{"column":"tokens","key":"a","erase":true},{"column":"x","key":"k","value":"v"}]})",
       "writes[1].column: unknown column 'x'"},
      {R"({"v":1,)" + base + R"(,"writes":[{"column":"tokens","key":"k","value":3}]})",
       "writes[0].value: want a string"},
      {R"({"v":1,)" + base + R"(,"writes":[{"column":"tokens","key":"k"}]})",
       "writes[0]: want 'value' or 'erase': true"},
      {R"({"v":1,)" + base +
           R"(,"writes":[{"column":"tokens","key":"k","value":"v","erase":true}]})",
       "writes[0]: has both 'value' and 'erase'"},
      {R"({"v":1,)" + base + R"(,"writes":[{"column":"tokens","key":"k","erase":false}]})",
       "writes[0].erase: want true (leave it out to write a value)"},
      {R"({"v":1,)" + base + R"(,"writes":[{"column":"tokens","key":"k","erase":true,"x":1}]})",
       "writes[0].'x': unknown field"},
      {R"({"v":1,)" + base + R"(,"writes":[],"extra":1})", "'extra': unknown field"},
      {R"({"v":1,)" + base + R"(,"origin":"again","writes":[]})",
       "'origin': key appears twice in one object"},
      {R"({"v":1,)" + base + R"(,"writes":[[[[[[[[[[1]]]]]]]]]]})",
       "entry: nested deeper than 8 levels"},
  };
  for (const Case& c : cases) {
    Result<LogEntry> entry = DecodeLogEntry(c.text, "1-0");
    ASSERT_FALSE(entry.ok()) << c.text;
    EXPECT_EQ(entry.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_EQ(entry.status().message(), c.message) << c.text;
  }

  const std::string huge(kMaxLogEntryBytes + 1, ' ');
  Result<LogEntry> too_large = DecodeLogEntry(huge, "1-0");
  EXPECT_EQ(too_large.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_large.status().message().find("over the limit"), std::string::npos);
}

TEST(StreamIdTest, ParsesOnlyMsDashSeq) {
  Result<StreamId> id = ParseStreamId("1700000000000-42");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->ms, 1700000000000u);
  EXPECT_EQ(id->seq, 42u);
  EXPECT_EQ(id->ToString(), "1700000000000-42");
  Result<StreamId> max = ParseStreamId("18446744073709551615-18446744073709551615");
  ASSERT_TRUE(max.ok());
  EXPECT_EQ(max->ms, std::numeric_limits<uint64_t>::max());
  EXPECT_LT((StreamId{1, 9}), (StreamId{2, 0}));
  EXPECT_LT((StreamId{2, 0}), (StreamId{2, 1}));

  for (const char* bad : {"", "-", "1", "1-", "-1", "a-1", "1-b", "1-2-3", "+1-2", " 1-2", "1-2 ",
                          "18446744073709551616-0", "0x1-0", "*"}) {
    EXPECT_EQ(ParseStreamId(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

class ReplicationTest : public ::testing::Test {
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

  static RedisEndpoint Endpoint() {
    RedisEndpoint endpoint;
    endpoint.host = "127.0.0.1";
    endpoint.port = server_->port();
    return endpoint;
  }

  // Each test has its own keys on the shared server.
  static std::string Prefix() {
    return "kvgov-test:" +
           std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ":";
  }

  static RedisServerProcess* server_;
};

RedisServerProcess* ReplicationTest::server_ = nullptr;

TEST_F(ReplicationTest, AppendThenReadRoundTripsInOrder) {
  GovernanceLog log(Endpoint(), Prefix() + "governance", kTimeout);
  Result<std::string> empty = log.LastId();
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(*empty, "0-0");

  std::vector<LogEntry> appended;
  for (int i = 0; i < 5; ++i) {
    LogEntry entry = SampleEntry();
    entry.subject = "w" + std::to_string(i);
    entry.time_ms = 1000 + i;
    Result<std::string> id = log.Append(entry);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ASSERT_TRUE(ParseStreamId(*id).ok()) << *id;
    entry.id = *id;
    appended.push_back(entry);
  }
  Result<std::string> last = log.LastId();
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, appended.back().id);

  // Three, then the rest from where the first read stopped.
  Result<LogBatch> first = log.ReadAfter("0-0", 3, milliseconds(100));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->entries.size(), 3u);
  EXPECT_TRUE(first->rejected.empty());
  EXPECT_EQ(first->last_id, appended[2].id);
  Result<LogBatch> rest = log.ReadAfter(first->last_id, 100, milliseconds(100));
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  ASSERT_EQ(rest->entries.size(), 2u);
  EXPECT_EQ(rest->last_id, appended[4].id);

  std::vector<LogEntry> read = first->entries;
  read.insert(read.end(), rest->entries.begin(), rest->entries.end());
  EXPECT_EQ(read, appended);
}

TEST_F(ReplicationTest, ReadAfterBlocksAndReturnsEmptyOnTimeout) {
  GovernanceLog log(Endpoint(), Prefix() + "governance", kTimeout);
  const auto start = Clock::now();
  Result<LogBatch> batch = log.ReadAfter("0-0", 10, milliseconds(300));
  const auto elapsed = Clock::now() - start;
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_TRUE(batch->entries.empty());
  EXPECT_TRUE(batch->rejected.empty());
  EXPECT_EQ(batch->last_id, "0-0");
  EXPECT_GE(elapsed, milliseconds(250));
  EXPECT_LT(elapsed, milliseconds(3000));

  // Without a block the read returns at once.
  Result<LogBatch> now = log.ReadAfter("0-0", 10, milliseconds(0));
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  EXPECT_TRUE(now->entries.empty());
}

TEST_F(ReplicationTest, BlockedReadWakesForAnAppendFromAnotherThread) {
  GovernanceLog log(Endpoint(), Prefix() + "governance", kTimeout);
  ASSERT_TRUE(log.LastId().ok());  // connect the read side before the reader blocks
  auto reader =
      std::async(std::launch::async, [&] { return log.ReadAfter("0-0", 10, milliseconds(5000)); });
  std::this_thread::sleep_for(milliseconds(100));
  // The append goes through its own connection while the read is blocked.
  const auto start = Clock::now();
  Result<std::string> id = log.Append(SampleEntry());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
  Result<LogBatch> batch = reader.get();
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->entries.size(), 1u);
  EXPECT_EQ(batch->entries[0].id, *id);
  EXPECT_LT(Clock::now() - start, milliseconds(2500));
}

TEST_F(ReplicationTest, MalformedEntriesAreRejectedWithoutStoppingTheRead) {
  const std::string key = Prefix() + "governance";
  GovernanceLog log(Endpoint(), key, kTimeout);
  RedisConnection raw(Endpoint(), kTimeout);

  Result<std::string> good1 = log.Append(SampleEntry());
  ASSERT_TRUE(good1.ok());
  Result<RedisReply> garbage = raw.Command({"XADD", key, "*", "e", "{not json"});
  ASSERT_TRUE(garbage.ok()) << garbage.status().ToString();
  Result<RedisReply> no_e = raw.Command({"XADD", key, "*", "other", "x"});
  ASSERT_TRUE(no_e.ok());
  Result<RedisReply> bad_column = raw.Command(
      {"XADD", key, "*", "e",
       R"({"v":1,"origin":"o","kind":"k","subject":"s","payload":"p","time_ms":1,"writes":[{"column":"nope","key":"k","value":"v"}]})"});
  ASSERT_TRUE(bad_column.ok());
  Result<std::string> good2 = log.Append(SampleEntry());
  ASSERT_TRUE(good2.ok());

  Result<LogBatch> batch = log.ReadAfter("0-0", 100, milliseconds(100));
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->entries.size(), 2u);
  EXPECT_EQ(batch->entries[0].id, *good1);
  EXPECT_EQ(batch->entries[1].id, *good2);
  ASSERT_EQ(batch->rejected.size(), 3u);
  EXPECT_EQ(batch->rejected[0].first, garbage->text);
  EXPECT_EQ(batch->rejected[0].second.message(), "entry: not valid JSON");
  EXPECT_EQ(batch->rejected[1].first, no_e->text);
  EXPECT_EQ(batch->rejected[1].second.message(), "e: missing");
  EXPECT_EQ(batch->rejected[2].first, bad_column->text);
  EXPECT_EQ(batch->rejected[2].second.message(), "writes[0].column: unknown column 'nope'");
  EXPECT_EQ(batch->last_id, *good2);

  // A batch of nothing but rejects still moves last_id on.
  ASSERT_TRUE(raw.Command({"XADD", key, "*", "e", "[]"}).ok());
  Result<LogBatch> only_bad = log.ReadAfter(batch->last_id, 100, milliseconds(100));
  ASSERT_TRUE(only_bad.ok());
  EXPECT_TRUE(only_bad->entries.empty());
  ASSERT_EQ(only_bad->rejected.size(), 1u);
  EXPECT_EQ(only_bad->last_id, only_bad->rejected[0].first);
}

TEST_F(ReplicationTest, AppendRefusesWhatReplicasWouldReject) {
  GovernanceLog log(Endpoint(), Prefix() + "governance", kTimeout);
  LogEntry large = SampleEntry();
  large.payload = std::string(kMaxLogEntryBytes, 'x');
  Result<std::string> too_large = log.Append(large);
  EXPECT_EQ(too_large.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_large.status().message().find("over the limit"), std::string::npos);

  LogEntry bad_utf8 = SampleEntry();
  bad_utf8.writes[0].value = std::string("\xc3\x28");
  EXPECT_EQ(log.Append(bad_utf8).status().message(), "writes[0].value: not valid UTF-8");

  LogEntry bad_column = SampleEntry();
  bad_column.writes[1].column = "store";
  EXPECT_EQ(log.Append(bad_column).status().message(), "writes[1].column: unknown column 'store'");

  LogEntry unnamed = SampleEntry();
  unnamed.write_id.clear();
  EXPECT_EQ(log.Append(unnamed).status().message(), "write_id: want 1 to 64 characters");

  Result<std::string> last = log.LastId();
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, "0-0");  // nothing was appended

  EXPECT_EQ(log.ReadAfter("latest", 1, milliseconds(0)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(log.ReadAfter("0-0", 0, milliseconds(0)).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ReplicationTest, ClaimIsHeldByOneOwnerUntilReleased) {
  ClaimStore a(Endpoint(), Prefix() + "claim:", kTimeout);
  ClaimStore b(Endpoint(), Prefix() + "claim:", kTimeout);
  const milliseconds ttl(10000);

  Result<bool> taken = a.Acquire("sweeper", "replica-a", ttl);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_TRUE(*taken);
  EXPECT_FALSE(*b.Acquire("sweeper", "replica-b", ttl));
  EXPECT_TRUE(*a.Acquire("sweeper", "replica-a", ttl));  // its own: renewed
  EXPECT_EQ(*a.Holder("sweeper"), std::optional<std::string>("replica-a"));

  EXPECT_FALSE(*b.Renew("sweeper", "replica-b", ttl));
  EXPECT_TRUE(b.Release("sweeper", "replica-b").ok());  // not the holder: nothing happens
  EXPECT_EQ(*b.Holder("sweeper"), std::optional<std::string>("replica-a"));

  EXPECT_TRUE(*a.Renew("sweeper", "replica-a", ttl));
  EXPECT_TRUE(a.Release("sweeper", "replica-a").ok());
  EXPECT_EQ(*a.Holder("sweeper"), std::nullopt);
  EXPECT_FALSE(*a.Renew("sweeper", "replica-a", ttl));  // lapsed claims are not revived
  EXPECT_TRUE(*b.Acquire("sweeper", "replica-b", ttl));
  EXPECT_EQ(*a.Holder("sweeper"), std::optional<std::string>("replica-b"));

  EXPECT_EQ(a.Acquire("x", "replica-a", milliseconds(0)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Acquire("x", "", ttl).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ReplicationTest, ClaimLapsesAfterItsTtl) {
  ClaimStore a(Endpoint(), Prefix() + "claim:", kTimeout);
  ClaimStore b(Endpoint(), Prefix() + "claim:", kTimeout);
  ASSERT_TRUE(*a.Acquire("leader", "replica-a", milliseconds(200)));
  const auto start = Clock::now();
  EXPECT_FALSE(*b.Acquire("leader", "replica-b", milliseconds(5000)));
  bool taken = false;
  while (!taken && Clock::now() - start < std::chrono::seconds(3)) {
    Result<bool> attempt = b.Acquire("leader", "replica-b", milliseconds(5000));
    ASSERT_TRUE(attempt.ok()) << attempt.status().ToString();
    taken = *attempt;
    if (!taken) std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(taken);
  EXPECT_GE(Clock::now() - start, milliseconds(150));
  EXPECT_FALSE(*a.Renew("leader", "replica-a", milliseconds(200)));
  EXPECT_EQ(*a.Holder("leader"), std::optional<std::string>("replica-b"));

  // Renew really extends: the claim outlives its first ttl.
  ASSERT_TRUE(*a.Acquire("other", "replica-a", milliseconds(200)));
  ASSERT_TRUE(*a.Renew("other", "replica-a", milliseconds(10000)));
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(*b.Holder("other"), std::optional<std::string>("replica-a"));
}

TEST_F(ReplicationTest, LoadBoardSumsPeersButNotItself) {
  // Glob characters in the prefix are matched literally.
  const std::string prefix = Prefix() + "load[x]*:";
  LoadBoard a(Endpoint(), prefix, "replica-a", milliseconds(10000), kTimeout);
  LoadBoard b(Endpoint(), prefix, "replica-b", milliseconds(10000), kTimeout);
  LoadBoard c(Endpoint(), prefix, "replica-c", milliseconds(10000), kTimeout);

  ASSERT_TRUE(a.Publish({{"w1", 3}, {"w2", 1}}).ok());
  ASSERT_TRUE(b.Publish({{"w1", 2}}).ok());
  ASSERT_TRUE(c.Publish({{"w1", 100}, {"w3", 7}}).ok());

  // Neither a value that is not a load nor a key outside the prefix counts.
  RedisConnection raw(Endpoint(), kTimeout);
  ASSERT_TRUE(raw.Command({"SET", prefix + "junk", "not json"}).ok());
  ASSERT_TRUE(raw.Command({"SET", prefix + "negative", R"({"w1":-5})"}).ok());
  ASSERT_TRUE(raw.Command({"SET", Prefix() + "loadx:replica-z", R"({"w1":1000})"}).ok());

  Result<Load> seen_by_c = c.PeerTotals();
  ASSERT_TRUE(seen_by_c.ok()) << seen_by_c.status().ToString();
  EXPECT_EQ(*seen_by_c, (Load{{"w1", 5}, {"w2", 1}}));
  Result<Load> seen_by_a = a.PeerTotals();
  ASSERT_TRUE(seen_by_a.ok());
  EXPECT_EQ(*seen_by_a, (Load{{"w1", 102}, {"w3", 7}}));

  // Publishing replaces; an empty map still publishes (and counts nothing).
  ASSERT_TRUE(c.Publish({}).ok());
  Result<RedisReply> published = raw.Command({"GET", prefix + "replica-c"});
  ASSERT_TRUE(published.ok());
  EXPECT_EQ(published->text, "{}");
  EXPECT_EQ(*a.PeerTotals(), (Load{{"w1", 2}}));
}

TEST_F(ReplicationTest, ExpiredLoadStopsCounting) {
  const std::string prefix = Prefix() + "load:";
  LoadBoard a(Endpoint(), prefix, "replica-a", milliseconds(10000), kTimeout);
  LoadBoard short_lived(Endpoint(), prefix, "replica-b", milliseconds(200), kTimeout);
  LoadBoard observer(Endpoint(), prefix, "replica-c", milliseconds(10000), kTimeout);
  ASSERT_TRUE(a.Publish({{"w1", 3}}).ok());
  ASSERT_TRUE(short_lived.Publish({{"w1", 4}}).ok());
  EXPECT_EQ(*observer.PeerTotals(), (Load{{"w1", 7}}));

  const auto start = Clock::now();
  Load totals;
  do {
    std::this_thread::sleep_for(milliseconds(25));
    Result<Load> now = observer.PeerTotals();
    ASSERT_TRUE(now.ok()) << now.status().ToString();
    totals = *now;
  } while (totals != Load{{"w1", 3}} && Clock::now() - start < std::chrono::seconds(3));
  EXPECT_EQ(totals, (Load{{"w1", 3}}));
  EXPECT_GE(Clock::now() - start, milliseconds(150));
}

// The trim deletes what is older than the mark and records the mark in the
// same script; a mark never moves back (a paused housekeeper waking up with
// an old bound trims nothing).
TEST_F(ReplicationTest, TrimDeletesBelowTheMarkAndNeverMovesItBack) {
  GovernanceLog log(Endpoint(), Prefix() + "governance", kTimeout);
  Result<std::optional<StreamId>> none = log.TrimmedBelow();
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());
  std::vector<StreamId> ids;
  for (int i = 0; i < 6; ++i) {
    Result<std::string> id = log.Append(SampleEntry());
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(*ParseStreamId(*id));
  }
  Result<bool> trimmed = log.TrimBelow(ids[3]);
  ASSERT_TRUE(trimmed.ok()) << trimmed.status().ToString();
  EXPECT_TRUE(*trimmed);
  EXPECT_EQ(*log.Length(), 3u);
  Result<LogBatch> rest = log.ReadAfter("0-0", 10, milliseconds(0));
  ASSERT_TRUE(rest.ok());
  ASSERT_EQ(rest->entries.size(), 3u);
  EXPECT_EQ(rest->entries[0].id, ids[3].ToString());
  EXPECT_EQ(**log.TrimmedBelow(), ids[3]);

  Result<bool> back = log.TrimBelow(ids[1]);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FALSE(*back);
  EXPECT_EQ(**log.TrimmedBelow(), ids[3]);
  EXPECT_EQ(*log.Length(), 3u);
  // Ids compare as numbers, not text: "10-0" is past "9-0".
  ASSERT_TRUE(*log.TrimBelow(StreamId{ids[5].ms + 1, 0}));
  EXPECT_EQ(*log.Length(), 0u);
}

GovernanceSnapshot SampleSnapshot(size_t governance_records, size_t value_bytes) {
  GovernanceSnapshot snapshot;
  snapshot.id = "1796000000123-4";
  snapshot.journal_seq = 77;
  snapshot.journal_hash = std::string(64, 'a');
  for (size_t i = 0; i < governance_records; ++i) {
    snapshot.governance.emplace_back("quarantine/" + std::to_string(i),
                                     std::string(value_bytes, static_cast<char>('a' + i % 26)));
  }
  snapshot.tokens = {{"ops", R"({"name":"ops"})"}};
  snapshot.write_ids = {{"0123abcd", "1796000000100-0"}};
  return snapshot;
}

// A snapshot over one chunk is split and put back whole; a reader sees
// nothing before the first Put, and the previous snapshot's chunks go.
TEST_F(ReplicationTest, SnapshotRoundTripsInChunks) {
  SnapshotStore snapshots(Endpoint(), Prefix() + "snapshot", kTimeout);
  Result<std::optional<GovernanceSnapshot>> none = snapshots.Get();
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());

  const GovernanceSnapshot big = SampleSnapshot(40, 64 * 1024);  // about 2.5 MiB
  ASSERT_TRUE(snapshots.Put(big).ok());
  Result<std::optional<GovernanceSnapshot>> read = snapshots.Get();
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ(**read, big);

  GovernanceSnapshot next = SampleSnapshot(1, 10);
  next.id = "1796000000999-0";
  ASSERT_TRUE(snapshots.Put(next).ok());
  EXPECT_EQ(**snapshots.Get(), next);
  RedisConnection redis(Endpoint(), kTimeout);
  Result<RedisReply> old_chunk = redis.Command({"EXISTS", Prefix() + "snapshot:" + big.id + ":0"});
  ASSERT_TRUE(old_chunk.ok());
  EXPECT_EQ(old_chunk->integer, 0);

  // A chunk that no longer matches the manifest reads as replaced.
  ASSERT_TRUE(redis.Command({"SET", Prefix() + "snapshot:" + next.id + ":0", "{}"}).ok());
  EXPECT_EQ(snapshots.Get().status().code(), StatusCode::kUnavailable);
}

TEST(SnapshotCodecTest, DecodeErrorsNameTheField) {
  const std::string good = EncodeSnapshot(SampleSnapshot(2, 3));
  ASSERT_TRUE(DecodeSnapshot(good).ok());
  const std::pair<std::string, std::string> bad[] = {
      {"[]", "snapshot: want an object"},
      {R"({"v":2})", "v: version 2 is not supported (want 1)"},
      {R"({"v":1,"id":"x"})", "id: stream id 'x': want MS-SEQ, two unsigned 64-bit integers"},
      {R"({"v":1,"id":"1-0","journal":{"seq":1,"hash":"h"},"governance":[["k"]],"tokens":[],"write_ids":[]})",
       "governance[0]: want [string, string]"},
      {R"({"v":1,"id":"1-0","journal":{"seq":1,"hash":"h"},"governance":[],"tokens":[],"write_ids":[],"x":1})",
       "'x': unknown field"},
  };
  for (const auto& [text, message] : bad) {
    Result<GovernanceSnapshot> decoded = DecodeSnapshot(text);
    ASSERT_FALSE(decoded.ok()) << text;
    EXPECT_EQ(decoded.status().message(), message) << text;
  }
}

TEST_F(ReplicationTest, AppliedBoardReportsTheLowestLiveReplica) {
  AppliedBoard a(Endpoint(), Prefix() + "applied:", "a", milliseconds(300), kTimeout);
  AppliedBoard b(Endpoint(), Prefix() + "applied:", "b", milliseconds(5000), kTimeout);
  EXPECT_FALSE(a.Lowest()->has_value());
  ASSERT_TRUE(a.Publish(StreamId{5, 0}).ok());
  ASSERT_TRUE(b.Publish(StreamId{9, 1}).ok());
  EXPECT_EQ(**b.Lowest(), (StreamId{5, 0}));
  // a stops publishing: it no longer holds the trim back.
  const auto start = Clock::now();
  std::optional<StreamId> lowest;
  do {
    std::this_thread::sleep_for(milliseconds(25));
    Result<std::optional<StreamId>> now = b.Lowest();
    ASSERT_TRUE(now.ok()) << now.status().ToString();
    lowest = *now;
  } while (lowest != StreamId{9, 1} && Clock::now() - start < std::chrono::seconds(3));
  EXPECT_EQ(lowest, (StreamId{9, 1}));
}

TEST(ReplicationUnavailableTest, EveryCallReportsUnavailableWhileRedisIsDown) {
  RedisServerProcess server;
  ASSERT_TRUE(server.Start().ok());
  RedisEndpoint endpoint;
  endpoint.host = "127.0.0.1";
  endpoint.port = server.port();
  GovernanceLog log(endpoint, "kvgov:governance", milliseconds(500));
  ClaimStore claims(endpoint, "kvgov:claim:", milliseconds(500));
  LoadBoard board(endpoint, "kvgov:load:", "r1", milliseconds(1000), milliseconds(500));
  ASSERT_TRUE(log.Append(SampleEntry()).ok());

  server.Kill();
  EXPECT_EQ(log.Append(SampleEntry()).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(log.ReadAfter("0-0", 1, milliseconds(100)).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(claims.Acquire("c", "r1", milliseconds(1000)).status().code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(board.PeerTotals().status().code(), StatusCode::kUnavailable);

  ASSERT_TRUE(server.Restart().ok());
  Result<std::string> id = log.Append(SampleEntry());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  Result<LogBatch> batch = log.ReadAfter("0-0", 10, milliseconds(100));
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->entries.size(), 1u);  // the restarted Redis kept nothing
  EXPECT_TRUE(*claims.Acquire("c", "r1", milliseconds(1000)));
}

}  // namespace
}  // namespace kvgov::replication
