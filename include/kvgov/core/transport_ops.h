#pragma once

#include "kvgov/core/kv_transfer.h"

namespace kvgov {

/// A Mooncake store or transfer-engine operation on one span.
struct MooncakeEvent {
  MooncakeOperation operation = MooncakeOperation::kPut;
  KVSpanReport span;
  friend bool operator==(const MooncakeEvent&, const MooncakeEvent&) = default;
};

/// An LMCache operation on one span.
struct LMCacheEvent {
  LMCacheOperation operation = LMCacheOperation::kOffload;
  KVSpanReport span;
  friend bool operator==(const LMCacheEvent&, const LMCacheEvent&) = default;
};

/// put -> store, remove -> evict, transfer (prefill to decode) -> migrate,
/// lookup (distributed pool) -> route, materialize (remote KV) -> restore.
KVTransferDirection DirectionFor(MooncakeOperation operation);

/// offload (append) -> offload, restore (lookup + materialise) -> restore,
/// evict -> evict.
KVTransferDirection DirectionFor(LMCacheOperation operation);

/// Lowers through FromKVTransfer with the mapped direction, default owner
/// "mooncake", and labels transport=mooncake, mooncake_op=<operation>.
Result<Entry> FromMooncake(const MooncakeEvent& event);

/// Lowers through FromKVTransfer with the mapped direction, default owner
/// "lmcache", and labels transport=lmcache, lmcache_op=<operation>.
Result<Entry> FromLMCache(const LMCacheEvent& event);

}  // namespace kvgov
