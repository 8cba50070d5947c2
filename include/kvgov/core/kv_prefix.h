#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvgov/core/envelope.h"
#include "kvgov/core/lookup_verdict.h"
#include "kvgov/core/status.h"

namespace kvgov {

/// A KV prefix on kvgov's own (native) plane: a token sequence whose KV is
/// resident somewhere kvgov indexes.
struct KVPrefix {
  std::vector<int64_t> token_ids;
  std::string model_id;
  std::string tokenizer_id;
  ResidencyTier tier = ResidencyTier::kHBM;
  std::string owner;  // empty -> "kvgov"
  std::string lease;
  int64_t reused_tokens = 0;  // prefill tokens this reuse saved
  friend bool operator==(const KVPrefix&, const KVPrefix&) = default;
};

/// Lowers onto the kv_prefix plane (source native, media kv_span, unit
/// positions, prefix_aligned, length = token count, digest =
/// DigestTokenIds). Untrusted until admitted, like every lowering.
/// Invalidation mode policy. Returns InvalidArgument for an empty model or
/// a negative reused_tokens.
Result<Entry> FromKVPrefix(const KVPrefix& prefix);

/// hit when the entry names a prefix (valid handle), else miss/absent.
LookupVerdict KVPrefixVerdict(const Entry& entry);

}  // namespace kvgov
