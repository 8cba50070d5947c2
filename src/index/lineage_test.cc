// ResidencyIndex's salt lineage per engine ref and the Residue query: which
// blocks of a tenant's (old) cache salts each worker still holds, and which
// it holds with no known lineage.

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/index/residency_index.h"

namespace kvgov::index {
namespace {

constexpr int64_t kBlockSize = 4;
constexpr size_t kHbm = 0;  // kIndexedTiers' slots
constexpr size_t kDram = 1;
using TierCounts = std::array<uint64_t, kIndexedTiers.size()>;

// Distinct tokens for every event a test makes, so that no two chains
// share keys by accident.
std::vector<int64_t> FreshTokens(size_t blocks) {
  static int64_t next = 1000;
  std::vector<int64_t> tokens(blocks * kBlockSize);
  std::iota(tokens.begin(), tokens.end(), next);
  next += static_cast<int64_t>(tokens.size());
  return tokens;
}

// A chain root whose first block carries `first_extra_key` ("" for none).
BlockStored Root(std::vector<EngineHash> hashes, std::string first_extra_key,
                 std::string medium = "GPU", std::string lora = "") {
  BlockStored stored;
  stored.token_ids = FreshTokens(hashes.size());
  stored.block_size = kBlockSize;
  stored.medium = std::move(medium);
  stored.lora_name = std::move(lora);
  if (!first_extra_key.empty()) {
    stored.extra_keys.assign(hashes.size(), "");
    stored.extra_keys[0] = std::move(first_extra_key);
  }
  stored.block_hashes = std::move(hashes);
  return stored;
}

BlockStored SaltedRoot(std::vector<EngineHash> hashes, std::string_view salt,
                       std::string medium = "GPU") {
  return Root(std::move(hashes), FirstBlockExtraKey("", salt), std::move(medium));
}

BlockStored Child(std::vector<EngineHash> hashes, EngineHash parent, std::string medium = "GPU") {
  BlockStored stored;
  stored.token_ids = FreshTokens(hashes.size());
  stored.block_size = kBlockSize;
  stored.medium = std::move(medium);
  stored.parent_block_hash = parent;
  stored.block_hashes = std::move(hashes);
  return stored;
}

// Blocks [first, first + count) of `chain` (an event), stored in `medium`:
// the same keys in another tier (an offload), under the same parent.
BlockStored Part(const BlockStored& chain, size_t first, size_t count, std::string medium) {
  auto slice = [](const auto& all, size_t from, size_t n) {
    const auto part = std::span(all).subspan(from, n);
    return std::vector(part.begin(), part.end());
  };
  BlockStored part = chain;
  part.medium = std::move(medium);
  if (first > 0) part.parent_block_hash = chain.block_hashes[first - 1];
  part.block_hashes = slice(chain.block_hashes, first, count);
  const auto block_size = static_cast<size_t>(kBlockSize);
  part.token_ids = slice(chain.token_ids, first * block_size, count * block_size);
  if (!chain.extra_keys.empty()) part.extra_keys = slice(chain.extra_keys, first, count);
  return part;
}

BlockRemoved Removed(std::vector<EngineHash> hashes, std::string medium = "GPU") {
  return BlockRemoved{std::move(hashes), std::move(medium), 0};
}

// Accepts the lineages of roots salted with any of `salts` (no LoRA).
std::function<bool(std::string_view)> SaltedWith(std::set<std::string> salts) {
  std::set<std::string> keys;
  for (const std::string& salt : salts) keys.insert(FirstBlockExtraKey("", salt));
  return [keys](std::string_view root) { return keys.count(std::string(root)) > 0; };
}

// Residue as worker -> entry, after checking the entries come sorted by id.
std::map<std::string, LineageResidue> ResidueByWorker(
    const ResidencyIndex& index, const std::function<bool(std::string_view)>& matches,
    bool by_tier = false) {
  std::vector<LineageResidue> residue = index.Residue(matches, by_tier);
  std::map<std::string, LineageResidue> by_worker;
  for (size_t i = 0; i < residue.size(); ++i) {
    if (i > 0) {
      EXPECT_LT(residue[i - 1].worker, residue[i].worker);
    }
    by_worker[residue[i].worker] = residue[i];
  }
  return by_worker;
}

void Apply(ResidencyIndex& index, std::string_view worker, const EngineEvent& event) {
  Result<ApplyResult> result = index.Apply(worker, event);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
}

class LineageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(index_.AddWorker("w1", "llama", kBlockSize).ok());
    ASSERT_TRUE(index_.AddWorker("w2", "llama", kBlockSize).ok());
  }
  // w1's entry, or none.
  std::optional<LineageResidue> W1(const std::function<bool(std::string_view)>& matches,
                                   bool by_tier = false) const {
    std::map<std::string, LineageResidue> residue = ResidueByWorker(index_, matches, by_tier);
    const auto it = residue.find("w1");
    if (it == residue.end()) return std::nullopt;
    EXPECT_EQ(it->second.model, "llama");
    return it->second;
  }
  ResidencyIndex index_;
};

TEST_F(LineageTest, SaltedRootIsAttributedAndMatchesIsAskedOncePerLineage) {
  Apply(index_, "w1", SaltedRoot({1, 2, 3}, "salt-a"));
  Apply(index_, "w1", SaltedRoot({4, 5}, "salt-b"));
  Apply(index_, "w2", Root({7, 8}, ""));  // unsalted

  std::vector<std::string> asked;
  std::vector<LineageResidue> residue = index_.Residue(
      [&](std::string_view root) {
        asked.emplace_back(root);
        return root == FirstBlockExtraKey("", "salt-a");
      },
      false);
  ASSERT_EQ(residue.size(), 1u);
  EXPECT_EQ(residue[0].worker, "w1");
  EXPECT_EQ(residue[0].matched_refs, 3u);
  EXPECT_EQ(residue[0].unattributed_refs, 0u);
  // Once per lineage w1 holds, never per block; w2's unsalted chain is no
  // lineage at all.
  EXPECT_EQ(std::multiset<std::string>(asked.begin(), asked.end()),
            (std::multiset<std::string>{FirstBlockExtraKey("", "salt-a"),
                                        FirstBlockExtraKey("", "salt-b")}));

  EXPECT_TRUE(index_.Residue(SaltedWith({"salt-c"}), false).empty());
  EXPECT_TRUE(index_.Residue([](std::string_view) { return true; }, true).size() == 1);
}

TEST_F(LineageTest, ChildrenInheritThroughAParentInAnEarlierEvent) {
  Apply(index_, "w1", SaltedRoot({1}, "salt-a"));
  Apply(index_, "w1", Child({2, 3}, 1));
  Apply(index_, "w1", Child({4}, 3));
  // An orphan (its parent never stored) is not indexed and has no lineage.
  Apply(index_, "w1", Child({9}, 999));

  std::optional<LineageResidue> w1 = W1(SaltedWith({"salt-a"}));
  ASSERT_TRUE(w1.has_value());
  EXPECT_EQ(w1->matched_refs, 4u);
  EXPECT_EQ(w1->unattributed_refs, 0u);
}

TEST_F(LineageTest, TwoTenantsSaltsAreKeptApart) {
  Apply(index_, "w1", SaltedRoot({1, 2}, "salt-a"));
  Apply(index_, "w1", SaltedRoot({10, 11, 12}, "salt-b"));
  Apply(index_, "w1", Child({3}, 2));
  Apply(index_, "w1", Child({13}, 12));
  Apply(index_, "w1", Root({20, 21}, ""));
  Apply(index_, "w1", Child({22}, 21));

  EXPECT_EQ(W1(SaltedWith({"salt-a"}))->matched_refs, 3u);
  EXPECT_EQ(W1(SaltedWith({"salt-b"}))->matched_refs, 4u);
  EXPECT_EQ(W1(SaltedWith({"salt-a", "salt-b"}))->matched_refs, 7u);
  EXPECT_FALSE(W1(SaltedWith({"salt-c"})).has_value());
}

TEST_F(LineageTest, LoraOnlyRootIsUnsaltedAndLoraWithSaltIsALineage) {
  Apply(index_, "w1", Root({1, 2}, FirstBlockExtraKey("lora-x", ""), "GPU", "lora-x"));
  Apply(index_, "w1", Child({3}, 2));
  Apply(index_, "w1", Root({4}, ""));
  EXPECT_TRUE(index_.Residue([](std::string_view) { return true; }, false).empty());

  const std::string lora_salted = FirstBlockExtraKey("lora-x", "salt-a");
  ASSERT_EQ(lora_salted, R"(["lora-x","salt-a"])");
  Apply(index_, "w1", Root({5, 6}, lora_salted, "GPU", "lora-x"));
  std::optional<LineageResidue> w1 = W1([&](std::string_view root) { return root == lora_salted; });
  ASSERT_TRUE(w1.has_value());
  EXPECT_EQ(w1->matched_refs, 2u);
}

TEST_F(LineageTest, RemovalCountsOnlyWhenTheRefLeavesEveryTier) {
  const BlockStored chain = SaltedRoot({1, 2}, "salt-a", "GPU");
  Apply(index_, "w1", chain);
  // Offloaded: the same blocks stored again in host memory.
  Apply(index_, "w1", Part(chain, 0, 2, "CPU"));
  EXPECT_EQ(W1(SaltedWith({"salt-a"}))->matched_refs, 2u);

  Apply(index_, "w1", Removed({1}, "GPU"));  // still in host memory
  EXPECT_EQ(W1(SaltedWith({"salt-a"}))->matched_refs, 2u);
  Apply(index_, "w1", Removed({1}, "CPU"));
  EXPECT_EQ(W1(SaltedWith({"salt-a"}))->matched_refs, 1u);
  Apply(index_, "w1", Removed({2}, "CPU"));
  Apply(index_, "w1", Removed({2}, "GPU"));
  EXPECT_FALSE(W1(SaltedWith({"salt-a"})).has_value());
  // Removing what is gone changes nothing.
  Apply(index_, "w1", Removed({1, 2}, "GPU"));
  EXPECT_TRUE(index_.Residue([](std::string_view) { return true; }, true).empty());
}

TEST_F(LineageTest, ClearAndAllBlocksClearedForgetEveryLineage) {
  Apply(index_, "w1", SaltedRoot({1, 2}, "salt-a"));
  Apply(index_, "w2", SaltedRoot({1, 2}, "salt-a"));
  ASSERT_TRUE(index_.ClearWorker("w1").ok());
  Apply(index_, "w2", AllBlocksCleared{});
  EXPECT_TRUE(index_.Residue([](std::string_view) { return true; }, true).empty());

  // The same hashes stored unsalted after the clear are unsalted.
  Apply(index_, "w1", Root({1, 2}, ""));
  Apply(index_, "w1", Child({3}, 2));
  EXPECT_TRUE(index_.Residue([](std::string_view) { return true; }, false).empty());

  Apply(index_, "w1", SaltedRoot({5}, "salt-a"));
  ASSERT_TRUE(index_.RemoveWorker("w1").ok());
  EXPECT_TRUE(index_.Residue([](std::string_view) { return true; }, false).empty());
}

TEST_F(LineageTest, RestoredRefsAreUnattributedUntilRemovedOrStoredAgain) {
  Apply(index_, "w1", SaltedRoot({1, 2}, "salt-a"));
  Apply(index_, "w1", Root({5, 6}, ""));
  Result<std::string> snapshot = index_.SnapshotWorker("w1");
  ASSERT_TRUE(snapshot.ok());
  ResidencyIndex restored;
  ASSERT_TRUE(restored.AddWorker("w1", "llama", kBlockSize).ok());
  ASSERT_TRUE(restored.RestoreWorker("w1", *snapshot).ok());

  auto w1 = [&](const std::function<bool(std::string_view)>& matches) {
    std::map<std::string, LineageResidue> residue = ResidueByWorker(restored, matches);
    return residue.count("w1") ? residue["w1"] : LineageResidue{};
  };
  // Whatever is asked: the salt did not survive the snapshot.
  EXPECT_EQ(w1(SaltedWith({"salt-a"})).matched_refs, 0u);
  EXPECT_EQ(w1(SaltedWith({"salt-a"})).unattributed_refs, 4u);
  EXPECT_EQ(w1(SaltedWith({"salt-zz"})).unattributed_refs, 4u);

  Apply(restored, "w1", Removed({1}));
  EXPECT_EQ(w1(SaltedWith({})).unattributed_refs, 3u);
  // Stored again under a root: known from here on.
  Apply(restored, "w1", Root({5, 6}, ""));
  EXPECT_EQ(w1(SaltedWith({})).unattributed_refs, 1u);
  // A new chain stored meanwhile is not restored residue...
  Apply(restored, "w1", Root({30}, ""));
  Apply(restored, "w1", SaltedRoot({31}, "salt-a"));
  EXPECT_EQ(w1(SaltedWith({"salt-a"})).matched_refs, 1u);
  EXPECT_EQ(w1(SaltedWith({"salt-a"})).unattributed_refs, 1u);
  // ... and the last restored ref drains.
  Apply(restored, "w1", Removed({2}));
  EXPECT_EQ(w1(SaltedWith({})).unattributed_refs, 0u);
  EXPECT_TRUE(restored.Residue(SaltedWith({"salt-b"}), false).empty());
  // Children of the chains stored during the restored phase keep their
  // lineage once it is over.
  Apply(restored, "w1", Child({32}, 31));
  Apply(restored, "w1", Child({33}, 30));
  EXPECT_EQ(w1(SaltedWith({"salt-a"})).matched_refs, 2u);
  EXPECT_EQ(w1(SaltedWith({"salt-a"})).unattributed_refs, 0u);
}

TEST_F(LineageTest, RestoreOverALiveWorkerForgetsItsLineage) {
  Apply(index_, "w1", SaltedRoot({1, 2, 3}, "salt-a"));
  Result<std::string> snapshot = index_.SnapshotWorker("w1");
  ASSERT_TRUE(snapshot.ok());
  ASSERT_TRUE(index_.RestoreWorker("w1", *snapshot).ok());
  std::optional<LineageResidue> w1 = W1(SaltedWith({"salt-a"}));
  ASSERT_TRUE(w1.has_value());
  EXPECT_EQ(w1->matched_refs, 0u);
  EXPECT_EQ(w1->unattributed_refs, 3u);
}

TEST_F(LineageTest, AChildOfARestoredParentIsUnattributed) {
  Apply(index_, "w1", Root({1, 2}, ""));
  Result<std::string> snapshot = index_.SnapshotWorker("w1");
  ASSERT_TRUE(snapshot.ok());
  ASSERT_TRUE(index_.RestoreWorker("w1", *snapshot).ok());

  Apply(index_, "w1", Child({3}, 2));
  EXPECT_EQ(W1(SaltedWith({}))->unattributed_refs, 3u);  // 2 restored, 1 child
  Apply(index_, "w1", Removed({1, 2}));
  // The restored refs drained; their child's lineage is still unknown, and
  // so is its own child's.
  EXPECT_EQ(W1(SaltedWith({}))->unattributed_refs, 1u);
  Apply(index_, "w1", Child({4}, 3));
  EXPECT_EQ(W1(SaltedWith({}))->unattributed_refs, 2u);
  EXPECT_EQ(W1(SaltedWith({}))->matched_refs, 0u);
}

TEST_F(LineageTest, AHashStoredAgainUnderAnotherRootMoves) {
  Apply(index_, "w1", SaltedRoot({1, 2}, "salt-a"));
  Apply(index_, "w1", SaltedRoot({1, 2}, "salt-b"));
  EXPECT_FALSE(W1(SaltedWith({"salt-a"})).has_value());
  EXPECT_EQ(W1(SaltedWith({"salt-b"}))->matched_refs, 2u);

  Apply(index_, "w1", Root({1}, ""));
  EXPECT_EQ(W1(SaltedWith({"salt-b"}))->matched_refs, 1u);
  Apply(index_, "w1", Child({3}, 1));  // under the now unsalted hash
  Apply(index_, "w1", Child({4}, 2));  // under the still salted one
  EXPECT_EQ(W1(SaltedWith({"salt-b"}))->matched_refs, 2u);
  EXPECT_EQ(W1(SaltedWith({"salt-a", "salt-b"}))->unattributed_refs, 0u);
}

TEST_F(LineageTest, LineagesPastTheCapAreUnattributedAndFreedPlacesAreReused) {
  for (EngineHash i = 0; i < ResidencyIndex::kMaxLineages; ++i) {
    Apply(index_, "w1", SaltedRoot({i + 1}, "salt-" + std::to_string(i)));
  }
  Apply(index_, "w1", SaltedRoot({50000, 50001}, "overflow"));
  Apply(index_, "w1", Child({50002}, 50001));

  size_t asked = 0;
  bool overflow_asked = false;
  std::optional<LineageResidue> all = W1([&](std::string_view root) {
    ++asked;
    overflow_asked |= root == FirstBlockExtraKey("", "overflow");
    return true;
  });
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(asked, ResidencyIndex::kMaxLineages);
  EXPECT_FALSE(overflow_asked);
  EXPECT_EQ(all->matched_refs, ResidencyIndex::kMaxLineages);
  EXPECT_EQ(all->unattributed_refs, 3u);
  EXPECT_EQ(W1(SaltedWith({"salt-0"}))->matched_refs, 1u);

  // A lineage no ref holds any more gives its place to a new one.
  Apply(index_, "w1", Removed({1}));
  Apply(index_, "w1", SaltedRoot({60000}, "late"));
  EXPECT_EQ(W1(SaltedWith({"late"}))->matched_refs, 1u);
  EXPECT_FALSE(W1(SaltedWith({"salt-0"}))->matched_refs > 0);
  EXPECT_EQ(W1(SaltedWith({"late"}))->unattributed_refs, 3u);
}

TEST_F(LineageTest, ByTierCountsEachMatchedRefInItsBestTier) {
  const BlockStored chain = SaltedRoot({1, 2, 3}, "salt-a", "GPU");
  const BlockStored unsalted = Root({8, 9}, "", "GPU");
  Apply(index_, "w1", chain);
  Apply(index_, "w1", unsalted);
  // One engine, one tier: counted without a walk.
  std::optional<LineageResidue> uniform = W1(SaltedWith({"salt-a"}), true);
  ASSERT_TRUE(uniform.has_value());
  EXPECT_EQ(uniform->matched_by_tier[kHbm], 3u);

  // 1: hbm and dram (best hbm); 2: hbm; 3: dram only.
  Apply(index_, "w1", Part(chain, 0, 1, "CPU"));
  Apply(index_, "w1", Part(chain, 2, 1, "CPU"));
  Apply(index_, "w1", Removed({3}, "GPU"));
  Apply(index_, "w1", Part(unsalted, 0, 2, "CPU"));  // unsalted: never counted
  ASSERT_EQ(index_.ResidentPairs(), 5u);             // the offloads keyed as the originals

  std::optional<LineageResidue> w1 = W1(SaltedWith({"salt-a"}), true);
  ASSERT_TRUE(w1.has_value());
  EXPECT_EQ(w1->matched_refs, 3u);
  TierCounts expected{};
  expected[kHbm] = 2;
  expected[kDram] = 1;
  EXPECT_EQ(w1->matched_by_tier, expected);
  // Not asked for: left empty.
  EXPECT_EQ(W1(SaltedWith({"salt-a"}), false)->matched_by_tier, TierCounts{});
}

// The same streams on one shard and on three give the same answers, and
// both agree with a model kept beside them: each live engine hash's root
// extra key and media, by the rules (a child inherits, a hash leaves when
// its last medium does, a restored worker knows no lineage).
struct ModelRef {
  std::string root;
  std::set<std::string> media;
  // The block as stored, to store it again in another medium.
  std::optional<EngineHash> parent;
  std::vector<int64_t> tokens;
  std::string extra_key;
};
using Model = std::map<std::string, std::map<EngineHash, ModelRef>>;

std::unique_ptr<ResidencyIndex> ShardedScenario(size_t shards, Model& model) {
  auto index = std::make_unique<ResidencyIndex>(BlockKeyHasher(), shards);
  std::vector<std::string> workers;
  for (int w = 6; w >= 0; --w) workers.push_back("w" + std::to_string(w));  // out of id order
  for (const std::string& worker : workers) {
    EXPECT_TRUE(index->AddWorker(worker, "llama", kBlockSize).ok());
  }
  const std::array<std::string, 4> roots = {"", FirstBlockExtraKey("", "salt-a"),
                                            FirstBlockExtraKey("", "salt-b"),
                                            FirstBlockExtraKey("", "salt-c")};
  const std::array<std::string, 2> media = {"GPU", "CPU"};
  for (size_t w = 0; w < workers.size(); ++w) {
    std::map<EngineHash, ModelRef>& refs = model[workers[w]];
    std::mt19937_64 rng(77 + w);
    std::vector<EngineHash> seen;
    EngineHash next_hash = 1 + w * 100000;
    for (int step = 0; step < 400; ++step) {
      const uint64_t what = rng() % 10;
      const std::string& medium = media[rng() % 2];
      if (what < 3 || seen.empty()) {
        std::vector<EngineHash> hashes(1 + rng() % 4);
        for (EngineHash& hash : hashes) hash = next_hash++;
        const std::string& root = roots[rng() % roots.size()];
        const BlockStored stored = Root(hashes, root, medium);
        EXPECT_TRUE(index->Apply(workers[w], stored).ok());
        for (size_t b = 0; b < hashes.size(); ++b) {
          const BlockStored block = Part(stored, b, 1, medium);
          refs[hashes[b]] = {root,
                             {medium},
                             block.parent_block_hash,
                             block.token_ids,
                             block.extra_keys.empty() ? "" : block.extra_keys[0]};
        }
        seen.insert(seen.end(), hashes.begin(), hashes.end());
      } else if (what < 6) {
        std::vector<EngineHash> hashes(1 + rng() % 3);
        for (EngineHash& hash : hashes) hash = next_hash++;
        const EngineHash parent = seen[rng() % seen.size()];
        const BlockStored stored = Child(hashes, parent, medium);
        EXPECT_TRUE(index->Apply(workers[w], stored).ok());
        if (const auto it = refs.find(parent); it != refs.end()) {  // else an orphan
          const std::string root = it->second.root;
          for (size_t b = 0; b < hashes.size(); ++b) {
            const BlockStored block = Part(stored, b, 1, medium);
            refs[hashes[b]] = {root, {medium}, block.parent_block_hash, block.token_ids, ""};
          }
        }
        seen.insert(seen.end(), hashes.begin(), hashes.end());
      } else if (what < 7) {
        // Offloaded or loaded back: a live block stored again in a medium,
        // under its parent, with its tokens: the same key.
        const auto it = refs.find(seen[rng() % seen.size()]);
        if (it == refs.end()) continue;
        const ModelRef& ref = it->second;
        BlockStored again = Child({it->first}, 0, medium);
        again.parent_block_hash = ref.parent;
        again.token_ids = ref.tokens;
        if (!ref.extra_key.empty()) again.extra_keys = {ref.extra_key};
        EXPECT_TRUE(index->Apply(workers[w], again).ok());
        // Under a parent since removed, an orphan: not stored.
        if (!ref.parent.has_value() || refs.count(*ref.parent) > 0) {
          it->second.media.insert(medium);
        }
      } else {
        const EngineHash hash = seen[rng() % seen.size()];
        EXPECT_TRUE(index->Apply(workers[w], Removed({hash}, medium)).ok());
        if (const auto it = refs.find(hash); it != refs.end()) {
          it->second.media.erase(medium);
          if (it->second.media.empty()) refs.erase(it);
        }
      }
    }
  }
  // One worker restored from its own snapshot: all its refs unattributed.
  Result<std::string> snapshot = index->SnapshotWorker("w3");
  EXPECT_TRUE(snapshot.ok());
  EXPECT_TRUE(index->RestoreWorker("w3", *snapshot).ok());
  return index;
}

TEST(LineageShardTest, ShardCountChangesNoAnswerAndAnswersFollowTheRules) {
  Model model;
  const std::unique_ptr<ResidencyIndex> one = ShardedScenario(1, model);
  Model same;
  const std::unique_ptr<ResidencyIndex> three = ShardedScenario(3, same);
  const std::vector<std::set<std::string>> queries = {{"salt-a"}, {"salt-b", "salt-c"}, {}};
  for (const std::set<std::string>& salts : queries) {
    const std::function<bool(std::string_view)> matches = SaltedWith(salts);
    // What the model says, worker by worker.
    std::map<std::string, LineageResidue> expected;
    for (const auto& [worker, refs] : model) {
      LineageResidue residue;
      residue.worker = worker;
      residue.model = "llama";
      for (const auto& [hash, ref] : refs) {
        if (worker == "w3") {
          ++residue.unattributed_refs;
        } else if (!ref.root.empty() && matches(ref.root)) {
          ++residue.matched_refs;
          ++residue.matched_by_tier[ref.media.count("GPU") ? kHbm : kDram];
        }
      }
      if (residue.matched_refs > 0 || residue.unattributed_refs > 0) expected[worker] = residue;
    }
    if (!salts.empty()) {
      EXPECT_GE(expected.size(), 5u);  // the scenario leaves matches on most workers
    }
    for (bool by_tier : {false, true}) {
      for (const ResidencyIndex* index : {one.get(), three.get()}) {
        SCOPED_TRACE(testing::Message() << "shards " << index->shards() << " by_tier " << by_tier);
        const std::map<std::string, LineageResidue> got = ResidueByWorker(*index, matches, by_tier);
        ASSERT_EQ(got.size(), expected.size());
        for (const auto& [worker, want] : expected) {
          ASSERT_EQ(got.count(worker), 1u) << worker;
          const LineageResidue& residue = got.at(worker);
          EXPECT_EQ(residue.model, "llama");
          EXPECT_EQ(residue.matched_refs, want.matched_refs) << worker;
          EXPECT_EQ(residue.unattributed_refs, want.unattributed_refs) << worker;
          EXPECT_EQ(residue.matched_by_tier, by_tier ? want.matched_by_tier : TierCounts{})
              << worker;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvgov::index
