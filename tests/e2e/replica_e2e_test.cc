// Three kvgov replicas (kvgov serve --redis) sharing governance through a
// real redis-server: one governance state and one journal chain head on
// every replica; a directive whose dispatcher is SIGKILLed mid-dispatch is
// taken over by another replica and certified, the owner called at most
// once more; with Redis gone, governance writes answer 503 while routes keep
// answering, and after Redis returns writes work again and the replicas
// converge (docs/adr/0011-replicated-governance-log.md).

#include <httplib.h>

#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "e2e/daemon_process.h"
#include "e2e/fake_control.h"
#include "e2e/fake_engine_publisher.h"
#include "e2e/wait.h"
#include "kvgov/replication/governance_log.h"
#include "kvgov/replication/redis.h"
#include "testing/redis_server_process.h"
#include "testing/scratch_dir.h"

namespace kvgov::testing {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using test_support::RedisServerProcess;

constexpr int64_t kBlockSize = 4;
constexpr int kReplicas = 3;

struct Reply {
  int status = 0;  // 0: no HTTP answer (body says why)
  std::string body;
  // A body that is not JSON (no answer: a paused or killed replica) reads as
  // an empty object, so a caller's value() falls back instead of throwing.
  Json json() const {
    Json parsed = Json::parse(body, nullptr, /*allow_exceptions=*/false);
    return parsed.is_discarded() ? Json::object() : parsed;
  }
};

httplib::Client ClientFor(const DaemonProcess& replica, const std::string& token) {
  httplib::Client client("127.0.0.1", replica.port());
  client.set_connection_timeout(seconds(2));
  // A governance write waits for its entry to be applied (up to 5 s).
  client.set_read_timeout(seconds(15));
  if (!token.empty()) client.set_bearer_token_auth(token);
  return client;
}

Reply ToReply(const httplib::Result& result) {
  if (!result) return Reply{0, "no answer: " + httplib::to_string(result.error())};
  return Reply{result->status, result->body};
}

Reply Get(const DaemonProcess& replica, const std::string& path, const std::string& token = "") {
  httplib::Client client = ClientFor(replica, token);
  return ToReply(client.Get(path));
}

Reply Post(const DaemonProcess& replica, const std::string& path, const Json& body,
           const std::string& token = "") {
  httplib::Client client = ClientFor(replica, token);
  return ToReply(client.Post(path, body.dump(), "application/json"));
}

// "head_seq/head_hash" of a replica's journal, or the reason there is none.
std::string JournalHead(const DaemonProcess& replica) {
  Reply reply = Get(replica, "/v1/journal?since=1&limit=1000");
  Json json = reply.json();
  if (reply.status != 200 || !json.is_object() || !json.contains("head_seq")) {
    return "unreadable (" + std::to_string(reply.status) + "): " + reply.body;
  }
  return json["head_seq"].dump() + "/" + json["head_hash"].dump();
}

// Every row of a replica's journal, by seq.
std::vector<Json> AllRows(const DaemonProcess& replica) {
  std::vector<Json> rows;
  uint64_t since = 1;
  while (true) {
    Json page = Get(replica, "/v1/journal?since=" + std::to_string(since) + "&limit=1000").json();
    if (!page.is_object() || !page["rows"].is_array() || page["rows"].empty()) break;
    for (Json& row : page["rows"]) rows.push_back(std::move(row));
    since = rows.back().value("seq", uint64_t{0}) + 1;
  }
  return rows;
}

bool ListsQuarantine(const DaemonProcess& replica, const std::string& id) {
  Json json = Get(replica, "/v1/quarantines").json();
  if (!json.is_object() || !json["quarantines"].is_array()) return false;
  for (const Json& quarantine : json["quarantines"]) {
    if (quarantine.value("id", "") == id) return true;
  }
  return false;
}

// The lease as r's /v1/leases lists it, or null.
Json ListedLease(const DaemonProcess& replica, const std::string& lease_id) {
  Json json = Get(replica, "/v1/leases").json();
  if (!json.is_object() || !json["leases"].is_array()) return nullptr;
  for (const Json& lease : json["leases"]) {
    if (lease.value("lease_id", "") == lease_id) return lease;
  }
  return nullptr;
}

bool ListsLease(const DaemonProcess& replica, const std::string& lease_id) {
  const Json lease = ListedLease(replica, lease_id);
  return lease.is_object() && lease.value("state", "") == "active";
}

// Polls the directive on `replica` until it is certified or failed; returns
// the last body read.
Json WaitForDirectiveEnd(const DaemonProcess& replica, const std::string& id,
                         seconds timeout = seconds(20)) {
  Json directive;
  WaitFor(
      [&] {
        directive = Get(replica, "/v1/invalidations/" + id).json();
        return directive.is_object() && (directive.value("state", "") == "certified" ||
                                         directive.value("state", "") == "failed");
      },
      timeout);
  return directive;
}

class ReplicaE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    // An acknowledged write survives a Redis restart only with the append-
    // only file, as production Redis for kvgov must run.
    redis_.set_append_only(true);
    Status started = redis_.Start();
    ASSERT_TRUE(started.ok()) << started.message();
    issuer_key_ = (keys_dir_ / "issuer.key").string();
    tenant_secret_ = (keys_dir_ / "tenant.key").string();
    std::string output;
    ASSERT_EQ(DaemonProcess::RunToExit(
                  {"keygen", "--issuer-key", issuer_key_, "--tenant-secret-file", tenant_secret_},
                  &output),
              0)
        << output;
    for (int i = 0; i < kReplicas; ++i) {
      Status ready = StartReplica(i);
      ASSERT_TRUE(ready.ok()) << "r" << i << ": " << ready.message();
    }
    for (int i = 0; i < kReplicas; ++i) {
      ASSERT_TRUE(publisher_.WaitForSubscriber(milliseconds(20000)))
          << "only " << i << " of " << kReplicas << " replicas subscribed";
    }
    publisher_.Store(std::nullopt, 2, 100);
    for (int i = 0; i < kReplicas; ++i) {
      Reply workers;
      ASSERT_TRUE(WaitFor([&] {
        workers = Get(replicas_[i], "/v1/workers");
        Json json = workers.json();
        return json.is_object() && json["workers"].is_array() && json["workers"].size() == 1 &&
               json["workers"][0]["blocks"]["hbm"] == 2;
      })) << "r"
          << i << ": " << workers.status << " " << workers.body << replicas_[i].Stderr();
    }
  }

  // Starts (or restarts, on its data dir) replica i.
  Status StartReplica(int i) {
    std::vector<std::string> args = {"--engine",
                                     EngineArg("w1", "vllm", publisher_, control_, kBlockSize),
                                     "--redis",
                                     redis_.url(),
                                     "--issuer-key",
                                     issuer_key_,
                                     "--tenant-secret-file",
                                     tenant_secret_,
                                     "--replica-id",
                                     "r" + std::to_string(i),
                                     "--claim-ttl-ms",
                                     "1000",
                                     "--probe-interval-ms",
                                     "50"};
    args.insert(args.end(), extra_flags_.begin(), extra_flags_.end());
    return replicas_[i].Start(args);
  }

  DaemonProcess& r(int i) { return replicas_[i]; }

  // The fleet's Redis, for what a test writes or reads there directly.
  replication::RedisEndpoint Endpoint() const {
    Result<replication::RedisEndpoint> endpoint = replication::ParseRedisUrl(redis_.url());
    EXPECT_TRUE(endpoint.ok()) << endpoint.status().ToString();
    return endpoint.ok() ? *endpoint : replication::RedisEndpoint{};
  }
  replication::GovernanceLog DirectLog() const {
    return replication::GovernanceLog(Endpoint(), "kvgov:governance", milliseconds(2000));
  }

  // Polls until the journals of `which` replicas report one head.
  ::testing::AssertionResult JournalHeadsConverge(std::vector<int> which,
                                                  seconds timeout = seconds(20)) {
    std::vector<std::string> heads;
    const bool converged = WaitFor(
        [&] {
          heads.clear();
          for (int i : which) heads.push_back(JournalHead(replicas_[i]));
          for (const std::string& head : heads) {
            if (head != heads.front() || head.starts_with("unreadable")) return false;
          }
          return true;
        },
        timeout);
    if (converged) return ::testing::AssertionSuccess();
    ::testing::AssertionResult failure = ::testing::AssertionFailure();
    failure << "journal heads differ:";
    for (size_t k = 0; k < which.size(); ++k) {
      failure << "\n  r" << which[k] << ": " << heads[k];
    }
    for (int i : which) failure << "\n--- r" << i << " stderr:\n" << replicas_[i].Stderr();
    return failure;
  }

  std::vector<std::string> extra_flags_;  // for every replica, set before SetUp
  const test_support::ScratchDir keys_dir_{"kvgov_replica_e2e"};
  std::string issuer_key_;
  std::string tenant_secret_;
  // Destroyed in reverse: the replicas first (they call the control), then
  // the control (it drives the publisher), the publisher, Redis.
  RedisServerProcess redis_;
  FakeEnginePublisher publisher_{kBlockSize};
  std::mutex publisher_mu_;  // the control's reset and a test thread both drive the publisher
  FakeControl control_{"/reset_prefix_cache", [this] {
                         std::lock_guard lock(publisher_mu_);
                         publisher_.Clear();
                       }};
  std::array<DaemonProcess, kReplicas> replicas_;
};

const Json kQuarantine = {
    {"model", "llama"}, {"token_ids", Tokens(8, 100)}, {"reason", "poisoned_kv"}};
const Json kInvalidation = {
    {"model", "llama"}, {"token_ids", Tokens(8, 100)}, {"reason", "poisoned_kv"}};

TEST_F(ReplicaE2ETest, OneGovernanceStateAcrossReplicas) {
  // A quarantine written to r0 is r1's and r2's.
  Reply quarantined = Post(r(0), "/v1/quarantine", kQuarantine);
  ASSERT_EQ(quarantined.status, 200) << quarantined.body << r(0).Stderr();
  const std::string quarantine_id = quarantined.json().value("id", "");
  ASSERT_FALSE(quarantine_id.empty()) << quarantined.body;
  EXPECT_TRUE(ListsQuarantine(r(0), quarantine_id));  // read-your-write on the writer
  for (int i : {1, 2}) {
    EXPECT_TRUE(WaitFor([&] { return ListsQuarantine(r(i), quarantine_id); }, seconds(10)))
        << "r" << i << ": " << Get(r(i), "/v1/quarantines").body << r(i).Stderr();
  }
  // Lifted on r1, it is lifted on every replica, in its gate too.
  auto quarantined_blocks = [&](int i) {
    const std::string metrics = Get(r(i), "/metrics").body;
    const size_t at = metrics.find("\nkvgov_quarantined_blocks ");
    return at == std::string::npos ? -1.0 : std::stod(metrics.substr(at + 26));
  };
  // The record is listed once it is stored; the gate learns it just after.
  EXPECT_TRUE(WaitFor([&] { return quarantined_blocks(2) > 0; }, seconds(10)));
  Reply lifted =
      Post(r(1), "/v1/quarantines/" + quarantine_id + "/lift", {{"reason", "false alarm"}});
  ASSERT_EQ(lifted.status, 200) << lifted.body << r(1).Stderr();
  for (int i : {0, 1, 2}) {
    EXPECT_TRUE(WaitFor([&] { return !ListsQuarantine(r(i), quarantine_id); }, seconds(10)))
        << "r" << i << ": " << Get(r(i), "/v1/quarantines").body;
    EXPECT_TRUE(WaitFor([&] { return quarantined_blocks(i) == 0; }, seconds(10))) << "r" << i;
  }

  // A lease reported to r1 is r0's and r2's.
  Reply events = Post(r(1), "/v1/events",
                      {{"events",
                        {{{"type", "nixl_lease"},
                          {"lease_id", "l1"},
                          {"event", "create"},
                          {"role", "prefill_pin"},
                          {"span_digest", "s"},
                          {"remote_engine", "w1"},
                          {"ttl_ms", 60000}}}}});
  ASSERT_EQ(events.status, 200) << events.body << r(1).Stderr();
  EXPECT_EQ(events.json().value("accepted", -1), 1) << events.body;
  EXPECT_TRUE(ListsLease(r(1), "l1")) << Get(r(1), "/v1/leases").body;
  for (int i : {0, 2}) {
    EXPECT_TRUE(WaitFor([&] { return ListsLease(r(i), "l1"); }, seconds(10)))
        << "r" << i << ": " << Get(r(i), "/v1/leases").body << r(i).Stderr();
  }

  // An invalidation posted to r2 is dispatched once and certified on all three.
  Reply created = Post(r(2), "/v1/invalidations", kInvalidation);
  ASSERT_EQ(created.status, 202) << created.body << r(2).Stderr();
  const std::string directive_id = created.json().value("id", "");
  ASSERT_FALSE(directive_id.empty()) << created.body;
  std::string certificate_id;
  for (int i : {2, 0, 1}) {
    Json directive = WaitForDirectiveEnd(r(i), directive_id);
    ASSERT_EQ(directive.value("state", ""), "certified")
        << "r" << i << ": " << directive.dump() << r(i).Stderr();
    const std::string id = directive.value("certificate_id", "");
    EXPECT_FALSE(id.empty()) << directive.dump();
    if (certificate_id.empty()) certificate_id = id;
    EXPECT_EQ(id, certificate_id) << "r" << i << ": " << directive.dump();
  }
  EXPECT_EQ(control_.calls(), 1) << r(0).Stderr() << r(1).Stderr() << r(2).Stderr();

  // The certificate is replicated byte for byte.
  std::vector<std::string> certificates;
  for (int i = 0; i < kReplicas; ++i) {
    Reply certificate = Get(r(i), "/v1/certificates/" + certificate_id);
    ASSERT_EQ(certificate.status, 200) << "r" << i << ": " << certificate.body << r(i).Stderr();
    certificates.push_back(certificate.body);
  }
  EXPECT_EQ(certificates[1], certificates[0]);
  EXPECT_EQ(certificates[2], certificates[0]);
  EXPECT_EQ(Json::parse(certificates[0], nullptr, false).value("certificate_id", ""),
            certificate_id)
      << certificates[0];

  EXPECT_TRUE(JournalHeadsConverge({0, 1, 2}));
  // Each row names who asked and the replica it went through.
  auto row_of = [&](std::string_view kind, const std::string& secret = "") {
    const Json page = Get(r(0), "/v1/journal?since=1&limit=1000", secret).json();
    for (const Json& row : page["rows"]) {
      if (row["kind"] == kind) return row;
    }
    return Json::object();
  };
  EXPECT_EQ(row_of("quarantine").value("origin", ""), "r0");
  EXPECT_EQ(row_of("quarantine").value("actor", ""), "local");
  EXPECT_EQ(row_of("quarantine.lift").value("origin", ""), "r1");
  EXPECT_EQ(row_of("lease.transition").value("origin", ""), "r1");
  EXPECT_EQ(row_of("invalidation.planned").value("origin", ""), "r2");
  EXPECT_EQ(row_of("certificate").value("actor", ""), "kvgov");

  // A token added through the log: every replica starts requiring it.
  std::string output;
  ASSERT_EQ(DaemonProcess::RunToExit({"token", "add", "ops", "--role", "admin", "--role", "read",
                                      "--redis", redis_.url()},
                                     &output),
            0)
      << output;
  std::istringstream lines(output);
  std::string line;
  std::string secret;
  while (std::getline(lines, line)) {
    if (!line.empty()) secret = line;
  }
  ASSERT_FALSE(secret.empty()) << output;
  for (int i = 0; i < kReplicas; ++i) {
    Reply without;
    Reply with;
    EXPECT_TRUE(WaitFor(
        [&] {
          without = Get(r(i), "/v1/quarantines");
          with = Get(r(i), "/v1/quarantines", secret);
          return without.status == 401 && with.status == 200;
        },
        seconds(10)))
        << "r" << i << ": without the token " << without.status << " " << without.body
        << "; with it " << with.status << " " << with.body << r(i).Stderr();
  }
  // Journaled by the command's user, never with the secret.
  const Json added = row_of("token.add", secret);
  EXPECT_EQ(added.value("origin", ""), "kvgov-token") << added.dump();
  EXPECT_EQ(added.value("actor", "").rfind("cli:", 0), 0u) << added.dump();
  EXPECT_EQ(added.dump().find(secret.substr(6)), std::string::npos);
  // Nobody dispatched the certified directive again meanwhile.
  EXPECT_EQ(control_.calls(), 1);
}

// A revocation made on one replica changes the salt every replica gives
// the tenant, and a quarantine made on one diverts on the others (docs/adr/
// 0028): what the gateway forwards and /v1/route hands out is the same
// code, so /v1/route's answer stands for both.
TEST_F(ReplicaE2ETest, RevocationsAndDiversionsHoldOnEveryReplica) {
  const Json acme = {{"model", "llama"}, {"tenant", "acme"}, {"token_ids", Tokens(8, 500)}};
  auto salt_on = [&](int i) {
    return Post(r(i), "/v1/route", acme).json().value("cache_salt", "");
  };
  const std::string before = salt_on(1);
  ASSERT_EQ(before.size(), 32u) << before;
  ASSERT_EQ(salt_on(2), before);

  Reply revoked = Post(r(0), "/v1/invalidations",
                       {{"scope", "tenant"}, {"tenant", "acme"}, {"reason", "offboarded"}});
  ASSERT_EQ(revoked.status, 202) << revoked.body << r(0).Stderr();
  const std::string after = salt_on(0);
  EXPECT_NE(after, before);
  EXPECT_EQ(after.substr(0, 16), before.substr(0, 16));  // the tenant's tag stays
  for (int i : {1, 2}) {
    EXPECT_TRUE(WaitFor([&] { return salt_on(i) == after; })) << "r" << i << r(i).Stderr();
  }
  EXPECT_TRUE(JournalHeadsConverge({0, 1, 2}));

  // A quarantine of acme's span, made on r0: r1 and r2 divert acme's
  // requests crossing it. Nothing has proven the fake engine keys by salt,
  // so the diverted route is refused there, naming why.
  Json quarantine = acme;
  quarantine["reason"] = "poisoned_kv";
  ASSERT_EQ(Post(r(0), "/v1/quarantine", quarantine).status, 200);
  for (int i : {1, 2}) {
    Reply diverted;
    EXPECT_TRUE(WaitFor([&] {
      diverted = Post(r(i), "/v1/route", acme);
      return diverted.status == 503;
    })) << "r"
        << i << ": " << diverted.status << " " << diverted.body;
    EXPECT_NE(diverted.body.find("salt_unverified"), std::string::npos) << diverted.body;
  }
}

TEST_F(ReplicaE2ETest, KilledDispatcherIsTakenOver) {
  // r0 is still waiting for the owner's first answer when it dies.
  control_.DelayFirstReset(milliseconds(2000));
  Reply created = Post(r(0), "/v1/invalidations", kInvalidation);
  ASSERT_EQ(created.status, 202) << created.body << r(0).Stderr();
  const std::string directive_id = created.json().value("id", "");
  ASSERT_FALSE(directive_id.empty()) << created.body;
  ASSERT_TRUE(WaitFor([&] { return control_.calls() == 1; }, seconds(10)))
      << "calls " << control_.calls() << "\n"
      << r(0).Stderr();
  r(0).Kill();

  Json directive = WaitForDirectiveEnd(r(1), directive_id, seconds(20));
  ASSERT_EQ(directive.value("state", ""), "certified") << directive.dump() << "\n--- r1:\n"
                                                       << r(1).Stderr() << "\n--- r2:\n"
                                                       << r(2).Stderr();
  // The survivor called the owner again, once.
  EXPECT_EQ(control_.calls(), 2) << r(1).Stderr() << r(2).Stderr();
  const std::string survivors = r(1).Stderr() + r(2).Stderr();
  const size_t taken_over = survivors.find("event=directive.taken_over replica=r");
  ASSERT_NE(taken_over, std::string::npos) << survivors;
  const std::string line =
      survivors.substr(taken_over, survivors.find('\n', taken_over) - taken_over);
  EXPECT_NE(line.find(" directive=" + directive_id + " "), std::string::npos) << line;

  const std::string certificate_id = directive.value("certificate_id", "");
  ASSERT_FALSE(certificate_id.empty()) << directive.dump();
  Json on_r2 = WaitForDirectiveEnd(r(2), directive_id, seconds(10));
  EXPECT_EQ(on_r2.value("state", ""), "certified") << on_r2.dump() << r(2).Stderr();
  EXPECT_EQ(on_r2.value("certificate_id", ""), certificate_id) << on_r2.dump();
  Reply cert1 = Get(r(1), "/v1/certificates/" + certificate_id);
  Reply cert2 = Get(r(2), "/v1/certificates/" + certificate_id);
  EXPECT_EQ(cert1.status, 200) << cert1.body;
  EXPECT_EQ(cert2.status, 200) << cert2.body;
  EXPECT_EQ(cert1.body, cert2.body);

  EXPECT_TRUE(JournalHeadsConverge({1, 2}));
  EXPECT_EQ(control_.calls(), 2);
}

TEST_F(ReplicaE2ETest, RedisOutageRefusesWritesKeepsRoutingAndConverges) {
  Json replica = Get(r(1), "/v1/config").json()["replica"];
  EXPECT_EQ(replica.value("id", ""), "r1") << replica.dump();
  EXPECT_EQ(replica.value("log_connected", false), true) << replica.dump();
  EXPECT_EQ(replica.dump().find("password"), std::string::npos);

  redis_.Kill();
  EXPECT_TRUE(WaitFor([&] {
    return Get(r(1), "/v1/config").json()["replica"].value("log_connected", true) == false;
  })) << Get(r(1), "/v1/config").body;

  Reply refused = Post(r(0), "/v1/quarantine", kQuarantine);
  EXPECT_EQ(refused.status, 503) << refused.body << r(0).Stderr();
  Json error = refused.json();
  ASSERT_TRUE(error.is_object() && error["error"].is_object()) << refused.body;
  EXPECT_EQ(error["error"].value("code", ""), "unavailable") << refused.body;
  EXPECT_NE(error["error"].value("message", "").find("governance log"), std::string::npos)
      << refused.body;

  for (int i = 0; i < kReplicas; ++i) {
    Reply routed = Post(r(i), "/v1/route", {{"model", "llama"}, {"token_ids", Tokens(8, 100)}});
    EXPECT_EQ(routed.status, 200) << "r" << i << ": " << routed.body << r(i).Stderr();
    EXPECT_EQ(routed.json().value("worker", ""), "w1") << routed.body;
  }

  Status restarted = redis_.Restart();
  ASSERT_TRUE(restarted.ok()) << restarted.message();

  // The first write after Redis is back succeeds: r1 wrote nothing during
  // the outage, so its connection is the one Redis dropped, and it is made
  // anew before the write is sent on it.
  Reply accepted = Post(r(1), "/v1/quarantine", kQuarantine);
  ASSERT_EQ(accepted.status, 200) << accepted.body << r(1).Stderr();
  const std::string quarantine_id = accepted.json().value("id", "");
  ASSERT_FALSE(quarantine_id.empty()) << accepted.body;
  for (int i : {0, 2}) {
    EXPECT_TRUE(WaitFor([&] { return ListsQuarantine(r(i), quarantine_id); }, seconds(15)))
        << "r" << i << ": " << Get(r(i), "/v1/quarantines").body << r(i).Stderr();
  }
  EXPECT_TRUE(JournalHeadsConverge({0, 1, 2}));
}

// Redis stalls (SIGSTOP, past the 5 s a write waits for its entry) while
// two replicas write: each write answers 200 or fails, never is applied
// twice (a write retried after a reply it never saw carries the same write
// id), and once Redis goes on every acknowledged write is in every journal
// exactly once and the chains are one.
TEST_F(ReplicaE2ETest, ARedisStallDelaysOrFailsWritesButNeverAppliesOneTwice) {
  std::mutex mu;
  std::vector<std::string> acked;  // guarded by mu
  std::map<int, int> answers;      // guarded by mu; by HTTP status (0: none)
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w : {0, 1}) {
    writers.emplace_back([&, w] {
      for (int n = 0; !stop.load(); ++n) {
        Json body = kQuarantine;
        body["reason"] = "stall-" + std::to_string(w) + "-" + std::to_string(n);
        Reply reply = Post(r(w), "/v1/quarantine", body);
        {
          std::lock_guard lock(mu);
          ++answers[reply.status];
          if (reply.status == 200) acked.push_back(reply.json().value("id", ""));
        }
        std::this_thread::sleep_for(milliseconds(50));
      }
    });
  }
  std::this_thread::sleep_for(milliseconds(500));
  ASSERT_EQ(::kill(redis_.pid(), SIGSTOP), 0);
  std::this_thread::sleep_for(seconds(6));
  ASSERT_EQ(::kill(redis_.pid(), SIGCONT), 0);
  std::this_thread::sleep_for(seconds(1));
  stop.store(true);
  for (std::thread& writer : writers) writer.join();
  ASSERT_TRUE(JournalHeadsConverge({0, 1, 2}, seconds(30)));

  std::lock_guard lock(mu);
  std::string tally;
  for (const auto& [status, count] : answers) {
    tally += " " + std::to_string(status) + ":" + std::to_string(count);
  }
  EXPECT_GT(answers[200], 0) << tally;
  EXPECT_GT(answers[503] + answers[0], 0) << "no write noticed the stall:" << tally;
  for (int i = 0; i < kReplicas; ++i) {
    std::map<std::string, int> rows_of;  // quarantine id -> rows
    for (const Json& row : AllRows(r(i))) {
      if (row.value("kind", "") == "quarantine") ++rows_of[row.value("subject", "")];
    }
    for (const auto& [id, rows] : rows_of) {
      EXPECT_EQ(rows, 1) << "r" << i << ": quarantine " << id << " applied " << rows << " times";
    }
    for (const std::string& id : acked) {
      EXPECT_EQ(rows_of[id], 1) << "r" << i << ": acknowledged quarantine " << id << " is missing";
    }
  }
}

// Two replicas do not pile onto one worker: a decision in flight on r0
// counts in r1's cost within a few load exchanges, and stops counting once
// released.
TEST_F(ReplicaE2ETest, InFlightRouteLoadIsShared) {
  const Json prompt = {{"model", "llama"}, {"token_ids", Tokens(8, 100)}};
  auto peer_blocks_on_r1 = [&] {
    Json decision = Post(r(1), "/v1/route", prompt).json();
    if (!decision.is_object() || !decision["candidates"].is_array() ||
        decision["candidates"].empty()) {
      return int64_t{-1};
    }
    const int64_t blocks =
        decision["candidates"][0]["load"].value("peer_in_flight_blocks", int64_t{-1});
    // Release r1's own probe, so only r0's decision is in flight.
    (void)Post(r(1), "/v1/route/" + decision.value("decision_id", "") + "/done", Json::object());
    return blocks;
  };
  Json held = Post(r(0), "/v1/route", prompt).json();
  const std::string held_id = held.value("decision_id", "");
  ASSERT_FALSE(held_id.empty()) << held.dump();
  int64_t seen = -1;
  EXPECT_TRUE(WaitFor([&] { return (seen = peer_blocks_on_r1()) > 0; }, seconds(10)))
      << "r1 never saw r0's in-flight load (last " << seen << ")";
  ASSERT_EQ(Post(r(0), "/v1/route/" + held_id + "/done", Json::object()).status, 200);
  EXPECT_TRUE(WaitFor([&] { return (seen = peer_blocks_on_r1()) == 0; }, seconds(10)))
      << "r0's released load still counts on r1 (" << seen << ")";
}

// A record too large for a journal row is refused before it reaches the
// log (413). One that reaches the log anyway, from another writer, is
// skipped by every replica alike, not retried: the log keeps flowing and the
// chains stay equal.
TEST_F(ReplicaE2ETest, AnEntryEveryReplicaRefusesIsSkippedNotRetried) {
  ASSERT_TRUE(JournalHeadsConverge({0, 1, 2}));
  const std::string before = JournalHead(r(0));
  const Json huge = {
      {"model", "llama"}, {"token_ids", Tokens(8, 100)}, {"reason", std::string(1200 * 1024, 'x')}};
  Reply refused = Post(r(0), "/v1/quarantine", huge);
  EXPECT_EQ(refused.status, 413) << refused.body.substr(0, 300);
  EXPECT_NE(refused.body.find("byte limit"), std::string::npos) << refused.body.substr(0, 300);

  replication::GovernanceLog log = DirectLog();
  replication::LogEntry foreign;
  foreign.write_id = "foreign-1";
  foreign.origin = "elsewhere";
  foreign.kind = "quarantine";
  foreign.subject = "foreign";
  foreign.payload = std::string(1200 * 1024, 'y');
  foreign.time_ms = 1;
  ASSERT_TRUE(log.Append(foreign).ok());

  Reply accepted = Post(r(1), "/v1/quarantine", kQuarantine);
  ASSERT_EQ(accepted.status, 200) << accepted.body << r(1).Stderr();
  EXPECT_TRUE(JournalHeadsConverge({0, 1, 2}));
  EXPECT_NE(JournalHead(r(0)), before);
  for (int i = 0; i < kReplicas; ++i) {
    const std::string metrics = Get(r(i), "/metrics").body;
    EXPECT_NE(metrics.find("kvgov_replica_log_rejected_entries_total 1\n"), std::string::npos)
        << "r" << i << ":\n"
        << metrics.substr(0, 200);
  }
}

// A replica that was down while a lease expired records nothing of its own
// at restart (the housekeeper recorded the expiry in the log): it applies
// the log and rejoins the same chain.
TEST_F(ReplicaE2ETest, ARestartedReplicaRejoinsTheChain) {
  Reply created = Post(r(0), "/v1/events",
                       {{"events",
                         {{{"type", "nixl_lease"},
                           {"lease_id", "short"},
                           {"event", "create"},
                           {"role", "prefill_pin"},
                           {"span_digest", "s"},
                           {"remote_engine", "w1"},
                           {"ttl_ms", 1500}}}}});
  ASSERT_EQ(created.json().value("accepted", -1), 1) << created.body << r(0).Stderr();
  ASSERT_TRUE(WaitFor([&] { return ListsLease(r(1), "short"); }, seconds(10)))
      << Get(r(1), "/v1/leases").body;
  ASSERT_EQ(r(1).Stop(), 0) << r(1).Stderr();

  // The lease runs out while r1 is down; a live replica records it.
  ASSERT_TRUE(WaitFor(
      [&] {
        Json rows = Get(r(0), "/v1/journal?since=1&limit=1000").json()["rows"];
        for (const Json& row : rows) {
          if (row.value("kind", "") == "lease.transition" && row.value("subject", "") == "short" &&
              row.dump().find("expired") != std::string::npos) {
            return true;
          }
        }
        return false;
      },
      seconds(15)))
      << Get(r(0), "/v1/journal?since=1&limit=1000").body << r(0).Stderr();

  Status restarted = StartReplica(1);
  ASSERT_TRUE(restarted.ok()) << restarted.message();
  EXPECT_TRUE(JournalHeadsConverge({0, 1, 2}));
  Json leases = Get(r(1), "/v1/leases").json();
  ASSERT_TRUE(leases.is_object() && leases["leases"].is_array()) << leases.dump();
  ASSERT_EQ(leases["leases"].size(), 1u) << leases.dump();
  EXPECT_EQ(leases["leases"][0].value("state", ""), "expired") << leases.dump();
  EXPECT_EQ(leases["leases"][0].value("event", ""), "expiry") << leases.dump();
}

Json LeaseEvent(const std::string& lease_id, const std::string& event) {
  Json lease = {{"type", "nixl_lease"},  {"lease_id", lease_id},           {"event", event},
                {"role", "prefill_pin"}, {"span_digest", "s-" + lease_id}, {"remote_engine", "w1"}};
  if (event == "create") lease["ttl_ms"] = 60000;
  return {{"events", Json::array({lease})}};
}

int64_t RefusedEntries(const DaemonProcess& replica) {
  const std::string metrics = Get(replica, "/metrics").body;
  const std::string name = "kvgov_replica_log_refused_entries_total ";
  const size_t at = metrics.find("\n" + name);
  return at == std::string::npos ? -1 : std::stoll(metrics.substr(at + 1 + name.size()));
}

// Two replicas asked at once to end one lease two ways: the lease machine,
// applied in log order, lets one through and refuses the other on every
// replica, so each lease ends once, the same way everywhere, with one row.
// A write the log already overtook (here a heartbeat appended after the
// lease ended, as a replica that accepted it concurrently would have) is
// refused alike by every replica.
TEST_F(ReplicaE2ETest, ConflictingLeaseWritesEndTheLeaseOnceOnEveryReplica) {
  constexpr int kLeases = 4;
  for (int n = 0; n < kLeases; ++n) {
    const std::string id = "race-" + std::to_string(n);
    Reply created = Post(r(0), "/v1/events", LeaseEvent(id, "create"));
    ASSERT_EQ(created.json().value("accepted", -1), 1) << created.body << r(0).Stderr();
    for (int i : {1, 2}) {
      ASSERT_TRUE(WaitFor([&] { return ListsLease(r(i), id); })) << Get(r(i), "/v1/leases").body;
    }
    Reply completed;
    Reply aborted;
    std::thread complete(
        [&] { completed = Post(r(1), "/v1/events", LeaseEvent(id, "transfer_complete")); });
    std::thread abort([&] { aborted = Post(r(2), "/v1/events", LeaseEvent(id, "abort")); });
    complete.join();
    abort.join();
    const int won = completed.json().value("accepted", 0) + aborted.json().value("accepted", 0);
    EXPECT_EQ(won, 1) << completed.body << "\n" << aborted.body;
    for (const Reply* loser : {&completed, &aborted}) {
      Json rejected = loser->json()["rejected"];
      if (rejected.is_array() && !rejected.empty()) {
        EXPECT_EQ(rejected[0].value("code", ""), "failed_precondition") << loser->body;
      }
    }
  }
  ASSERT_TRUE(JournalHeadsConverge({0, 1, 2}));
  Json rows = Get(r(0), "/v1/journal?since=1&limit=1000").json()["rows"];
  for (int n = 0; n < kLeases; ++n) {
    const std::string id = "race-" + std::to_string(n);
    int endings = 0;
    for (const Json& row : rows) {
      if (row.value("kind", "") != "lease.transition" || row.value("subject", "") != id) continue;
      const Json payload = row["payload"].is_string()
                               ? Json::parse(row["payload"].get<std::string>(), nullptr, false)
                               : row["payload"];
      if (payload.value("from", "") == "active") ++endings;
    }
    EXPECT_EQ(endings, 1) << id << ": " << rows.dump();
    const Json on_r0 = ListedLease(r(0), id);
    for (int i : {1, 2}) EXPECT_EQ(ListedLease(r(i), id), on_r0) << id << " on r" << i;
  }

  // A heartbeat for an ended lease, appended as a concurrent writer would.
  const Json ended = ListedLease(r(0), "race-0");
  ASSERT_TRUE(ended.is_object());
  Json lease = {{"lease_id", "race-0"},
                {"event", "heartbeat"},
                {"role", ended["role"]},
                {"remote_engine", ended["remote_engine"]},
                {"span_digest", ended["span_digest"]},
                {"tokens", ended["tokens"]},
                {"granted_at_ms", ended["granted_at_ms"]},
                {"expires_at_ms", ended["expires_at_ms"]},
                {"ttl_ms", ended["ttl_ms"]},
                {"bytes_moved", ended["bytes_moved"]}};
  replication::GovernanceLog log = DirectLog();
  replication::LogEntry stale;
  stale.write_id = "stale-heartbeat";
  stale.origin = "r1";
  stale.time_ms = ended.value("granted_at_ms", int64_t{0}) + 10;
  stale.writes = {{"governance", "lease/race-0",
                   Json{{"lease", lease}, {"worker", "w1"}, {"keys", Json::array()}}.dump()}};
  std::array<int64_t, kReplicas> refused_before{};
  for (int i = 0; i < kReplicas; ++i) refused_before[i] = RefusedEntries(r(i));
  ASSERT_TRUE(log.Append(stale).ok());
  for (int i = 0; i < kReplicas; ++i) {
    EXPECT_TRUE(WaitFor([&] { return RefusedEntries(r(i)) == refused_before[i] + 1; }))
        << "r" << i << ":\n"
        << r(i).Stderr();
    EXPECT_NE(r(i).Stderr().find("event 'heartbeat' cannot move it (a concurrent write ended it)"),
              std::string::npos)
        << r(i).Stderr();
    EXPECT_EQ(ListedLease(r(i), "race-0"), ended) << "r" << i;
  }
  EXPECT_TRUE(JournalHeadsConverge({0, 1, 2}));
}

// A second process started under a replica id a live one holds refuses to
// start, naming the id, and the fleet is untouched.
TEST_F(ReplicaE2ETest, ASecondProcessUnderALiveReplicaIdRefusesToStart) {
  DaemonProcess impostor;
  Status started =
      impostor.Start({"--engine", EngineArg("w1", "vllm", publisher_, control_, kBlockSize),
                      "--redis", redis_.url(), "--issuer-key", issuer_key_, "--tenant-secret-file",
                      tenant_secret_, "--replica-id", "r0", "--claim-ttl-ms", "1000"});
  ASSERT_FALSE(started.ok());
  EXPECT_NE(impostor.Stderr().find("replica id 'r0' is held by another running kvgov"),
            std::string::npos)
      << impostor.Stderr();
  EXPECT_EQ(Get(r(0), "/v1/config").json()["replica"].value("id", ""), "r0");
  EXPECT_TRUE(JournalHeadsConverge({0, 1, 2}));
}

// A replica whose id another process took while it could not renew it (set
// here in Redis as that process would) stops serving as it and exits 1; the
// others go on.
TEST_F(ReplicaE2ETest, AReplicaWhoseIdWasTakenStopsAndExits1) {
  replication::RedisConnection redis(Endpoint(), milliseconds(2000));
  ASSERT_TRUE(
      redis.Command({"SET", "kvgov:claim:replica/r2", "another-instance", "PX", "60000"}).ok());
  ASSERT_TRUE(WaitFor([&] { return r(2).Stderr().find("shutting down") != std::string::npos; },
                      seconds(10)))
      << r(2).Stderr();
  const std::string output = r(2).Stderr();
  EXPECT_EQ(r(2).Stop(), 1) << output;
  EXPECT_NE(output.find("replica id 'r2' was taken by another kvgov"), std::string::npos) << output;
  Reply accepted = Post(r(0), "/v1/quarantine", kQuarantine);
  EXPECT_EQ(accepted.status, 200) << accepted.body;
  EXPECT_TRUE(JournalHeadsConverge({0, 1}));
}

// ---- The chaos soak ---------------------------------------------------------
//
// Governance writes (quarantines and their lifts, leases), routes and
// invalidations at a steady rate against the three replicas, while a driver,
// at random points under a seed, kills -9 a replica and restarts it (some
// for longer than the retained history, so they rejoin from the snapshot),
// restarts Redis, and pauses a replica (SIGSTOP) past its claim ttl. Then
// every fault is healed and the replicas must converge: every acknowledged
// write in every replica's journal exactly once (or inside a span it
// adopted from a snapshot), one chain head, every directive certified once
// or failed with a reason, the owner called at most once more per takeover
// or restart, the stream trimmed, every replica holding its own live id
// claim. KVGOV_CHAOS_SECONDS (default 30) and KVGOV_CHAOS_SEED (default 1)
// set the run; `make soak-replicas` runs it longer under several seeds.

int64_t EnvOr(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::stoll(value) : fallback;
}

class ReplicaChaosTest : public ReplicaE2ETest {
 protected:
  ReplicaChaosTest() {
    // Little history, frequent snapshots: a replica down for a few seconds
    // comes back past the trim.
    extra_flags_ = {"--log-retain-ms", "2000", "--snapshot-interval-ms", "500"};
  }

  enum class Health { kUp, kDown, kPaused };

  // A live replica's port, or 0 when none is up.
  uint16_t PickUp(std::mt19937_64& rng) {
    std::lock_guard lock(health_mu_);
    std::vector<int> up;
    for (int i = 0; i < kReplicas; ++i) {
      if (health_[i] == Health::kUp) up.push_back(i);
    }
    if (up.empty()) return 0;
    return replicas_[up[rng() % up.size()]].port();
  }

  // Short timeouts: a request to a replica paused under it gives up.
  static Reply Send(uint16_t port, const std::string& path, const Json& body) {
    httplib::Client client("127.0.0.1", port);
    client.set_connection_timeout(seconds(1));
    client.set_read_timeout(seconds(7));  // a write waits up to 5 s for its entry
    return ToReply(client.Post(path, body.dump(), "application/json"));
  }

  void SetHealth(int i, Health health) {
    std::lock_guard lock(health_mu_);
    health_[i] = health;
  }

  std::mutex health_mu_;
  std::array<Health, kReplicas> health_{Health::kUp, Health::kUp, Health::kUp};
};

TEST_F(ReplicaChaosTest, ChaosSoakConverges) {
  const int64_t run_seconds = EnvOr("KVGOV_CHAOS_SECONDS", 30);
  const auto seed = static_cast<uint64_t>(EnvOr("KVGOV_CHAOS_SEED", 1));
  std::atomic<bool> stop{false};
  std::mutex acked_mu;
  std::vector<std::string> acked_quarantines;  // guarded by acked_mu
  std::vector<std::string> acked_lifts;        // guarded by acked_mu
  std::vector<std::string> acked_leases;       // guarded by acked_mu
  std::vector<std::string> acked_directives;   // guarded by acked_mu
  std::atomic<uint64_t> write_attempts{0};
  std::atomic<uint64_t> routes_ok{0};
  std::atomic<uint64_t> routes_failed{0};

  std::thread writer([&] {
    std::mt19937_64 rng(seed * 7 + 1);
    for (int n = 0; !stop.load(); ++n) {
      std::this_thread::sleep_for(milliseconds(40));
      const uint16_t port = PickUp(rng);
      if (port == 0) continue;
      write_attempts.fetch_add(1);
      if (n % 4 == 3) {  // a lease, created and completed through two replicas
        const std::string id = "chaos-lease-" + std::to_string(n);
        Reply created = Send(port, "/v1/events", LeaseEvent(id, "create"));
        if (created.status != 200 || created.json().value("accepted", 0) != 1) continue;
        {
          std::lock_guard lock(acked_mu);
          acked_leases.push_back(id);
        }
        const uint16_t other = PickUp(rng);
        if (other != 0) (void)Send(other, "/v1/events", LeaseEvent(id, "transfer_complete"));
        continue;
      }
      Json body = kQuarantine;
      body["reason"] = "chaos-" + std::to_string(n);
      Reply quarantined = Send(port, "/v1/quarantine", body);
      if (quarantined.status != 200) continue;
      const std::string id = quarantined.json().value("id", "");
      std::lock_guard lock(acked_mu);
      acked_quarantines.push_back(id);
      if (n % 3 == 0) {
        const uint16_t other = PickUp(rng);
        if (other != 0 &&
            Send(other, "/v1/quarantines/" + id + "/lift", {{"reason", "chaos"}}).status == 200) {
          acked_lifts.push_back(id);
        }
      }
    }
  });
  std::thread router([&] {
    std::mt19937_64 rng(seed * 7 + 2);
    while (!stop.load()) {
      std::this_thread::sleep_for(milliseconds(10));
      const uint16_t port = PickUp(rng);
      if (port == 0) continue;
      Reply routed = Send(port, "/v1/route", {{"model", "llama"}, {"token_ids", Tokens(8, 100)}});
      (routed.status == 200 ? routes_ok : routes_failed).fetch_add(1);
    }
  });
  std::thread invalidator([&] {
    std::mt19937_64 rng(seed * 7 + 3);
    while (!stop.load()) {
      {
        // The engine caches the prompt again, so each directive has a target.
        std::lock_guard lock(publisher_mu_);
        publisher_.Store(std::nullopt, 2, 100);
      }
      std::this_thread::sleep_for(milliseconds(1000));
      const uint16_t port = PickUp(rng);
      if (port == 0) continue;
      Reply created = Send(port, "/v1/invalidations", kInvalidation);
      if (created.status != 202) continue;
      std::lock_guard lock(acked_mu);
      acked_directives.push_back(created.json().value("id", ""));
    }
  });

  // The faults, one at a time, each healed before the next.
  std::mt19937_64 rng(seed);
  std::array<std::string, kReplicas> earlier_output;  // of runs before a restart
  int kills = 0;
  int long_kills = 0;
  int redis_restarts = 0;
  int pauses = 0;
  const auto end = std::chrono::steady_clock::now() + seconds(run_seconds);
  while (std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(milliseconds(1000 + static_cast<int64_t>(rng() % 2000)));
    const int victim = static_cast<int>(rng() % kReplicas);
    switch (rng() % 3) {
      case 0: {
        SetHealth(victim, Health::kDown);
        r(victim).Kill();
        earlier_output[victim] += r(victim).Stderr();
        const auto down_for = milliseconds(300 + static_cast<int64_t>(rng() % 4500));
        if (down_for > milliseconds(2500)) ++long_kills;
        std::this_thread::sleep_for(down_for);
        Status restarted = StartReplica(victim);
        ASSERT_TRUE(restarted.ok()) << "r" << victim << ": " << restarted.message();
        SetHealth(victim, Health::kUp);
        ++kills;
        break;
      }
      case 1: {
        redis_.Kill();
        std::this_thread::sleep_for(milliseconds(static_cast<int64_t>(rng() % 800)));
        Status restarted = redis_.Restart();
        ASSERT_TRUE(restarted.ok()) << restarted.message();
        ++redis_restarts;
        break;
      }
      default: {
        SetHealth(victim, Health::kPaused);
        ASSERT_EQ(::kill(r(victim).pid(), SIGSTOP), 0);
        std::this_thread::sleep_for(milliseconds(1200 + static_cast<int64_t>(rng() % 1500)));
        ASSERT_EQ(::kill(r(victim).pid(), SIGCONT), 0);
        SetHealth(victim, Health::kUp);
        ++pauses;
        break;
      }
    }
  }
  stop.store(true);
  writer.join();
  router.join();
  invalidator.join();
  const auto healed_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(JournalHeadsConverge({0, 1, 2}, seconds(60)));
  const double convergence_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - healed_at).count();

  std::lock_guard lock(acked_mu);
  // Directives run to their end (certified or failed) on every replica.
  int certified = 0;
  std::map<std::string, int> failures;  // by reason
  for (const std::string& id : acked_directives) {
    Json directive = WaitForDirectiveEnd(r(0), id, seconds(60));
    const std::string state = directive.value("state", "");
    if (state == "certified") ++certified;
    if (state == "failed") ++failures[directive.value("failure", "")];
    EXPECT_TRUE(state == "certified" ||
                (state == "failed" && !directive.value("failure", "").empty()))
        << id << ": " << directive.dump();
  }
  ASSERT_TRUE(JournalHeadsConverge({0, 1, 2}, seconds(30)));

  // Every acknowledged write in every journal once, or inside a span that
  // replica adopted (rows it never had; the chain head vouches for them).
  std::array<std::map<std::string, std::vector<uint64_t>>, kReplicas> seqs;  // kind/subject
  std::array<Json, kReplicas> adopted;
  for (int i = 0; i < kReplicas; ++i) {
    for (const Json& row : AllRows(r(i))) {
      seqs[i][row.value("kind", "") + "/" + row.value("subject", "")].push_back(
          row.value("seq", uint64_t{0}));
    }
    Json verified = Get(r(i), "/v1/journal/verify").json();
    EXPECT_EQ(verified.value("ok", false), true) << "r" << i << ": " << verified.dump();
    adopted[i] = verified["adopted"];
  }
  auto adopted_by = [&](int i, uint64_t seq) {
    for (const Json& span : adopted[i]) {
      if (span.value("first_seq", uint64_t{0}) <= seq &&
          seq <= span.value("last_seq", uint64_t{0})) {
        return true;
      }
    }
    return false;
  };
  auto once_everywhere = [&](const std::string& key) {
    std::optional<uint64_t> seq;
    for (int i = 0; i < kReplicas; ++i) {
      auto found = seqs[i].find(key);
      if (found == seqs[i].end()) continue;
      EXPECT_EQ(found->second.size(), 1u) << key << " on r" << i;
      if (!seq) seq = found->second.front();
      EXPECT_EQ(found->second.front(), *seq) << key << " on r" << i;
    }
    ASSERT_TRUE(seq.has_value()) << key << " is in no journal";
    for (int i = 0; i < kReplicas; ++i) {
      if (!seqs[i].contains(key)) {
        EXPECT_TRUE(adopted_by(i, *seq)) << key << " missing on r" << i;
      }
    }
  };
  for (const std::string& id : acked_quarantines) once_everywhere("quarantine/" + id);
  for (const std::string& id : acked_lifts) once_everywhere("quarantine.lift/" + id);
  for (const std::string& id : acked_directives) once_everywhere("invalidation.planned/" + id);
  for (const std::string& id : acked_leases) {
    // Created once, ended at most once: its rows are its transitions.
    for (int i = 0; i < kReplicas; ++i) {
      auto found = seqs[i].find("lease.transition/" + id);
      if (found != seqs[i].end()) {
        EXPECT_LE(found->second.size(), 2u) << id << " on r" << i;
      }
    }
  }
  for (int i = 0; i < kReplicas; ++i) {
    for (const auto& [key, at] : seqs[i]) {
      if (key.starts_with("invalidation.certified/")) {
        EXPECT_EQ(at.size(), 1u) << key;
      }
    }
  }

  // The owner: once per directive, at most once more per takeover or
  // restart of the replica that drove it.
  int takeovers = 0;
  for (int i = 0; i < kReplicas; ++i) {
    const std::string output = earlier_output[i] + r(i).Stderr();
    for (size_t at = output.find("event=directive.taken_over"); at != std::string::npos;
         at = output.find("event=directive.taken_over", at + 1)) {
      ++takeovers;
    }
    EXPECT_EQ(output.find("was taken by another kvgov"), std::string::npos) << output;
  }
  EXPECT_LE(control_.calls(), static_cast<int>(acked_directives.size()) + takeovers + kills);

  // Redis: the stream trimmed below what every replica applied, and every
  // replica holding its own live id claim.
  replication::RedisConnection redis(Endpoint(), milliseconds(2000));
  Result<replication::RedisReply> length = redis.Command({"XLEN", "kvgov:governance"});
  ASSERT_TRUE(length.ok()) << length.status().ToString();
  Result<replication::RedisReply> mark = redis.Command({"GET", "kvgov:governance:trimmed"});
  ASSERT_TRUE(mark.ok());
  EXPECT_EQ(mark->type, replication::RedisReply::Type::kString) << "the stream was never trimmed";
  const uint64_t head =
      Get(r(0), "/v1/journal?since=1&limit=1").json().value("head_seq", uint64_t{0});
  EXPECT_LT(static_cast<uint64_t>(length->integer), std::max<uint64_t>(head / 2, 200))
      << "stream of " << length->integer << " entries for " << head << " rows";
  for (int i = 0; i < kReplicas; ++i) {
    Result<replication::RedisReply> ttl =
        redis.Command({"PTTL", "kvgov:claim:replica/r" + std::to_string(i)});
    ASSERT_TRUE(ttl.ok());
    EXPECT_GT(ttl->integer, 0) << "r" << i << " holds no live id claim";
    EXPECT_EQ(::kill(r(i).pid(), 0), 0) << "r" << i << " is not running";
  }
  Result<replication::RedisReply> memory = redis.Command({"MEMORY", "USAGE", "kvgov:governance"});
  int64_t installs = 0;
  for (int i = 0; i < kReplicas; ++i) {
    const std::string metrics = Get(r(i), "/metrics").body;
    const std::string name = "\nkvgov_replica_snapshot_installs_total ";
    const size_t at = metrics.find(name);
    if (at != std::string::npos) installs += std::stoll(metrics.substr(at + name.size()));
  }
  std::printf(
      "chaos soak (seed %llu, %lld s): %zu quarantines, %zu lifts, %zu leases and %zu "
      "invalidations acknowledged (%llu write attempts); %llu routes answered, %llu not; "
      "faults: %d kill -9 (%d past the retained history), %d Redis restarts, %d pauses past "
      "the claim ttl; %d snapshot installs, %d directive takeovers, %d owner calls for %zu "
      "directives (%d certified); converged %.2f s after the last fault; stream %lld entries "
      "(%lld bytes) for %llu journal rows\n",
      static_cast<unsigned long long>(seed), static_cast<long long>(run_seconds),
      acked_quarantines.size(), acked_lifts.size(), acked_leases.size(), acked_directives.size(),
      static_cast<unsigned long long>(write_attempts.load()),
      static_cast<unsigned long long>(routes_ok.load()),
      static_cast<unsigned long long>(routes_failed.load()), kills, long_kills, redis_restarts,
      pauses, static_cast<int>(installs), takeovers, control_.calls(), acked_directives.size(),
      certified, convergence_s, static_cast<long long>(length->integer),
      static_cast<long long>(memory.ok() ? memory->integer : -1),
      static_cast<unsigned long long>(head));
  for (const auto& [reason, count] : failures) {
    std::printf("  %d directives failed: %s\n", count, reason.c_str());
  }
  EXPECT_GT(acked_quarantines.size(), 0u);
  EXPECT_GT(kills + redis_restarts + pauses, 0);
}

}  // namespace
}  // namespace kvgov::testing
