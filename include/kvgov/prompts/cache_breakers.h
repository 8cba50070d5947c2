#pragma once

// Cache breakers: a few volatile tokens early in an otherwise static prompt
// (a timestamp in the system prompt, tools serialized in another order, a
// user name before the shared instructions) make the engine recompute
// everything after them on every request. The detector compares each
// prompt with the recent prompts of its family, in granules of tokens, and
// names the span that differs while what follows is the same again
// (docs/formats/prefix-diagnostics.md, docs/adr/0029).
//
// Only keyed hashes of granules are remembered, never tokens: a prompt is
// the tenant's data. Time enters as an argument.

#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvgov/core/mutex.h"

namespace kvgov::prompts {

enum class FindingKind {
  kBreaker,     // a span differs, and the prompt is the same again after it
  kReordering,  // what follows the first difference recurs, in another order
  kDivergence,  // prompts part early (first quarter) and never meet again
};

std::string_view ToString(FindingKind kind);

struct DetectorOptions {
  /// Prompts are compared in granules of this many tokens (the engines'
  /// block size is the natural choice): positions are exact to a granule.
  uint32_t granule_tokens = 16;
  /// A longer prompt is diagnosed by its first this many tokens.
  uint32_t max_prompt_tokens = 16384;
  /// Recent prompts remembered per family; the oldest goes first.
  uint32_t prompts_per_family = 4;
  /// Families remembered across all models and tenants; the least recently
  /// seen goes first. Memory is at most about
  /// max_families * prompts_per_family * max_prompt_tokens / granule_tokens
  /// * 8 bytes (48 MiB by default).
  uint32_t max_families = 1536;
  /// Findings kept per model and tenant; the least recently seen goes first.
  uint32_t findings_per_scope = 64;
  /// Granules a prompt must share with a family to join it.
  uint32_t min_shared_granules = 2;
  /// Keys the granule hashes, so what is remembered cannot be checked
  /// against guessed prompts. The caller draws it at random.
  uint64_t key = 0;
};

/// A cause of avoidable prefill in one family of prompts, as last seen.
struct Finding {
  FindingKind kind = FindingKind::kBreaker;
  std::string model;
  std::string tenant;
  uint64_t family = 0;
  /// The first token of the granule where the prompts first differ.
  uint32_t position_tokens = 0;
  /// The span that differs, from `position_tokens` to where the prompt is
  /// the same again (a breaker), or to the end of the last recurring run
  /// (a reordering); 0 for a divergence. At most a granule longer than the
  /// truth.
  uint32_t length_tokens = 0;
  /// Tokens after the span the engine recomputes although they are the same
  /// as in the earlier prompt: what moving the span to the end (or keeping
  /// one order) would save, per request. 0 for a divergence.
  uint32_t avoidable_tokens = 0;
  /// The prompt's length, in tokens (up to max_prompt_tokens).
  uint32_t prompt_tokens = 0;
  uint64_t occurrences = 0;  // requests it was seen in
  uint64_t avoidable_tokens_total = 0;
  /// Only for a scope whose tenant allows it (Observe's keep_context): the
  /// newest prompt's tokens around the span, from token `context_offset`.
  std::vector<int64_t> context_tokens;
  uint32_t context_offset = 0;
  int64_t first_seen_ms = 0;
  int64_t last_seen_ms = 0;
};

/// What one prompt showed.
struct Observation {
  uint64_t family = 0;
  /// The finding this prompt counts towards, updated; nullopt when it
  /// matched its family's prompts as far as it went, or began a family.
  std::optional<Finding> finding;
  /// The finding was not known before this prompt.
  bool new_finding = false;
};

/// Thread-safe: one mutex. The per-token hashing is done before taking it;
/// under it, a prompt is matched against its family's remembered hashes.
class CacheBreakerDetector {
 public:
  explicit CacheBreakerDetector(DetectorOptions options);
  ~CacheBreakerDetector();
  CacheBreakerDetector(const CacheBreakerDetector&) = delete;
  CacheBreakerDetector& operator=(const CacheBreakerDetector&) = delete;

  /// Compares `tokens` with the recent prompts of its family in the scope
  /// (model, tenant), then remembers it. With `keep_context` (the tenant
  /// allows it), a finding keeps the tokens around its span, at most
  /// kMaxContextTokens of them: the only tokens the detector ever keeps.
  Observation Observe(std::string_view model, std::string_view tenant,
                      std::span<const int64_t> tokens, int64_t now_ms, bool keep_context = false);

  static constexpr size_t kContextMarginTokens = 8;  // before and after the span
  static constexpr size_t kMaxContextTokens = 64;

  /// Findings, most avoidable tokens first; only `tenant`'s when given.
  std::vector<Finding> Findings(std::optional<std::string_view> tenant = std::nullopt) const;

  /// Families remembered now.
  size_t families() const;

  const DetectorOptions& options() const { return options_; }

 private:
  struct Prompt {
    std::vector<uint64_t> granules;  // keyed hash of each whole granule
    uint32_t tokens = 0;
  };
  struct Family {
    uint64_t id = 0;
    std::string scope;
    std::list<Prompt> prompts;  // newest first
    std::list<uint64_t>::iterator recency;
  };
  struct FindingKey {
    uint64_t family;
    FindingKind kind;
    uint32_t position_granule;
    // clang-tidy 14 reads the 0 a defaulted <=> is compared with as a null
    // pointer (llvm-project#53961).
    // NOLINTNEXTLINE(modernize-use-nullptr)
    auto operator<=>(const FindingKey&) const = default;
  };
  struct Scope {
    std::string model;
    std::string tenant;
    std::unordered_map<uint64_t, uint64_t> family_of_granule;  // hash -> family id
    size_t live_granules = 0;  // of the scope's families' remembered prompts
    std::map<FindingKey, Finding> findings;
  };

  uint64_t ChooseFamily(const Scope& scope, std::span<const uint64_t> rolling,
                        const Prompt& prompt) const KVGOV_REQUIRES(mutex_);
  void Remember(Scope& scope, uint64_t family_id, Prompt prompt) KVGOV_REQUIRES(mutex_);
  void EvictLeastRecentFamily() KVGOV_REQUIRES(mutex_);
  void Record(Scope& scope, Finding finding, Observation& observation) KVGOV_REQUIRES(mutex_);

  const DetectorOptions options_;
  mutable Mutex mutex_;
  std::unordered_map<std::string, Scope> scopes_ KVGOV_GUARDED_BY(mutex_);
  std::unordered_map<uint64_t, Family> families_ KVGOV_GUARDED_BY(mutex_);
  // Family ids, most recently seen first.
  std::list<uint64_t> recency_ KVGOV_GUARDED_BY(mutex_);
  uint64_t next_family_ KVGOV_GUARDED_BY(mutex_) = 1;
};

}  // namespace kvgov::prompts
