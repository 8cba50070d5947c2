#include "kvgov/index/block_key.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <set>

#include "index/block_key_reference.h"

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

// The format's test vectors (docs/formats/block-keys.md): keys are stored
// in data dirs and snapshots, so a faster hasher must give exactly these.
TEST(BlockKeyTest, KeysAreTheFormatsTestVectors) {
  BlockKeyHasher hasher;
  const std::vector<int64_t> tokens = Tokens(8);
  EXPECT_EQ(RequestChain(hasher, {"llama", "", 0}, "", tokens, 4),
            (std::vector<BlockKey>{0xd485ae143b4a751c, 0x165e45a35c9dd23b}));
  EXPECT_EQ(RequestChain(hasher, {"llama", "adapter", 0}, "salt-a", tokens, 4),
            (std::vector<BlockKey>{0xa5091912a71573aa, 0x7c421f196d20caf1}));
  // Past the inline buffer: a long extra key and wide blocks.
  const std::vector<int64_t> wide = Tokens(96);
  const std::string extra(300, 'x');
  const std::vector<BlockKey> keys = hasher.Chain({"llama", "", 0}, wide, 48, {{extra}});
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], hasher.Next(hasher.Root({"llama", "", 0}), std::span(wide).first(48), extra));
  EXPECT_EQ(keys[1], hasher.Next(keys[0], std::span(wide).subspan(48), ""));
}

// The hasher against the format's definition, on random prompts, block
// sizes, LoRA names and salts (long ones too, past the inline buffer), and
// tokens over the whole 64-bit range.
TEST(BlockKeyTest, KeysMatchTheDefinitionOnRandomChains) {
  BlockKeyHasher hasher;
  std::mt19937_64 random(20261201);
  for (int round = 0; round < 2000; ++round) {
    std::vector<int64_t> tokens(random() % 300);
    for (int64_t& token : tokens) {
      token = random() % 4 == 0 ? static_cast<int64_t>(random())
                                : static_cast<int64_t>(random() % 150000);
    }
    const int64_t block_size = 1 + static_cast<int64_t>(random() % 40);
    const ChainNamespace ns{"m" + std::to_string(random() % 3),
                            random() % 3 == 0 ? "lora-" + std::to_string(random() % 9) : "",
                            static_cast<int64_t>(random() % 3)};
    const std::string salt = random() % 2 == 0 ? std::string(random() % 300, 's') : "";
    ASSERT_EQ(RequestChain(hasher, ns, salt, tokens, block_size),
              reference::RequestChain(hasher.seed(), ns, salt, tokens, block_size))
        << "round " << round;
  }
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
