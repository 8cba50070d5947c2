#pragma once

// kvgov's block keys computed the plainest way, straight from
// docs/formats/block-keys.md: every field appended to one string, then one
// XXH3. The oracle the production hasher (block_key.cc) is checked against
// in tests and measured beside in benchmarks; never linked into the daemon.

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/engine_events.h"
#include "kvgov/index/block_key.h"

namespace kvgov::index::reference {

inline void AppendU64(std::string& out, uint64_t value) {
  for (int shift = 56; shift >= 0; shift -= 8) out += static_cast<char>(value >> shift);
}

inline void AppendFrame(std::string& out, std::string_view text) {
  AppendU64(out, text.size());
  out.append(text);
}

inline BlockKey Root(uint64_t seed, const ChainNamespace& ns) {
  std::string bytes;
  AppendFrame(bytes, "kvgov.chain_root.v1");
  AppendFrame(bytes, ns.model);
  AppendFrame(bytes, ns.lora_name);
  AppendU64(bytes, static_cast<uint64_t>(ns.group_idx));
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
}

inline BlockKey Key(uint64_t seed, BlockKey parent, std::span<const int64_t> tokens,
                    std::string_view extra_key) {
  std::string bytes;
  AppendU64(bytes, parent);
  AppendFrame(bytes, extra_key);
  AppendU64(bytes, tokens.size());
  for (int64_t token : tokens) AppendU64(bytes, static_cast<uint64_t>(token));
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
}

/// index::RequestChain, by the definition.
inline std::vector<BlockKey> RequestChain(uint64_t seed, const ChainNamespace& ns,
                                          std::string_view cache_salt,
                                          std::span<const int64_t> tokens, int64_t block_size) {
  std::vector<BlockKey> keys;
  if (block_size <= 0) return keys;
  const size_t size = static_cast<size_t>(block_size);
  const std::string first = FirstBlockExtraKey(ns.lora_name, cache_salt);
  const std::string rest = FirstBlockExtraKey(ns.lora_name, "");
  BlockKey parent = Root(seed, ns);
  for (size_t block = 0; (block + 1) * size <= tokens.size(); ++block) {
    parent = Key(seed, parent, tokens.subspan(block * size, size), block == 0 ? first : rest);
    keys.push_back(parent);
  }
  return keys;
}

}  // namespace kvgov::index::reference
