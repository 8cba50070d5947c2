#include "kvgov/prompts/cache_breakers.h"

#include <algorithm>

namespace kvgov::prompts {
namespace {

constexpr uint64_t kBase = 0x9e3779b97f4a7c15ULL;  // odd: multiplication mod 2^64 is invertible

// How far past min_shared_granules a prompt that shares too little aligned
// with any family is searched at every offset: a shifting span must end
// within this many granules for its family to be found.
constexpr size_t kShiftSearchGranules = 8;

// A family is recognised by its prompts' first granules: those are indexed
// (and vote), not the rest, which keeps the index and the vote small for
// long prompts. A prompt whose first this many granules all differ from a
// family's starts a new one.
constexpr size_t kIndexedGranules = 64;

std::span<const uint64_t> Indexed(const std::vector<uint64_t>& granules) {
  return std::span(granules).first(std::min(granules.size(), kIndexedGranules));
}

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// The keyed hash of every window of `granule` tokens, at every offset
// 0..n-granule: a polynomial rolling hash over mixed tokens, so a window's
// hash does not depend on where it lies and a shifted span still matches.
// A granule's hash is the window's at its aligned offset.
std::vector<uint64_t> WindowHashes(std::span<const int64_t> tokens, uint32_t granule,
                                   uint64_t key) {
  std::vector<uint64_t> windows;
  if (tokens.size() < granule) return windows;
  windows.resize(tokens.size() - granule + 1);
  uint64_t top = 1;  // kBase^(granule-1)
  for (uint32_t i = 1; i < granule; ++i) top *= kBase;
  std::vector<uint64_t> mixed(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) mixed[i] = Mix(static_cast<uint64_t>(tokens[i]) ^ key);
  uint64_t hash = 0;
  for (uint32_t i = 0; i < granule; ++i) hash = hash * kBase + mixed[i];
  windows[0] = hash;
  for (size_t o = 1; o < windows.size(); ++o) {
    hash = (hash - mixed[o - 1] * top) * kBase + mixed[o + granule - 1];
    windows[o] = hash;
  }
  return windows;
}

size_t CommonGranules(std::span<const uint64_t> a, std::span<const uint64_t> b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first -
                             a.begin());
}

// A run of `granules` whole granules of the new prompt, from token
// `offset`, equal to the earlier prompt's from granule `earlier_granule`.
struct Run {
  size_t offset;
  size_t earlier_granule;
  size_t granules;
};

// How the new prompt differs from the earlier one of its family, if it does
// in a way that costs prefill (kinds as in FindingKind).
std::optional<Finding> Compare(std::span<const uint64_t> earlier, std::span<const uint64_t> windows,
                               size_t prompt_tokens, size_t common, uint32_t granule) {
  const size_t granules = prompt_tokens / granule;
  // The new prompt is the earlier one's prefix, or extends it (a
  // conversation that grew): whatever the engine holds, it can reuse.
  if (common == granules || common == earlier.size()) return std::nullopt;
  std::unordered_map<uint64_t, size_t> earlier_at;
  for (size_t j = earlier.size(); j-- > common;) earlier_at[earlier[j]] = j;  // first wins

  std::vector<Run> runs;
  size_t matched_tokens = 0;
  for (size_t offset = common * granule; offset < windows.size();) {
    const auto found = earlier_at.find(windows[offset]);
    if (found == earlier_at.end()) {
      ++offset;
      continue;
    }
    Run run{offset, found->second, 0};
    while (offset < windows.size() && run.earlier_granule + run.granules < earlier.size() &&
           windows[offset] == earlier[run.earlier_granule + run.granules]) {
      ++run.granules;
      offset += granule;
    }
    matched_tokens += run.granules * granule;
    runs.push_back(run);
  }

  Finding finding;
  finding.position_tokens = static_cast<uint32_t>(common * granule);
  finding.prompt_tokens = static_cast<uint32_t>(prompt_tokens);
  const size_t after = prompt_tokens - common * granule;
  if (runs.empty()) {
    if (4 * common * granule >= prompt_tokens) return std::nullopt;  // parted late: ordinary
    finding.kind = FindingKind::kDivergence;
    return finding;
  }
  const bool in_order =
      std::adjacent_find(runs.begin(), runs.end(), [](const Run& a, const Run& b) {
        return b.earlier_granule < a.earlier_granule + a.granules;
      }) == runs.end();
  if (in_order) {
    const size_t span = runs.front().offset - common * granule;
    // A short span, then a long run the same again: the engine recomputes
    // the run only because the span precedes it.
    if (matched_tokens < size_t{2} * granule || matched_tokens < span) return std::nullopt;
    finding.kind = FindingKind::kBreaker;
    finding.length_tokens = static_cast<uint32_t>(span);
  } else {
    if (2 * matched_tokens < after) return std::nullopt;
    finding.kind = FindingKind::kReordering;
    const Run& last = runs.back();
    finding.length_tokens =
        static_cast<uint32_t>(last.offset + last.granules * granule - common * granule);
  }
  finding.avoidable_tokens = static_cast<uint32_t>(matched_tokens);
  return finding;
}

std::string ScopeKey(std::string_view model, std::string_view tenant) {
  std::string key(model);
  key.push_back('\0');
  key.append(tenant);
  return key;
}

}  // namespace

std::string_view ToString(FindingKind kind) {
  switch (kind) {
    case FindingKind::kBreaker:
      return "breaker";
    case FindingKind::kReordering:
      return "reordering";
    case FindingKind::kDivergence:
      return "divergence";
  }
  return "breaker";
}

CacheBreakerDetector::CacheBreakerDetector(DetectorOptions options) : options_(options) {}

CacheBreakerDetector::~CacheBreakerDetector() = default;

Observation CacheBreakerDetector::Observe(std::string_view model, std::string_view tenant,
                                          std::span<const int64_t> tokens, int64_t now_ms,
                                          bool keep_context) {
  const uint32_t granule = std::max<uint32_t>(options_.granule_tokens, 1);
  tokens = tokens.first(std::min<size_t>(tokens.size(), options_.max_prompt_tokens));
  Observation observation;
  if (tokens.size() < granule) return observation;
  const std::vector<uint64_t> windows = WindowHashes(tokens, granule, options_.key);
  Prompt prompt;
  prompt.tokens = static_cast<uint32_t>(tokens.size());
  prompt.granules.reserve(tokens.size() / granule);
  for (size_t offset = 0; offset + granule <= tokens.size(); offset += granule) {
    prompt.granules.push_back(windows[offset]);
  }

  MutexLock lock(mutex_);
  const std::string scope_key = ScopeKey(model, tenant);
  auto [scope_it, created] = scopes_.try_emplace(scope_key);
  Scope& scope = scope_it->second;
  if (created) {
    scope.model = std::string(model);
    scope.tenant = std::string(tenant);
  }
  uint64_t family_id = ChooseFamily(scope, windows, prompt);
  if (family_id != 0) {
    // The engine reuses the longest prefix it holds: compare with the
    // member that shares the most, the newest on a tie.
    const Family& family = families_.at(family_id);
    const Prompt* closest = nullptr;
    size_t closest_common = 0;
    for (const Prompt& member : family.prompts) {
      const size_t common = CommonGranules(member.granules, prompt.granules);
      if (closest == nullptr || common > closest_common) {
        closest = &member;
        closest_common = common;
      }
    }
    if (std::optional<Finding> finding =
            Compare(closest->granules, windows, prompt.tokens, closest_common, granule)) {
      finding->model = scope.model;
      finding->tenant = scope.tenant;
      finding->family = family_id;
      finding->first_seen_ms = now_ms;
      finding->last_seen_ms = now_ms;
      if (keep_context) {
        const size_t from = finding->position_tokens > kContextMarginTokens
                                ? finding->position_tokens - kContextMarginTokens
                                : 0;
        const size_t to = std::min<size_t>(
            {tokens.size(), from + kMaxContextTokens,
             size_t{finding->position_tokens} + finding->length_tokens + kContextMarginTokens});
        finding->context_offset = static_cast<uint32_t>(from);
        finding->context_tokens.assign(tokens.begin() + static_cast<ptrdiff_t>(from),
                                       tokens.begin() + static_cast<ptrdiff_t>(to));
      }
      Record(scope, *std::move(finding), observation);
    }
  } else {
    family_id = next_family_++;
  }
  observation.family = family_id;
  Remember(scope, family_id, std::move(prompt));
  return observation;
}

uint64_t CacheBreakerDetector::ChooseFamily(const Scope& scope, std::span<const uint64_t> windows,
                                            const Prompt& prompt) const {
  std::unordered_map<uint64_t, uint32_t> votes;
  auto vote = [&](uint64_t hash) KVGOV_REQUIRES(mutex_) {
    // An entry may outlive its family (granules of prompts that left one
    // are forgotten lazily); such a vote does not count.
    const auto found = scope.family_of_granule.find(hash);
    if (found != scope.family_of_granule.end() && families_.contains(found->second)) {
      ++votes[found->second];
    }
  };
  auto best = [&]() -> uint64_t {
    uint64_t chosen = 0;
    uint32_t most = 0;
    for (const auto& [family, count] : votes) {
      if (count > most || (count == most && family > chosen)) {
        chosen = family;
        most = count;
      }
    }
    return most >= options_.min_shared_granules ? chosen : 0;
  };
  for (uint64_t granule : Indexed(prompt.granules)) vote(granule);
  if (const uint64_t chosen = best(); chosen != 0) return chosen;
  // Too little aligned: a span in the first granules changed length and
  // shifted the rest (a later one leaves the granules before it aligned,
  // and they vote). The windows at every offset of the first granules
  // meet the family's granules again whatever the shift.
  votes.clear();
  const size_t search =
      std::min<size_t>(windows.size(), (options_.min_shared_granules + kShiftSearchGranules) *
                                           std::max<uint32_t>(options_.granule_tokens, 1));
  for (size_t offset = 0; offset < search; ++offset) vote(windows[offset]);
  return best();
}

void CacheBreakerDetector::Remember(Scope& scope, uint64_t family_id, Prompt prompt) {
  auto [family_it, created] = families_.try_emplace(family_id);
  Family& family = family_it->second;
  if (created) {
    family.id = family_id;
    family.scope = ScopeKey(scope.model, scope.tenant);
    recency_.push_front(family_id);
    family.recency = recency_.begin();
  } else {
    recency_.splice(recency_.begin(), recency_, family.recency);
  }
  for (uint64_t granule : Indexed(prompt.granules)) scope.family_of_granule[granule] = family_id;
  scope.live_granules += Indexed(prompt.granules).size();
  family.prompts.push_front(std::move(prompt));
  if (family.prompts.size() > std::max<uint32_t>(options_.prompts_per_family, 1)) {
    scope.live_granules -= Indexed(family.prompts.back().granules).size();
    family.prompts.pop_back();
  }
  // Granules of prompts that left a family are forgotten lazily: rebuild
  // the scope's map once stale entries outnumber the live ones.
  if (scope.family_of_granule.size() > 2 * scope.live_granules + 1024) {
    scope.family_of_granule.clear();
    for (const auto& [id, member] : families_) {
      if (member.scope != family.scope) continue;
      for (auto p = member.prompts.rbegin(); p != member.prompts.rend(); ++p) {
        for (uint64_t granule : Indexed(p->granules)) scope.family_of_granule[granule] = id;
      }
    }
  }
  while (families_.size() > std::max<uint32_t>(options_.max_families, 1)) {
    EvictLeastRecentFamily();
  }
}

void CacheBreakerDetector::EvictLeastRecentFamily() {
  const uint64_t id = recency_.back();
  recency_.pop_back();
  const auto family = families_.find(id);
  const auto scope = scopes_.find(family->second.scope);
  for (const Prompt& prompt : family->second.prompts) {
    scope->second.live_granules -= Indexed(prompt.granules).size();
    for (uint64_t granule : Indexed(prompt.granules)) {
      const auto entry = scope->second.family_of_granule.find(granule);
      if (entry != scope->second.family_of_granule.end() && entry->second == id) {
        scope->second.family_of_granule.erase(entry);
      }
    }
  }
  families_.erase(family);
  if (scope->second.findings.empty() && scope->second.family_of_granule.empty()) {
    scopes_.erase(scope);
  }
}

void CacheBreakerDetector::Record(Scope& scope, Finding finding, Observation& observation) {
  const uint32_t granule = std::max<uint32_t>(options_.granule_tokens, 1);
  const FindingKey key{finding.family, finding.kind, finding.position_tokens / granule};
  auto [it, inserted] = scope.findings.try_emplace(key, finding);
  Finding& kept = it->second;
  if (!inserted) {
    kept.length_tokens = finding.length_tokens;
    kept.avoidable_tokens = finding.avoidable_tokens;
    kept.prompt_tokens = finding.prompt_tokens;
    kept.last_seen_ms = finding.last_seen_ms;
    kept.context_tokens = finding.context_tokens;
    kept.context_offset = finding.context_offset;
  }
  ++kept.occurrences;
  kept.avoidable_tokens_total += finding.avoidable_tokens;
  observation.finding = kept;
  observation.new_finding = inserted;
  if (scope.findings.size() > std::max<uint32_t>(options_.findings_per_scope, 1)) {
    scope.findings.erase(std::min_element(scope.findings.begin(), scope.findings.end(),
                                          [](const auto& a, const auto& b) {
                                            return a.second.last_seen_ms < b.second.last_seen_ms;
                                          }));
  }
}

std::vector<Finding> CacheBreakerDetector::Findings(std::optional<std::string_view> tenant) const {
  std::vector<Finding> out;
  MutexLock lock(mutex_);
  for (const auto& [key, scope] : scopes_) {
    if (tenant && scope.tenant != *tenant) continue;
    for (const auto& [finding_key, finding] : scope.findings) out.push_back(finding);
  }
  std::sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    if (a.avoidable_tokens_total != b.avoidable_tokens_total) {
      return a.avoidable_tokens_total > b.avoidable_tokens_total;
    }
    return a.last_seen_ms > b.last_seen_ms;
  });
  return out;
}

size_t CacheBreakerDetector::families() const {
  MutexLock lock(mutex_);
  return families_.size();
}

}  // namespace kvgov::prompts
