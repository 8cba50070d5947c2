#include "kvgov/core/transport_ops.h"

#include <string>

namespace kvgov {
namespace {

// Both transports lower the same way; only the direction table, the default
// owner and the label names differ.
template <typename Operation>
Result<Entry> LowerTransportOp(std::string_view transport, std::string_view op_label,
                               Operation operation, KVSpanReport span) {
  if (span.owner.empty()) span.owner = std::string(transport);
  KVGOV_ASSIGN_OR_RETURN(Entry entry, FromKVTransfer(KVTransfer{DirectionFor(operation), span}));
  entry.labels["transport"] = std::string(transport);
  entry.labels[std::string(op_label)] = std::string(ToString(operation));
  return entry;
}

}  // namespace

KVTransferDirection DirectionFor(MooncakeOperation operation) {
  switch (operation) {
    case MooncakeOperation::kPut:
      return KVTransferDirection::kStore;
    case MooncakeOperation::kRemove:
      return KVTransferDirection::kEvict;
    case MooncakeOperation::kTransfer:
      return KVTransferDirection::kMigrate;
    case MooncakeOperation::kLookup:
      return KVTransferDirection::kRoute;
    case MooncakeOperation::kMaterialize:
      return KVTransferDirection::kRestore;
  }
  return KVTransferDirection::kRoute;
}

KVTransferDirection DirectionFor(LMCacheOperation operation) {
  switch (operation) {
    case LMCacheOperation::kOffload:
      return KVTransferDirection::kOffload;
    case LMCacheOperation::kRestore:
      return KVTransferDirection::kRestore;
    case LMCacheOperation::kEvict:
      return KVTransferDirection::kEvict;
  }
  return KVTransferDirection::kRestore;
}

Result<Entry> FromMooncake(const MooncakeEvent& event) {
  return LowerTransportOp("mooncake", "mooncake_op", event.operation, event.span);
}

Result<Entry> FromLMCache(const LMCacheEvent& event) {
  return LowerTransportOp("lmcache", "lmcache_op", event.operation, event.span);
}

}  // namespace kvgov
