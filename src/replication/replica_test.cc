// Replicas against a real redis-server, each on a real RocksDB store in a
// temporary directory: writes applied once though their append was sent
// twice, the guard's refusals alike on every replica, replica id claims,
// and a replica that was away past the retained history rejoining from the
// housekeeper's snapshot.

#include "kvgov/replication/replica.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvgov/auth/tokens.h"
#include "kvgov/journal/journal.h"
#include "kvgov/store/store.h"
#include "testing/redis_server_process.h"

#include "testing/scratch_dir.h"

namespace kvgov::replication {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
using test_support::RedisServerProcess;

bool WaitUntil(const std::function<bool()>& done, milliseconds timeout = milliseconds(10000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return done();
}

// A TCP proxy in front of Redis that can lose the reply to the next XADD:
// it forwards the command and then closes the client's connection instead
// of passing the reply back, as a network that breaks at the wrong moment
// does. Everything else passes through. Thread-safe.
class LossyProxy {
 public:
  ~LossyProxy() { Stop(); }

  void Start(int upstream_port) {
    upstream_port_ = upstream_port;
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(listener_, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(::listen(listener_, 16), 0);
    socklen_t length = sizeof(address);
    ASSERT_EQ(::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length), 0);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }

  void Stop() {
    if (stopping_.exchange(true)) return;
    if (acceptor_.joinable()) acceptor_.join();
    std::lock_guard lock(mu_);
    for (std::thread& pump : pumps_) pump.join();
    pumps_.clear();
    if (listener_ >= 0) ::close(listener_);
  }

  int port() const { return port_; }
  void LoseNextXaddReply() { lose_next_xadd_reply_.store(true); }
  int replies_lost() const { return replies_lost_.load(); }

 private:
  void Accept() {
    while (!stopping_.load()) {
      pollfd ready{listener_, POLLIN, 0};
      if (::poll(&ready, 1, 50) <= 0) continue;
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) continue;
      const int upstream = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      address.sin_port = htons(static_cast<uint16_t>(upstream_port_));
      if (::connect(upstream, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        ::close(client);
        ::close(upstream);
        continue;
      }
      std::lock_guard lock(mu_);
      pumps_.emplace_back([this, client, upstream] { Pump(client, upstream); });
    }
  }

  void Pump(int client, int upstream) {
    bool losing = false;  // this connection sent the XADD whose reply is lost
    char buffer[65536];
    while (!stopping_.load()) {
      pollfd fds[2] = {{client, POLLIN, 0}, {upstream, POLLIN, 0}};
      if (::poll(fds, 2, 50) <= 0) continue;
      if (fds[0].revents != 0) {
        const ssize_t n = ::read(client, buffer, sizeof(buffer));
        if (n <= 0) break;
        if (std::string_view(buffer, static_cast<size_t>(n)).find("XADD") !=
                std::string_view::npos &&
            lose_next_xadd_reply_.exchange(false)) {
          losing = true;
        }
        if (::write(upstream, buffer, static_cast<size_t>(n)) != n) break;
      }
      if (fds[1].revents != 0) {
        const ssize_t n = ::read(upstream, buffer, sizeof(buffer));
        if (n <= 0) break;
        if (losing) {
          replies_lost_.fetch_add(1);
          break;  // Redis appended it; the client never hears so
        }
        if (::write(client, buffer, static_cast<size_t>(n)) != n) break;
      }
    }
    ::close(client);
    ::close(upstream);
  }

  int upstream_port_ = 0;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> lose_next_xadd_reply_{false};
  std::atomic<int> replies_lost_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> pumps_;  // guarded by mu_
};

// One replica's process, minus the process: its store, journal and Replica.
struct Node {
  fs::path dir;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<journal::Journal> journal;
  std::unique_ptr<Replica> replica;

  std::map<std::string, std::string> Governance() const {
    std::map<std::string, std::string> records;
    EXPECT_TRUE(store
                    ->Scan(store::Column::kGovernance, "", "",
                           [&](std::string_view key, std::string_view value) {
                             records.emplace(key, value);
                             return true;
                           })
                    .ok());
    return records;
  }
};

class ReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status started = redis_.Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
  }
  void TearDown() override { nodes_.clear(); }

  ReplicaOptions Options(const std::string& id, const std::string& url = "") {
    ReplicaOptions options;
    options.redis_url = url.empty() ? redis_.url() : url;
    options.replica_id = id;
    options.token_path = (root_ / (id + ".tokens.json")).string();
    options.claim_ttl = milliseconds(600);
    options.load_interval = milliseconds(50);
    options.catch_up_wait = milliseconds(5000);
    return options;
  }

  // Opens (or reopens) the node's store and journal, then starts its
  // replica. `dir_name` names the data dir, so a restart finds its state.
  Result<Node*> StartNode(const std::string& dir_name, ReplicaOptions options,
                          Replica::Hooks hooks = {}) {
    auto node = std::make_unique<Node>();
    node->dir = root_ / dir_name;
    for (auto it = nodes_.begin(); it != nodes_.end(); ++it) {
      if ((*it)->dir == node->dir) {
        nodes_.erase(it);  // the old process is gone; its store is closed
        break;
      }
    }
    KVGOV_ASSIGN_OR_RETURN(node->store, store::Store::Open(node->dir.string()));
    KVGOV_ASSIGN_OR_RETURN(node->journal, journal::Journal::Open(node->store.get()));
    KVGOV_ASSIGN_OR_RETURN(
        node->replica, Replica::Start(std::move(options), node->journal.get(), node->store.get(),
                                      nullptr, std::move(hooks)));
    nodes_.push_back(std::move(node));
    return nodes_.back().get();
  }

  Node* MustStart(const std::string& dir_name, ReplicaOptions options, Replica::Hooks hooks = {}) {
    Result<Node*> node = StartNode(dir_name, std::move(options), std::move(hooks));
    EXPECT_TRUE(node.ok()) << node.status().ToString();
    return node.ok() ? *node : nullptr;
  }

  GovernanceLog DirectLog() {
    Result<RedisEndpoint> endpoint = ParseRedisUrl(redis_.url());
    EXPECT_TRUE(endpoint.ok());
    return GovernanceLog(*endpoint, "kvgov:governance", milliseconds(2000));
  }

  static Result<journal::Row> Put(Replica& replica, const std::string& key,
                                  const std::string& value) {
    const store::WriteOp op{store::Column::kGovernance, key, value};
    return replica.Record("test.put", key, "token:test", "{}", {&op, 1});
  }

  RedisServerProcess redis_;
  test_support::ScratchDir root_{"kvgov_replica_test"};
  std::vector<std::unique_ptr<Node>> nodes_;
};

// Readiness (GET /readyz): a replica that could not read the log at start
// serves on local state, which may lack the fleet's quarantines; it is not
// caught up until it has read the log to its end and applied it.
TEST_F(ReplicaTest, AReplicaIsCaughtUpOnlyOnceItHasAppliedTheLogToItsEnd) {
  // A Redis of its own that keeps the log across a restart, so what the
  // late replica finds once Redis is back was written before it could read.
  RedisServerProcess redis;
  redis.set_append_only(true);
  ASSERT_TRUE(redis.Start().ok());
  Node* writer = MustStart("writer", Options("writer", redis.url()));
  ASSERT_NE(writer, nullptr);
  EXPECT_TRUE(writer->replica->caught_up());  // an empty log, read at start
  ASSERT_TRUE(Put(*writer->replica, "quarantine/q1", "{}").ok());
  redis.Stop();
  ReplicaOptions late_options = Options("late", redis.url());
  late_options.catch_up_wait = milliseconds(100);
  Node* late = MustStart("late", late_options);
  ASSERT_NE(late, nullptr);
  EXPECT_FALSE(late->replica->caught_up());
  ASSERT_TRUE(redis.Restart().ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!late->replica->caught_up() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_TRUE(late->replica->caught_up());
  EXPECT_EQ(late->Governance().count("quarantine/q1"), 1u)
      << "caught up before applying what the log held";
  nodes_.clear();  // before their Redis goes
}

// Redis loses its data (a FLUSHALL, a volume lost without a backup) while a
// replica follows its log (issue 41): the replica notices the log's
// identity is gone, applies nothing of the new log a fresh replica starts,
// refuses governance writes and is not ready. Before, it applied the new
// log on top of the old state, and its chain parted from the fresh one's.
TEST_F(ReplicaTest, AReplicaWhoseLogRedisLostAppliesNoOtherLogAndIsNotReady) {
  Node* old_node = MustStart("old", Options("old"));
  ASSERT_NE(old_node, nullptr);
  ASSERT_TRUE(Put(*old_node->replica, "quarantine/q1", "{}").ok());
  EXPECT_FALSE(old_node->replica->log_reset());

  redis_.Kill();
  ASSERT_TRUE(redis_.Restart().ok());  // no persistence: an empty Redis
  ASSERT_TRUE(WaitUntil([&] { return old_node->replica->log_reset(); }));
  EXPECT_FALSE(old_node->replica->caught_up());
  Result<journal::Row> refused = Put(*old_node->replica, "quarantine/q2", "{}");
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("not the one replica 'old' followed"),
            std::string::npos)
      << refused.status().ToString();

  // A fresh replica starts a new log on the empty Redis; the old one keeps
  // out of it.
  Node* fresh = MustStart("fresh", Options("fresh"));
  ASSERT_NE(fresh, nullptr);
  EXPECT_FALSE(fresh->replica->log_reset());
  ASSERT_TRUE(Put(*fresh->replica, "quarantine/q3", "{}").ok());
  // Nothing to wait for in a refusal: give the old applier time to read the
  // new entry twice (it waits 1 s after a batch of another log).
  std::this_thread::sleep_for(milliseconds(2500));
  EXPECT_EQ(old_node->Governance().count("quarantine/q3"), 0u);
  EXPECT_TRUE(old_node->replica->log_reset());
}

// The reply to an XADD is lost after Redis appended the entry: the writer
// sends it again under the same write id, so the stream holds it twice,
// and every replica applies it once; the writer answers with the row.
TEST_F(ReplicaTest, AnAppendWhoseReplyWasLostIsAppliedOnceAndAnswered) {
  LossyProxy proxy;
  proxy.Start(redis_.port());
  Node* writer = MustStart("a", Options("a", "redis://127.0.0.1:" + std::to_string(proxy.port())));
  Node* reader = MustStart("b", Options("b"));
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);

  proxy.LoseNextXaddReply();
  Result<journal::Row> row = Put(*writer->replica, "quarantine/q1", "{}");
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  EXPECT_EQ(proxy.replies_lost(), 1);
  EXPECT_EQ(row->seq, 1u);

  GovernanceLog log = DirectLog();
  Result<LogBatch> stream = log.ReadAfter("0-0", 10, milliseconds(0));
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  ASSERT_EQ(stream->entries.size(), 2u);  // sent twice
  EXPECT_EQ(stream->entries[0].write_id, stream->entries[1].write_id);

  ASSERT_TRUE(WaitUntil([&] { return reader->replica->applied_id() == stream->last_id; }));
  for (Node* node : {writer, reader}) {
    EXPECT_EQ(node->journal->head_seq(), 1u);
    EXPECT_EQ(node->journal->head_hash(), row->hash);
    EXPECT_EQ(node->replica->duplicate_entries(), 1u);
  }
}

// A replica that stops between an entry and its duplicate remembers the
// write id across the restart.
TEST_F(ReplicaTest, AWriteIdIsRememberedAcrossARestart) {
  GovernanceLog log = DirectLog();
  LogEntry entry;
  entry.write_id = "retried-write";
  entry.origin = "elsewhere";
  entry.kind = "test.put";
  entry.subject = "k";
  entry.payload = "{}";
  entry.time_ms = 1;
  entry.writes = {{"governance", "quarantine/k", std::string("{}")}};
  Result<std::string> first = log.Append(entry);
  ASSERT_TRUE(first.ok());

  Node* node = MustStart("a", Options("a"));
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return node->replica->applied_id() == *first; }));
  node->replica->Stop();

  Result<std::string> second = log.Append(entry);
  ASSERT_TRUE(second.ok());
  node = MustStart("a", Options("a"));
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return node->replica->applied_id() == *second; }));
  EXPECT_EQ(node->journal->head_seq(), 1u);
  EXPECT_EQ(node->replica->duplicate_entries(), 1u);
}

// The guard decides from the state the log built: the second of two writes
// that conflict is refused by every replica, and its writer gets why.
TEST_F(ReplicaTest, TheGuardRefusesAlikeAndTheWriterGetsWhy) {
  std::vector<Node*> nodes(2);
  auto hooks_for = [&](int i) {
    Replica::Hooks hooks;
    hooks.guard = [&nodes, i](const LogEntry& entry) {
      for (const LogWrite& write : entry.writes) {
        Result<std::optional<std::string>> held =
            nodes[i]->store->Get(store::Column::kGovernance, write.key);
        if (!held.ok()) return Status::Unavailable(held.status().ToString());
        if (held->has_value()) return Status::AlreadyExists(write.key + " is taken");
      }
      return Status::Ok();
    };
    return hooks;
  };
  nodes[0] = MustStart("a", Options("a"), hooks_for(0));
  nodes[1] = MustStart("b", Options("b"), hooks_for(1));
  ASSERT_NE(nodes[0], nullptr);
  ASSERT_NE(nodes[1], nullptr);

  Result<journal::Row> won = Put(*nodes[0]->replica, "quarantine/one", "from a");
  ASSERT_TRUE(won.ok()) << won.status().ToString();
  Result<journal::Row> lost = Put(*nodes[1]->replica, "quarantine/one", "from b");
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(lost.status().message(), "quarantine/one is taken");

  ASSERT_TRUE(WaitUntil(
      [&] { return nodes[0]->replica->applied_id() == nodes[1]->replica->applied_id(); }));
  for (Node* node : nodes) {
    EXPECT_EQ(node->journal->head_seq(), 1u);
    EXPECT_EQ(node->journal->head_hash(), won->hash);
    EXPECT_EQ(node->Governance().at("quarantine/one"), "from a");
    EXPECT_EQ(node->replica->refused_entries(), 1u);
  }
}

TEST_F(ReplicaTest, ASecondProcessUnderALiveReplicaIdIsRefused) {
  Node* first = MustStart("a", Options("r1"));
  ASSERT_NE(first, nullptr);
  Result<Node*> second = StartNode("b", Options("r1"));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("replica id 'r1' is held by another running kvgov"),
            std::string::npos)
      << second.status().ToString();

  // Its own data dir is the same instance: a restart after a kill -9
  // resumes the claim at once, before the old one lapsed.
  first->replica->Stop();
  Result<std::optional<std::string>> instance =
      first->store->Get(store::Column::kMeta, "replication/instance");
  ASSERT_TRUE(instance.ok() && instance->has_value());
  Result<RedisEndpoint> endpoint = ParseRedisUrl(redis_.url());
  ASSERT_TRUE(endpoint.ok());
  RedisConnection redis(*endpoint, milliseconds(1000));
  ASSERT_TRUE(  // the claim a killed process leaves behind
      redis.Command({"SET", "kvgov:claim:replica/r1", **instance, "PX", "60000"}).ok());
  EXPECT_NE(MustStart("a", Options("r1")), nullptr);
  EXPECT_FALSE(StartNode("b", Options("r1")).ok());

  // Once the holder stops, another data dir may take the id.
  nodes_.clear();
  EXPECT_NE(MustStart("b", Options("r1")), nullptr);
}

TEST_F(ReplicaTest, AReplicaWhoseIdWasTakenStopsServingAsIt) {
  std::atomic<int> fatal_calls{0};
  std::string why;
  std::mutex why_mu;
  Replica::Hooks hooks;
  hooks.fatal = [&](const Status& status) {
    std::lock_guard lock(why_mu);
    why = status.ToString();
    fatal_calls.fetch_add(1);
  };
  Node* node = MustStart("a", Options("r1"), std::move(hooks));
  ASSERT_NE(node, nullptr);
  // What a second process does once this one was paused past the ttl.
  Result<RedisEndpoint> endpoint = ParseRedisUrl(redis_.url());
  ASSERT_TRUE(endpoint.ok());
  RedisConnection redis(*endpoint, milliseconds(1000));
  ASSERT_TRUE(
      redis.Command({"SET", "kvgov:claim:replica/r1", "another-instance", "PX", "60000"}).ok());
  ASSERT_TRUE(WaitUntil([&] { return fatal_calls.load() == 1; }));
  std::lock_guard lock(why_mu);
  EXPECT_NE(why.find("replica id 'r1' was taken by another kvgov"), std::string::npos) << why;
  EXPECT_FALSE(node->replica->housekeeper());
}

// With no history kept, the housekeeper trims the stream to its snapshot;
// a replica that was stopped meanwhile finds the hole when it starts again
// and installs the snapshot: the same records (including an erase it never
// saw), the same journal head, the missed rows an adopted span; then it
// follows the log again.
TEST_F(ReplicaTest, AReplicaAwayPastTheRetainedHistoryRejoinsFromTheSnapshot) {
  ReplicaOptions keeper = Options("keeper");
  keeper.log_retain = milliseconds(0);
  keeper.snapshot_interval = milliseconds(100);
  Node* a = MustStart("keeper", keeper);
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return a->replica->housekeeper(); }));
  std::mutex applied_mu;
  std::vector<std::string> applied_writes;  // guarded by applied_mu
  Replica::Hooks counting;
  counting.apply = [&](const LogEntry& entry) {
    std::lock_guard lock(applied_mu);
    for (const LogWrite& write : entry.writes) {
      applied_writes.push_back(write.key + (write.value ? "=" + *write.value : " erased"));
    }
  };
  Node* c = MustStart("away", Options("away"), counting);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(Put(*a->replica, "quarantine/old", "1").ok());
  ASSERT_TRUE(WaitUntil([&] { return c->replica->applied_id() == a->replica->applied_id(); }));
  c->replica->Stop();
  const std::string left_at = c->replica->applied_id();

  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(Put(*a->replica, "quarantine/new" + std::to_string(i), "v").ok());
  }
  const store::WriteOp lift{store::Column::kGovernance, "quarantine/old", std::nullopt};
  ASSERT_TRUE(a->replica->Record("test.erase", "old", "token:test", "{}", {&lift, 1}).ok());
  GovernanceLog log = DirectLog();
  ASSERT_TRUE(WaitUntil([&] {
    Result<std::optional<StreamId>> mark = log.TrimmedBelow();
    return mark.ok() && mark->has_value() && **mark > *ParseStreamId(left_at);
  })) << "the housekeeper did not trim past the absent replica";
  EXPECT_LT(*log.Length(), 21u);

  {
    std::lock_guard lock(applied_mu);
    applied_writes.clear();
  }
  c = MustStart("away", Options("away"), counting);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return c->replica->applied_id() == a->replica->applied_id(); }));
  EXPECT_EQ(c->replica->snapshot_installs(), 1u);
  EXPECT_EQ(c->journal->head_seq(), a->journal->head_seq());
  EXPECT_EQ(c->journal->head_hash(), a->journal->head_hash());
  EXPECT_EQ(c->Governance(), a->Governance());
  EXPECT_EQ(c->Governance().count("quarantine/old"), 0u);
  // The daemon's in-memory state hears of the install as one entry.
  {
    std::lock_guard lock(applied_mu);
    EXPECT_NE(std::find(applied_writes.begin(), applied_writes.end(), "quarantine/old erased"),
              applied_writes.end());
  }
  Result<journal::VerifyReport> verified = journal::Verify(*c->store);
  ASSERT_TRUE(verified.ok());
  EXPECT_FALSE(verified->first_broken_seq.has_value()) << verified->problem;
  // The snapshot may be older than the keeper's last rows: those came to c
  // from the stream, after the span.
  ASSERT_EQ(verified->adopted.size(), 1u);
  EXPECT_EQ(verified->adopted[0].first_seq, 2u);
  EXPECT_LE(verified->adopted[0].last_seq, a->journal->head_seq());
  EXPECT_EQ(verified->rows + (verified->adopted[0].last_seq - 1), a->journal->head_seq());

  // Back in the fleet, it applies the next write itself: the row is its own.
  ASSERT_TRUE(Put(*a->replica, "quarantine/after", "v").ok());
  ASSERT_TRUE(WaitUntil([&] { return c->replica->applied_id() == a->replica->applied_id(); }))
      << c->replica->applied_id() << " vs " << a->replica->applied_id() << " mark "
      << (*log.TrimmedBelow())->ToString();
  EXPECT_EQ(c->journal->head_hash(), a->journal->head_hash());
  Result<std::vector<journal::Row>> last = c->journal->Read(c->journal->head_seq(), 1);
  ASSERT_TRUE(last.ok());
  ASSERT_EQ(last->size(), 1u);
  EXPECT_EQ(last->front().subject, "quarantine/after");
}

// A token change as `kvgov token add|revoke --redis` appends it: one
// "tokens" write, the record (or none, for a revoke) under the token's name.
LogEntry TokenEntry(const std::string& write_id, const std::string& key,
                    const std::optional<auth::TokenRecord>& record) {
  LogEntry entry;
  entry.write_id = write_id;
  entry.origin = "kvgov-token";
  entry.actor = "cli:test";
  entry.kind = record ? "token.add" : "token.revoke";
  entry.subject = key;
  entry.payload = auth::DescribeTokenChange(key, record ? &*record : nullptr);
  entry.time_ms = 1;
  entry.writes = {
      {"tokens", key,
       record ? std::optional<std::string>(auth::EncodeTokenRecord(*record)) : std::nullopt}};
  return entry;
}

auth::TokenRecord Minted(const std::string& name, std::vector<auth::Role> roles) {
  Result<auth::MintedToken> minted = auth::MintToken(name, std::move(roles), "", 1000);
  EXPECT_TRUE(minted.ok()) << minted.status().ToString();
  return minted.ok() ? minted->record : auth::TokenRecord{};
}

// kvgov token list --redis reads the tokens from Redis alone, and gets what
// a replica's token file holds after applying the same log: a revoke, a
// retried append of an earlier add (applied once, so the revoke stands), a
// record every replica refuses, and a token replaced under its name.
TEST_F(ReplicaTest, TokensReadFromRedisAloneAreWhatAReplicaApplies) {
  GovernanceLog log = DirectLog();
  const auth::TokenRecord a = Minted("a", {auth::Role::kRead});
  const auth::TokenRecord b = Minted("b", {auth::Role::kRoute});
  const auth::TokenRecord b2 = Minted("b", {auth::Role::kAdmin, auth::Role::kRead});
  const auth::TokenRecord e = Minted("e", {auth::Role::kInfer});
  std::string last;
  std::vector<std::string> ids;
  for (const LogEntry& entry :
       {TokenEntry("w1", "a", a), TokenEntry("w2", "b", b), TokenEntry("w3", "a", std::nullopt),
        TokenEntry("w1", "a", a),  // the add's append sent again after the revoke
        TokenEntry("w4", "c", a),  // a record under another token's name
        TokenEntry("w5", "e", e), TokenEntry("w6", "b", b2)}) {
    Result<std::string> appended = log.Append(entry);
    ASSERT_TRUE(appended.ok()) << appended.status().ToString();
    last = *appended;
    ids.push_back(last);
  }

  Result<ReplicatedTokens> read = Replica::ReadTokens(redis_.url(), "kvgov");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->tokens, (std::vector<auth::TokenRecord>{b2, e}));
  EXPECT_EQ(read->as_of, last);
  EXPECT_EQ(read->snapshot, "");
  // Where each name last changed (token import's write ids): the revoke
  // for a (its retried add was a duplicate), the replacement for b; the
  // refused record changed nothing; a name never written, the log's start.
  EXPECT_EQ(read->ChangedAt("a"), ids[2]);
  EXPECT_EQ(read->ChangedAt("b"), ids[6]);
  EXPECT_EQ(read->ChangedAt("e"), ids[5]);
  EXPECT_EQ(read->ChangedAt("never"), "0-0");

  Node* node = MustStart("a", Options("a"));
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return node->replica->applied_id() == last; }));
  Result<std::vector<auth::TokenRecord>> file =
      auth::LoadTokenFile((root_ / "a.tokens.json").string());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(*file, read->tokens);

  // Another prefix is another log: no tokens.
  Result<ReplicatedTokens> other = Replica::ReadTokens(redis_.url(), "elsewhere");
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_TRUE(other->tokens.empty());
  EXPECT_EQ(other->as_of, "0-0");
}

// After the housekeeper trimmed the log, the read starts from its snapshot
// (whose write ids still count), and says so when the log was trimmed past
// every snapshot.
TEST_F(ReplicaTest, TokensAreReadFromTheSnapshotOnceTheLogIsTrimmed) {
  GovernanceLog log = DirectLog();
  const auth::TokenRecord a = Minted("a", {auth::Role::kRead});
  const auth::TokenRecord b = Minted("b", {auth::Role::kRoute});
  Result<std::string> first = log.Append(TokenEntry("w1", "a", a));
  Result<std::string> second = log.Append(TokenEntry("w2", "b", b));
  ASSERT_TRUE(first.ok() && second.ok());

  GovernanceSnapshot snapshot;
  snapshot.id = *second;
  snapshot.journal_seq = 2;
  snapshot.journal_hash = std::string(64, '0');
  snapshot.tokens = {{"a", auth::EncodeTokenRecord(a)}, {"b", auth::EncodeTokenRecord(b)}};
  snapshot.write_ids = {{"w1", *first}, {"w2", *second}};
  Result<RedisEndpoint> endpoint = ParseRedisUrl(redis_.url());
  ASSERT_TRUE(endpoint.ok());
  SnapshotStore snapshots(*endpoint, "kvgov:snapshot", milliseconds(2000));
  ASSERT_TRUE(snapshots.Put(snapshot).ok());
  Result<StreamId> at = ParseStreamId(*second);
  ASSERT_TRUE(at.ok());
  ASSERT_TRUE(log.TrimBelow(*at).ok());
  ASSERT_TRUE(log.Append(TokenEntry("w3", "a", std::nullopt)).ok());
  Result<std::string> last = log.Append(TokenEntry("w1", "a", a));  // a retry, after the revoke
  ASSERT_TRUE(last.ok());

  Result<ReplicatedTokens> read = Replica::ReadTokens(redis_.url(), "kvgov");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->tokens, (std::vector<auth::TokenRecord>{b}));
  EXPECT_EQ(read->snapshot, *second);
  EXPECT_EQ(read->as_of, *last);

  // Trimmed past the snapshot: the entries between are gone.
  Result<StreamId> end = ParseStreamId(*last);
  ASSERT_TRUE(end.ok());
  ASSERT_TRUE(log.TrimBelow(StreamId{end->ms + 1, 0}).ok());
  Result<ReplicatedTokens> holed = Replica::ReadTokens(redis_.url(), "kvgov");
  ASSERT_FALSE(holed.ok());
  EXPECT_EQ(holed.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(holed.status().message().find("trimmed"), std::string::npos)
      << holed.status().message();
}

}  // namespace
}  // namespace kvgov::replication
