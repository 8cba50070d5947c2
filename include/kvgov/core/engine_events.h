#pragma once

// The KV-cache events an engine publishes about its own block pool (vLLM,
// SGLang, Mooncake's store), decoded from the wire into plain records. The
// adapters produce these from bytes; the residency index consumes them.
// Wire forms: docs/formats/engine-events.md.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvgov/core/envelope.h"
#include "kvgov/core/status.h"

namespace kvgov {

/// An engine's block hash, normalised to 64 bits: unsigned ints as they
/// are, signed ints by their two's-complement bits, bytes by their last 8
/// bytes big-endian (left-padded when shorter), as vLLM does.
using EngineHash = uint64_t;

/// Blocks the engine filled. `extra_keys` has one entry per block (or is
/// empty): the block's extra hash keys (LoRA name, multimodal ids,
/// cache_salt on the first block) in canonical JSON text, "" for none.
struct BlockStored {
  std::vector<EngineHash> block_hashes;
  std::optional<EngineHash> parent_block_hash;
  std::vector<int64_t> token_ids;
  int64_t block_size = 0;
  std::string lora_name;
  std::string medium;  // as sent ("GPU", "CPU", "CPU_TIER1", ...); "" when absent
  std::vector<std::string> extra_keys;
  int64_t group_idx = 0;
  std::string kv_cache_spec_kind;  // "full_attention", "sliding_window", ...; "" when absent
  int64_t kv_cache_spec_sliding_window = 0;  // tokens; 0 when absent
  std::string locality{};  // vLLM's "LOCAL" / "REMOTE" as sent; "" when absent
  friend bool operator==(const BlockStored&, const BlockStored&) = default;
};

/// Blocks the engine evicted from one medium.
struct BlockRemoved {
  std::vector<EngineHash> block_hashes;
  std::string medium;
  int64_t group_idx = 0;
  // A default member initializer, so aggregate initialisers that predate
  // the field need not name it.
  std::string locality{};
  friend bool operator==(const BlockRemoved&, const BlockRemoved&) = default;
};

/// The engine emptied its prefix cache.
struct AllBlocksCleared {
  friend bool operator==(const AllBlocksCleared&, const AllBlocksCleared&) = default;
};

using EngineEvent = std::variant<BlockStored, BlockRemoved, AllBlocksCleared>;

/// What a decoder skipped without failing: counted, never fatal.
struct IgnoredInput {
  uint64_t unknown_fields = 0;
  uint64_t unknown_event_types = 0;
  friend bool operator==(const IgnoredInput&, const IgnoredInput&) = default;
};

/// One published batch.
struct EngineEventBatch {
  double ts = 0;  // seconds since the epoch, the publisher's clock
  std::optional<int64_t> dp_rank;
  std::vector<EngineEvent> events;
  IgnoredInput ignored;
  friend bool operator==(const EngineEventBatch&, const EngineEventBatch&) = default;
};

/// The tier a block on `medium` with `locality` lives in, case-insensitive
/// (the table and each string's source: docs/formats/engine-events.md §6).
/// "GPU" or "" -> hbm; host memory ("CPU", "CPU_PINNED", "CPU_TIER1") ->
/// dram; local storage ("FS", "STORAGE", "DISK", "CPU_TIER2") -> disk;
/// object stores and external pools ("OBJ", "EXTERNAL") -> remote;
/// Mooncake's "L1"/"L2"/"L3" -> hbm/dram/disk. Locality "REMOTE" makes any
/// known medium remote (the bytes are not on this worker); "" and "LOCAL"
/// leave the medium's tier. Anything else -> unknown, never credited as hbm.
ResidencyTier TierForMedium(std::string_view medium, std::string_view locality = "");

/// Token ids are non-negative int32 in every engine's vocabulary (vLLM,
/// SGLang, the OpenAI API's token arrays).
inline constexpr int64_t kMaxTokenId = 2147483647;

/// InvalidArgument "<field>[i]: want a token id in 0..2147483647, got N"
/// naming the first id out of range; Ok when every one is in range.
Status CheckTokenIds(std::span<const int64_t> token_ids, std::string_view field = "token_ids");

/// The canonical extra key (§4 of docs/formats/engine-events.md) of a block
/// hashed with a LoRA name and, on a chain's first block, a cache salt, as
/// vLLM publishes it: JSON `["<lora>","<salt>"]`, without an element that is
/// empty; "" when both are. kvgov's route keys and the keys of engines that
/// report the salt or LoRA outside extra_keys (SGLang) are built with it, so
/// a tenant's blocks match its routes whichever engine holds them.
std::string FirstBlockExtraKey(std::string_view lora_name, std::string_view cache_salt);

/// "BlockStored", "BlockRemoved", "AllBlocksCleared".
std::string_view EngineEventTypeName(const EngineEvent& event);

/// Lowers an engine event into the envelope, one entry per block: source
/// ride_engine, plane kv_transfer, direction store (BlockStored) or evict
/// (BlockRemoved), span digest = the engine hash in 16 lowercase hex digits,
/// owner = worker, to_tier from the medium (from_tier for an eviction),
/// labels worker and group_idx. A block's length is the event's own
/// block_size when it has one, else `block_size`. AllBlocksCleared lowers to
/// one evict entry with span digest "*" (every block), length 0 and no
/// group_idx label. Never fails: the records were validated by their
/// decoder.
std::vector<Entry> LowerEngineEvent(const EngineEvent& event, std::string_view worker,
                                    int64_t block_size);

/// The entries LowerEngineEvent returns, in the same order, handed to `sink`
/// one at a time. An event's entries differ only in their span digest, so
/// one entry is built per event and its digest rewritten for each block:
/// lowering costs no allocation per block. The entry `sink` sees is valid
/// only during the call.
void LowerEngineEventEach(const EngineEvent& event, std::string_view worker,
                          int64_t block_size, const std::function<void(const Entry&)>& sink);

}  // namespace kvgov
