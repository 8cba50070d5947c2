// The engines' 2026 wire through the real binary and real ZeroMQ: every
// medium string to its tier (vLLM's storage tiers with locality, SGLang's
// HiCache media), in both encodings; and SGLang's reported cache_salt keying
// a tenant's blocks exactly as kvgov's own salted routes do.

#include <httplib.h>

#include <gtest/gtest.h>

#include <msgpack.hpp>
#include <nlohmann/json.hpp>
#include <optional>

#include "e2e/one_engine_test.h"
#include "e2e/tokens.h"
#include "e2e/wait.h"

namespace kvgov::testing {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;

constexpr int64_t kBlockSize = OneEngineTest::kBlockSize;

// One BlockStored of one block as the engines put it on the wire.
struct Store {
  uint64_t hash;
  int64_t first_token;
  std::string medium;
  std::string locality;    // vLLM 0.26+; "" = absent
  std::string cache_salt;  // SGLang; "" = absent
};

// [ts, [event], 0] with a positional event in vLLM's field order (locality
// at position 11 after the tag) or SGLang's #30827 form (a {"cache_salt"}
// map where vLLM has lora_name).
std::string PositionalBatch(const Store& s, double ts) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(3);
  pk.pack(ts);
  pk.pack_array(1);
  const bool sglang_salt = !s.cache_salt.empty();
  pk.pack_array(s.locality.empty() ? 8 : 13);
  pk.pack(std::string("BlockStored"));
  pk.pack(std::vector<uint64_t>{s.hash});
  pk.pack_nil();
  pk.pack(Tokens(kBlockSize, s.first_token));
  pk.pack(kBlockSize);
  pk.pack_nil();  // lora_id
  pk.pack(s.medium);
  if (sglang_salt) {
    pk.pack_map(1);
    pk.pack(std::string("cache_salt"));
    pk.pack(s.cache_salt);
  } else if (!s.locality.empty()) {
    pk.pack_nil();  // lora_name
    pk.pack_nil();  // extra_keys
    pk.pack(0);     // group_idx
    pk.pack(std::string("full_attention"));
    pk.pack_nil();  // kv_cache_spec_sliding_window
    pk.pack(s.locality);
  } else {
    pk.pack_nil();  // lora_name
  }
  pk.pack(0);
  return std::string(buffer.data(), buffer.size());
}

// The same with a map event (vLLM #42892, SGLang #37482).
std::string MapBatch(const Store& s, double ts) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(3);
  pk.pack(ts);
  pk.pack_array(1);
  pk.pack_map(6 + (s.locality.empty() ? 0 : 1) + (s.cache_salt.empty() ? 0 : 2));
  pk.pack(std::string("type"));
  pk.pack(std::string("BlockStored"));
  pk.pack(std::string("block_hashes"));
  pk.pack(std::vector<uint64_t>{s.hash});
  pk.pack(std::string("parent_block_hash"));
  pk.pack_nil();
  pk.pack(std::string("token_ids"));
  pk.pack(Tokens(kBlockSize, s.first_token));
  pk.pack(std::string("block_size"));
  pk.pack(kBlockSize);
  pk.pack(std::string("medium"));
  pk.pack(s.medium);
  if (!s.locality.empty()) {
    pk.pack(std::string("locality"));
    pk.pack(s.locality);
  }
  if (!s.cache_salt.empty()) {
    pk.pack(std::string("cache_salt"));
    pk.pack(s.cache_salt);
    pk.pack(std::string("session_id"));
    pk.pack(std::string("sess-1"));
  }
  pk.pack(0);
  return std::string(buffer.data(), buffer.size());
}

class EngineWireE2ETest : public OneEngineTest {
 protected:
  void SetUp() override {
    StartKvgov({}, "sglang");
    ASSERT_TRUE(publisher_.WaitForSubscriber(milliseconds(20000))) << daemon_.Stderr();
  }

  void Publish(const std::string& payload) {
    publisher_.PublishPayload(payload);
    ++published_;
  }
  bool Applied() { return Worker()["last_seq"] == published_ - 1; }
  Json Route(const std::vector<int64_t>& tokens, const std::string& tenant) {
    Json body = {{"model", "llama"}, {"token_ids", tokens}};
    if (!tenant.empty()) body["tenant"] = tenant;
    httplib::Result response = client_->Post("/v1/route", body.dump(), "application/json");
    EXPECT_TRUE(response && response->status == 200) << (response ? response->body : "");
    return Json::parse(response->body);
  }

  int64_t published_ = 0;
};

TEST_F(EngineWireE2ETest, EveryMediumTheEnginesSendLandsInItsTier) {
  const std::vector<std::pair<Store, std::string>> cases = {
      {{1, 100, "GPU", "", ""}, "hbm"},           {{2, 200, "CPU", "", ""}, "dram"},
      {{3, 300, "CPU_PINNED", "", ""}, "dram"},   {{4, 400, "CPU_TIER1", "", ""}, "dram"},
      {{5, 500, "FS", "LOCAL", ""}, "disk"},      {{6, 600, "STORAGE", "", ""}, "disk"},
      {{7, 700, "DISK", "", ""}, "disk"},         {{8, 800, "OBJ", "", ""}, "remote"},
      {{9, 900, "EXTERNAL", "", ""}, "remote"},   {{10, 1000, "GPU", "REMOTE", ""}, "remote"},
      {{11, 1100, "FS", "REMOTE", ""}, "remote"}, {{12, 1200, "NVME9", "", ""}, "unknown"},
  };
  Json want = {{"hbm", 0}, {"dram", 0}, {"disk", 0}, {"remote", 0}, {"unknown", 0}};
  double ts = 1000;
  for (const auto& [store, tier] : cases) {
    // Both encodings of each: the second copy (the same hash and tokens) is
    // a re-store of the same block, so it changes no count; each copy must
    // decode (decode_errors below).
    Publish(PositionalBatch(store, ts++));
    Publish(MapBatch(store, ts++));
    want[tier] = want[tier].get<int>() + 1;
  }
  ASSERT_TRUE(WaitFor([&] { return Applied(); })) << daemon_.Stderr();
  EXPECT_EQ(Worker()["blocks"], want);
  EXPECT_EQ(Worker()["decode_errors"], 0) << daemon_.Stderr();

  // A remote block earns less than a local disk one (0.25 against 0.5).
  const Json on_disk = Route(Tokens(kBlockSize, 700), "")["candidates"][0];
  const Json remote = Route(Tokens(kBlockSize, 800), "")["candidates"][0];
  EXPECT_EQ(on_disk["tier_overlap"]["disk"], 1) << on_disk.dump();
  EXPECT_EQ(remote["tier_overlap"]["remote"], 1) << remote.dump();
  EXPECT_DOUBLE_EQ(on_disk["credited_blocks"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(remote["credited_blocks"].get<double>(), 0.25);
  EXPECT_EQ(daemon_.Stop(), 0) << daemon_.Stderr();
}

// SGLang reports the salt a request carried; its blocks must match the
// routes of the tenant kvgov handed that salt to, and no one else's.
TEST_F(EngineWireE2ETest, SglangReportedSaltsKeyTheTenantsBlocksInBothEncodings) {
  const std::string salt = Route(Tokens(kBlockSize, 1), "acme")["cache_salt"];
  ASSERT_FALSE(salt.empty());
  Publish(MapBatch({21, 5000, "GPU", "", salt}, 1000));         // sglang#37482
  Publish(PositionalBatch({22, 6000, "GPU", "", salt}, 1001));  // sglang#30827
  ASSERT_TRUE(WaitFor([&] { return Applied(); })) << daemon_.Stderr();
  for (int64_t first : {5000, 6000}) {
    SCOPED_TRACE("prompt at " + std::to_string(first));
    EXPECT_EQ(Route(Tokens(kBlockSize, first), "acme")["candidates"][0]["overlap_blocks"], 1);
    EXPECT_EQ(Route(Tokens(kBlockSize, first), "")["candidates"][0]["overlap_blocks"], 0);
    EXPECT_EQ(Route(Tokens(kBlockSize, first), "globex")["candidates"][0]["overlap_blocks"], 0);
  }
  EXPECT_EQ(daemon_.Stop(), 0) << daemon_.Stderr();
}

}  // namespace
}  // namespace kvgov::testing
