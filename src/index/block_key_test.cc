#include "kvgov/index/block_key.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

namespace kvgov::index {
namespace {

std::vector<int64_t> Tokens(size_t n, int64_t start = 1) {
  std::vector<int64_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), start);
  return tokens;
}

TEST(BlockKeyTest, ChainKeysOnlyFullBlocksAndIsDeterministic) {
  BlockKeyHasher hasher;
  ChainNamespace ns{"llama", "", 0};
  std::vector<int64_t> tokens = Tokens(40);
  std::vector<BlockKey> keys = hasher.Chain(ns, tokens, 16);
  ASSERT_EQ(keys.size(), 2u);  // 8 trailing tokens make no block
  EXPECT_EQ(keys, hasher.Chain(ns, tokens, 16));
  EXPECT_EQ(keys[0], hasher.Next(hasher.Root(ns), std::span(tokens).first(16), ""));
  EXPECT_EQ(keys[1], hasher.Next(keys[0], std::span(tokens).subspan(16, 16), ""));
}

TEST(BlockKeyTest, APrefixSharesItsKeys) {
  BlockKeyHasher hasher;
  ChainNamespace ns{"llama", "", 0};
  std::vector<int64_t> longer = Tokens(64);
  std::vector<int64_t> shorter = Tokens(32);
  std::vector<BlockKey> a = hasher.Chain(ns, longer, 16);
  std::vector<BlockKey> b = hasher.Chain(ns, shorter, 16);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin()));
}

TEST(BlockKeyTest, NamespaceSeedAndParentKeepChainsApart) {
  std::vector<int64_t> tokens = Tokens(16);
  std::set<BlockKey> keys = {
      BlockKeyHasher().Chain({"llama", "", 0}, tokens, 16)[0],
      BlockKeyHasher().Chain({"qwen", "", 0}, tokens, 16)[0],
      BlockKeyHasher().Chain({"llama", "adapter", 0}, tokens, 16)[0],
      BlockKeyHasher().Chain({"llama", "", 1}, tokens, 16)[0],
      BlockKeyHasher(7).Chain({"llama", "", 0}, tokens, 16)[0],
  };
  EXPECT_EQ(keys.size(), 5u);
  // Framing: model "ab" + lora "c" is not model "a" + lora "bc".
  EXPECT_NE(BlockKeyHasher().Root({"ab", "c", 0}), BlockKeyHasher().Root({"a", "bc", 0}));
}

TEST(BlockKeyTest, TwoTenantsSaltsNeverShareAKey) {
  BlockKeyHasher hasher;
  ChainNamespace ns{"llama", "", 0};
  std::vector<int64_t> prompt = Tokens(64);
  std::vector<std::string> tenant_a = {FirstBlockExtraKey("", "salt-a")};
  std::vector<std::string> tenant_b = {FirstBlockExtraKey("", "salt-b")};
  std::vector<BlockKey> a = hasher.Chain(ns, prompt, 16, tenant_a);
  std::vector<BlockKey> b = hasher.Chain(ns, prompt, 16, tenant_b);
  std::vector<BlockKey> unsalted = hasher.Chain(ns, prompt, 16);
  std::set<BlockKey> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  all.insert(unsalted.begin(), unsalted.end());
  EXPECT_EQ(all.size(), 12u);  // the salt changes block 0, and so every later block
}

TEST(BlockKeyTest, FirstBlockExtraKeyMatchesVllmsCanonicalForm) {
  EXPECT_EQ(FirstBlockExtraKey("", ""), "");
  EXPECT_EQ(FirstBlockExtraKey("", "s1"), R"(["s1"])");
  EXPECT_EQ(FirstBlockExtraKey("lora-a", "s1"), R"(["lora-a","s1"])");
  EXPECT_EQ(FirstBlockExtraKey("lora-a", ""), R"(["lora-a"])");
  EXPECT_EQ(FirstBlockExtraKey("", "a\"b\\c\n"), R"(["a\"b\\c\n"])");
  // The same escapes as the engine-event decoder and certificates (RFC 8785).
  EXPECT_EQ(FirstBlockExtraKey("l\b", "\x01"), R"(["l\b","\u0001"])");
}

}  // namespace
}  // namespace kvgov::index

namespace kvgov::index {
namespace {

TEST(RequestChainTest, MatchesWhatAnEnginePublishes) {
  BlockKeyHasher hasher;
  std::vector<int64_t> tokens(48);
  std::iota(tokens.begin(), tokens.end(), 1);
  // An engine with LoRA "ad" and salt "s": every block carries the LoRA
  // name, the first the salt too.
  std::vector<std::string> published = {R"(["ad","s"])", R"(["ad"])", R"(["ad"])"};
  ChainNamespace ns{"llama", "ad", 0};
  EXPECT_EQ(RequestChain(hasher, ns, "s", tokens, 16), hasher.Chain(ns, tokens, 16, published));
  // Without LoRA or salt there are no extra keys at all.
  ChainNamespace plain{"llama", "", 0};
  EXPECT_EQ(RequestChain(hasher, plain, "", tokens, 16), hasher.Chain(plain, tokens, 16));
  EXPECT_TRUE(RequestChain(hasher, plain, "", tokens, 0).empty());
}

}  // namespace
}  // namespace kvgov::index
