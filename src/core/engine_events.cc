#include "kvgov/core/engine_events.h"

#include <algorithm>
#include <array>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "core/transfer_entry.h"
#include "kvgov/core/hex.h"
#include "kvgov/core/json_string.h"
#include "kvgov/core/kv_transfer.h"

namespace kvgov {
namespace {

char AsciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

// The span digest's spelling (WriteHex64): the same hash always names the
// same span, whatever engine or encoding it came from.
std::string HashDigest(EngineHash hash) { return Hex64(hash); }

Entry Lower(const KVTransfer& transfer) {
  // Every report built here has a non-empty digest and non-negative counts,
  // so FromKVTransfer cannot refuse it; the fallback only keeps this total.
  Result<Entry> entry = FromKVTransfer(transfer);
  if (entry.ok()) return *std::move(entry);
  return core_internal::BuildTransferEntry(transfer);
}

void LabelEntry(Entry& entry, std::string_view worker, const int64_t* group_idx) {
  entry.labels["worker"] = std::string(worker);
  if (group_idx != nullptr) entry.labels["group_idx"] = std::to_string(*group_idx);
}

}  // namespace

ResidencyTier TierForMedium(std::string_view medium, std::string_view locality) {
  struct Row {
    std::string_view medium;
    ResidencyTier tier;
  };
  // "" is vLLM's and SGLang's GPU default (the field predates offload). An
  // unrecognised medium is never guessed as hbm: over-crediting a CPU or
  // remote tier as GPU residency is exactly the routing bug to avoid.
  static constexpr std::array<Row, 14> kTable = {{
      {"", ResidencyTier::kHBM},
      {"gpu", ResidencyTier::kHBM},
      {"l1", ResidencyTier::kHBM},
      {"cpu", ResidencyTier::kDRAM},
      {"cpu_pinned", ResidencyTier::kDRAM},
      {"cpu_tier1", ResidencyTier::kDRAM},
      {"l2", ResidencyTier::kDRAM},
      {"cpu_tier2", ResidencyTier::kDisk},
      {"disk", ResidencyTier::kDisk},
      {"fs", ResidencyTier::kDisk},
      {"storage", ResidencyTier::kDisk},
      {"l3", ResidencyTier::kDisk},
      {"obj", ResidencyTier::kRemote},
      {"external", ResidencyTier::kRemote},
  }};
  ResidencyTier tier = ResidencyTier::kUnknown;
  for (const Row& row : kTable) {
    if (EqualsIgnoreCase(row.medium, medium)) {
      tier = row.tier;
      break;
    }
  }
  if (locality.empty() || EqualsIgnoreCase(locality, "local")) return tier;
  // A REMOTE block is reachable from this worker but not held by it: a
  // shared file system or a peer's pool, never this worker's HBM.
  if (EqualsIgnoreCase(locality, "remote") && tier != ResidencyTier::kUnknown) {
    return ResidencyTier::kRemote;
  }
  return ResidencyTier::kUnknown;
}

std::string FirstBlockExtraKey(std::string_view lora_name, std::string_view cache_salt) {
  if (lora_name.empty() && cache_salt.empty()) return "";
  std::string out = "[";
  if (!lora_name.empty()) AppendJsonString(out, lora_name);
  if (!cache_salt.empty()) {
    if (!lora_name.empty()) out += ",";
    AppendJsonString(out, cache_salt);
  }
  out += "]";
  return out;
}

Status CheckTokenIds(std::span<const int64_t> token_ids, std::string_view field) {
  for (size_t i = 0; i < token_ids.size(); ++i) {
    if (token_ids[i] >= 0 && token_ids[i] <= kMaxTokenId) continue;
    return Status::InvalidArgument(std::string(field) + "[" + std::to_string(i) +
                                   "]: want a token id in 0.." + std::to_string(kMaxTokenId) +
                                   ", got " + std::to_string(token_ids[i]));
  }
  return Status::Ok();
}

std::string_view EngineEventTypeName(const EngineEvent& event) {
  return std::visit(
      [](const auto& e) -> std::string_view {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, BlockStored>) {
          return "BlockStored";
        } else if constexpr (std::is_same_v<T, BlockRemoved>) {
          return "BlockRemoved";
        } else {
          return "AllBlocksCleared";
        }
      },
      event);
}

void LowerEngineEventEach(const EngineEvent& event, std::string_view worker, int64_t block_size,
                          const std::function<void(const Entry&)>& sink) {
  // A record that carries its own block size (BlockStored from vLLM and
  // SGLang) is the authority; the caller's value covers records that do not
  // (BlockRemoved, AllBlocksCleared, a Mooncake store without block_size).
  const int64_t default_tokens = std::max<int64_t>(block_size, 0);
  // Every block's entry is the first block's with its own digest: the
  // digest enters only entry.id.digest (BuildTransferEntry), and no
  // validation FromKVTransfer runs depends on which hash it is.
  auto each_block = [&](std::span<const EngineHash> hashes, KVTransfer& transfer,
                        const int64_t* group_idx) {
    if (hashes.empty()) return;
    transfer.span.span_digest = HashDigest(hashes.front());
    transfer.span.owner = std::string(worker);
    Entry entry = Lower(transfer);
    LabelEntry(entry, worker, group_idx);
    sink(entry);
    for (EngineHash hash : hashes.subspan(1)) {
      WriteHex64(hash, entry.id.digest);
      sink(entry);
    }
  };
  if (const auto* stored = std::get_if<BlockStored>(&event)) {
    KVTransfer transfer;
    transfer.direction = KVTransferDirection::kStore;
    transfer.span.tokens = stored->block_size > 0 ? stored->block_size : default_tokens;
    transfer.span.to_tier = TierForMedium(stored->medium, stored->locality);
    each_block(stored->block_hashes, transfer, &stored->group_idx);
  } else if (const auto* removed = std::get_if<BlockRemoved>(&event)) {
    KVTransfer transfer;
    transfer.direction = KVTransferDirection::kEvict;
    transfer.span.tokens = default_tokens;
    // The block left this tier; it now lives nowhere we know of, so
    // to_tier (and with it the residency) stays unknown.
    transfer.span.from_tier = TierForMedium(removed->medium, removed->locality);
    each_block(removed->block_hashes, transfer, &removed->group_idx);
  } else {
    // One entry stands for every block of every group on the worker: "*" is
    // never a hex digest, so it cannot collide with a block's span.
    KVTransfer transfer;
    transfer.direction = KVTransferDirection::kEvict;
    transfer.span.span_digest = "*";
    transfer.span.owner = std::string(worker);
    Entry entry = Lower(transfer);
    LabelEntry(entry, worker, nullptr);
    sink(entry);
  }
}

std::vector<Entry> LowerEngineEvent(const EngineEvent& event, std::string_view worker,
                                    int64_t block_size) {
  std::vector<Entry> entries;
  if (const auto* stored = std::get_if<BlockStored>(&event)) {
    entries.reserve(stored->block_hashes.size());
  } else if (const auto* removed = std::get_if<BlockRemoved>(&event)) {
    entries.reserve(removed->block_hashes.size());
  }
  LowerEngineEventEach(event, worker, block_size,
                       [&entries](const Entry& entry) { entries.push_back(entry); });
  return entries;
}

}  // namespace kvgov
