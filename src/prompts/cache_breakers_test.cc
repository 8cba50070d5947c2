#include "kvgov/prompts/cache_breakers.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kvgov::prompts {
namespace {

// `count` distinct tokens from `first`: static content.
std::vector<int64_t> Span(int64_t first, size_t count) {
  std::vector<int64_t> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

std::vector<int64_t> Concat(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> out;
  for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

// A 4,000-token system prompt with a one-token timestamp at token 40.
std::vector<int64_t> TimestampedPrompt(int64_t timestamp) {
  std::vector<int64_t> tokens = Span(1000, 4000);
  tokens[40] = timestamp;
  return tokens;
}

DetectorOptions Options() {
  DetectorOptions options;
  options.key = 0x5eed;
  return options;
}

TEST(CacheBreakerDetectorTest, ATimestampEarlyInALongPromptIsABreaker) {
  CacheBreakerDetector detector(Options());
  const Observation first = detector.Observe("llama", "acme", TimestampedPrompt(7), 1000);
  EXPECT_FALSE(first.finding.has_value());
  EXPECT_NE(first.family, 0u);

  const Observation second = detector.Observe("llama", "acme", TimestampedPrompt(8), 2000);
  ASSERT_TRUE(second.finding.has_value());
  EXPECT_TRUE(second.new_finding);
  EXPECT_EQ(second.family, first.family);
  const Finding& found = *second.finding;
  EXPECT_EQ(found.kind, FindingKind::kBreaker);
  // The truth: token 40, one token long, 3,959 tokens after it the same.
  EXPECT_EQ(found.position_tokens, 32u);  // its granule's first token
  EXPECT_EQ(found.length_tokens, 16u);
  EXPECT_EQ(found.avoidable_tokens, 3952u);
  EXPECT_EQ(found.prompt_tokens, 4000u);
  EXPECT_EQ(found.model, "llama");
  EXPECT_EQ(found.tenant, "acme");

  for (int64_t t = 9; t < 12; ++t) {
    const Observation again = detector.Observe("llama", "acme", TimestampedPrompt(t), 1000 * t);
    ASSERT_TRUE(again.finding.has_value());
    EXPECT_FALSE(again.new_finding);
  }
  const std::vector<Finding> findings = detector.Findings();
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].occurrences, 4u);
  EXPECT_EQ(findings[0].avoidable_tokens_total, 4u * 3952);
  EXPECT_EQ(findings[0].first_seen_ms, 2000);
  EXPECT_EQ(findings[0].last_seen_ms, 11000);
}

// Tokens are kept only where the tenant allows it, and then only the few
// around the span.
TEST(CacheBreakerDetectorTest, ContextTokensAreKeptOnlyWhenAllowed) {
  CacheBreakerDetector detector(Options());
  detector.Observe("llama", "acme", TimestampedPrompt(7), 1);
  const Observation withheld = detector.Observe("llama", "acme", TimestampedPrompt(8), 2);
  ASSERT_TRUE(withheld.finding.has_value());
  EXPECT_TRUE(withheld.finding->context_tokens.empty());

  const Observation allowed =
      detector.Observe("llama", "acme", TimestampedPrompt(9), 3, /*keep_context=*/true);
  ASSERT_TRUE(allowed.finding.has_value());
  // The span's granule (32..48) and 8 tokens either side.
  EXPECT_EQ(allowed.finding->context_offset, 24u);
  ASSERT_EQ(allowed.finding->context_tokens.size(), 32u);
  EXPECT_EQ(allowed.finding->context_tokens[40 - 24], 9);
  EXPECT_EQ(allowed.finding->context_tokens[0], 1024);
  EXPECT_EQ(detector.Findings()[0].context_tokens, allowed.finding->context_tokens);
}

// A timestamp that changes length shifts everything after it off the
// granule grid: the rest still meets the earlier prompt.
TEST(CacheBreakerDetectorTest, ABreakerThatChangesLengthIsStillFound) {
  CacheBreakerDetector detector(Options());
  const std::vector<int64_t> head = Span(1000, 5);
  const std::vector<int64_t> body = Span(5000, 2000);
  detector.Observe("llama", "", Concat({head, {1}, body}), 1);
  const Observation shifted = detector.Observe("llama", "", Concat({head, {2, 3, 4}, body}), 2);
  ASSERT_TRUE(shifted.finding.has_value());
  EXPECT_EQ(shifted.finding->kind, FindingKind::kBreaker);
  EXPECT_EQ(shifted.finding->position_tokens, 0u);
  EXPECT_LE(shifted.finding->length_tokens, 5u + 3 + 16);
  EXPECT_GE(shifted.finding->avoidable_tokens, 2000u - 16);
  EXPECT_LE(shifted.finding->avoidable_tokens, 2000u);
}

// Prompts that share a system prompt and differ after it, or that extend
// an earlier one (a conversation that grew), break nothing.
TEST(CacheBreakerDetectorTest, ACleanFamilyReportsNothing) {
  CacheBreakerDetector detector(Options());
  const std::vector<int64_t> system = Span(1000, 3000);
  const std::vector<int64_t> first_question = Span(9000, 200);
  detector.Observe("llama", "acme", Concat({system, first_question}), 1);
  detector.Observe("llama", "acme", Concat({system, Span(20000, 300)}), 2);
  detector.Observe("llama", "acme", Concat({system, first_question, Span(30000, 500)}), 3);
  const Observation last = detector.Observe("llama", "acme", Concat({system, Span(40000, 100)}), 4);
  EXPECT_FALSE(last.finding.has_value());
  EXPECT_TRUE(detector.Findings().empty());
  EXPECT_EQ(detector.families(), 1u);
}

TEST(CacheBreakerDetectorTest, ToolsInAnotherOrderAreAReordering) {
  CacheBreakerDetector detector(Options());
  const std::vector<int64_t> system = Span(1000, 64);
  const std::vector<int64_t> tool_a = Span(2000, 300);
  const std::vector<int64_t> tool_b = Span(3000, 250);
  const std::vector<int64_t> tool_c = Span(4000, 200);
  detector.Observe("llama", "acme", Concat({system, tool_a, tool_b, tool_c}), 1);
  const Observation swapped =
      detector.Observe("llama", "acme", Concat({system, tool_b, tool_a, tool_c}), 2);
  ASSERT_TRUE(swapped.finding.has_value());
  EXPECT_EQ(swapped.finding->kind, FindingKind::kReordering);
  EXPECT_EQ(swapped.finding->position_tokens, 64u);
  // Most of the tools recur; what a granule straddles does not.
  EXPECT_GE(swapped.finding->avoidable_tokens, 600u);
  EXPECT_LE(swapped.finding->avoidable_tokens, 750u);
}

TEST(CacheBreakerDetectorTest, PromptsThatPartEarlyForGoodAreADivergence) {
  CacheBreakerDetector detector(Options());
  const std::vector<int64_t> shared = Span(1000, 48);
  detector.Observe("llama", "", Concat({shared, Span(10000, 1000)}), 1);
  const Observation parted = detector.Observe("llama", "", Concat({shared, Span(20000, 1000)}), 2);
  ASSERT_TRUE(parted.finding.has_value());
  EXPECT_EQ(parted.finding->kind, FindingKind::kDivergence);
  EXPECT_EQ(parted.finding->position_tokens, 48u);
  EXPECT_EQ(parted.finding->avoidable_tokens, 0u);
}

TEST(CacheBreakerDetectorTest, TenantsAndModelsAreSeparateScopes) {
  CacheBreakerDetector detector(Options());
  detector.Observe("llama", "acme", TimestampedPrompt(1), 1);
  // The same prompt from another tenant, or for another model, starts its
  // own family: it is not compared across.
  EXPECT_FALSE(detector.Observe("llama", "beta", TimestampedPrompt(2), 2).finding.has_value());
  EXPECT_FALSE(detector.Observe("qwen", "acme", TimestampedPrompt(3), 3).finding.has_value());
  EXPECT_TRUE(detector.Observe("llama", "beta", TimestampedPrompt(4), 4).finding.has_value());
  EXPECT_EQ(detector.Findings("acme").size(), 0u);
  ASSERT_EQ(detector.Findings("beta").size(), 1u);
  EXPECT_EQ(detector.Findings("beta")[0].tenant, "beta");
  EXPECT_EQ(detector.Findings().size(), 1u);
}

TEST(CacheBreakerDetectorTest, MemoryIsBoundedByFamiliesAndPromptsPerFamily) {
  DetectorOptions options = Options();
  options.max_families = 3;
  options.findings_per_scope = 2;
  CacheBreakerDetector detector(options);
  for (int64_t family = 0; family < 10; ++family) {
    for (int64_t t = 0; t < 3; ++t) {
      std::vector<int64_t> tokens = Span(100000 * (family + 1), 500);
      tokens[20] = t;
      detector.Observe("llama", "acme", tokens, family * 10 + t);
    }
  }
  EXPECT_EQ(detector.families(), 3u);
  const std::vector<Finding> findings = detector.Findings();
  ASSERT_EQ(findings.size(), 2u);  // the newest two families' breakers
  EXPECT_EQ(findings[0].last_seen_ms, 92);
}

TEST(CacheBreakerDetectorTest, PromptsShorterThanAGranuleAreNotRemembered) {
  CacheBreakerDetector detector(Options());
  const Observation short_one = detector.Observe("llama", "", Span(1, 10), 1);
  EXPECT_EQ(short_one.family, 0u);
  EXPECT_EQ(detector.families(), 0u);
}

}  // namespace
}  // namespace kvgov::prompts
