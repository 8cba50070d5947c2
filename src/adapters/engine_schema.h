#pragma once

// The vLLM / SGLang event fields both batch decoders read (engine_wire.cc's
// object path, one_pass_decoder.cc), so the two cannot drift apart on a
// field's name or position. Wire: docs/formats/engine-events.md.

#include <array>
#include <cstdint>
#include <string_view>

namespace kvgov::adapters::internal {

/// A BlockStored's fields, in their positional ([tag, fields...]) order.
enum StoredField : uint8_t {
  kBlockHashes,
  kParentBlockHash,
  kTokenIds,
  kBlockSize,
  kLoraId,
  kMedium,
  kLoraName,
  kExtraKeys,
  kGroupIdx,
  kSpecKind,
  kSpecSlidingWindow,
  kLocality,
  kOwnership,
  kSessionId,
  kStoredFieldCount,
};

/// Their names, the keys of a map-encoded event.
inline constexpr std::array<std::string_view, kStoredFieldCount> kStoredFields = {
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
    "group_idx",
    "kv_cache_spec_kind",
    "kv_cache_spec_sliding_window",
    "locality",
    "ownership",
    "session_id"};
static_assert(kStoredFields[kParentBlockHash] == "parent_block_hash" &&
              kStoredFields[kSpecSlidingWindow] == "kv_cache_spec_sliding_window" &&
              kStoredFields[kSessionId] == "session_id");

/// A BlockRemoved's fields, in its positional order: a subset of a
/// BlockStored's, read by the same rules.
inline constexpr std::array<StoredField, 5> kRemovedFieldOrder = {kBlockHashes, kMedium, kGroupIdx,
                                                                  kLocality, kOwnership};

}  // namespace kvgov::adapters::internal
