#include "kvgov/index/residency_index.h"

#include <algorithm>
#include <mutex>

namespace kvgov::index {
namespace {

constexpr uint16_t TierBit(ResidencyTier tier) {
  return static_cast<uint16_t>(1u << static_cast<unsigned>(tier));
}

// Position of a tier in kIndexedTiers; tiers the index does not report
// separately (remote, cxl, ...) are counted as unknown.
size_t TierSlot(ResidencyTier tier) {
  for (size_t i = 0; i < kIndexedTiers.size(); ++i) {
    if (kIndexedTiers[i] == tier) return i;
  }
  return kIndexedTiers.size() - 1;
}

// The hottest indexed tier in a mask; unknown when only unknown tiers remain.
size_t BestTierSlot(uint16_t tiers) {
  for (size_t i = 0; i + 1 < kIndexedTiers.size(); ++i) {
    if (tiers & TierBit(kIndexedTiers[i])) return i;
  }
  return kIndexedTiers.size() - 1;
}

}  // namespace

std::string_view ToString(WorkerState state) {
  return state == WorkerState::kLive ? "live" : "stale";
}

struct ResidencyIndex::WorkerSlot {
  uint32_t number = 0;
  std::string id;
  std::string model;
  int64_t block_size = 0;
  WorkerState state = WorkerState::kLive;
  // Engine hash -> kvgov key, for parents and removals.
  std::unordered_map<EngineRef, BlockKey, EngineRefHash> engine_keys;
  // kvgov key -> tiers it is resident in on this worker.
  std::unordered_map<BlockKey, uint16_t> resident;
  std::array<uint64_t, kIndexedTiers.size()> blocks{};
};

size_t ResidencyIndex::EngineRefHash::operator()(const EngineRef& ref) const {
  // Engine hashes are already uniformly distributed; fold the group in.
  return static_cast<size_t>(ref.hash ^ (static_cast<uint64_t>(ref.group_idx) * 0x9e3779b97f4a7c15));
}

ResidencyIndex::ResidencyIndex(BlockKeyHasher hasher) : hasher_(hasher) {}
ResidencyIndex::~ResidencyIndex() = default;

ResidencyIndex::WorkerSlot* ResidencyIndex::FindLocked(std::string_view worker) const {
  auto it = worker_numbers_.find(std::string(worker));
  return it == worker_numbers_.end() ? nullptr : workers_[it->second].get();
}

Status ResidencyIndex::AddWorker(std::string_view worker, std::string_view model,
                                 int64_t block_size) {
  if (worker.empty()) return Status::InvalidArgument("worker: required, got empty");
  if (model.empty()) return Status::InvalidArgument("model: required, got empty");
  if (block_size <= 0) {
    return Status::InvalidArgument("block_size: must be > 0, got " + std::to_string(block_size));
  }
  std::unique_lock lock(mu_);
  if (FindLocked(worker) != nullptr) {
    return Status::AlreadyExists("worker '" + std::string(worker) + "' is already registered");
  }
  auto slot = std::make_unique<WorkerSlot>();
  slot->number = static_cast<uint32_t>(workers_.size());
  slot->id = std::string(worker);
  slot->model = std::string(model);
  slot->block_size = block_size;
  worker_numbers_.emplace(slot->id, slot->number);
  workers_.push_back(std::move(slot));
  return Status::Ok();
}

Status ResidencyIndex::RemoveWorker(std::string_view worker) {
  std::unique_lock lock(mu_);
  WorkerSlot* slot = FindLocked(worker);
  if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
  ClearLocked(*slot);
  worker_numbers_.erase(slot->id);
  workers_[slot->number].reset();
  return Status::Ok();
}

Status ResidencyIndex::ClearWorker(std::string_view worker) {
  std::unique_lock lock(mu_);
  WorkerSlot* slot = FindLocked(worker);
  if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
  ClearLocked(*slot);
  return Status::Ok();
}

Status ResidencyIndex::SetState(std::string_view worker, WorkerState state) {
  std::unique_lock lock(mu_);
  WorkerSlot* slot = FindLocked(worker);
  if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
  slot->state = state;
  return Status::Ok();
}

void ResidencyIndex::ClearLocked(WorkerSlot& slot) {
  for (const auto& [key, tiers] : slot.resident) {
    auto it = holders_.find(key);
    if (it == holders_.end()) continue;
    std::erase(it->second, slot.number);
    if (it->second.empty()) holders_.erase(it);
  }
  slot.resident.clear();
  slot.engine_keys.clear();
  slot.blocks.fill(0);
}

void ResidencyIndex::AddTierLocked(WorkerSlot& slot, BlockKey key, ResidencyTier tier) {
  auto [it, inserted] = slot.resident.try_emplace(key, uint16_t{0});
  if (inserted) holders_[key].push_back(slot.number);
  if (it->second & TierBit(tier)) return;
  it->second |= TierBit(tier);
  ++slot.blocks[TierSlot(tier)];
}

bool ResidencyIndex::RemoveTierLocked(WorkerSlot& slot, BlockKey key, ResidencyTier tier) {
  auto it = slot.resident.find(key);
  if (it == slot.resident.end() || !(it->second & TierBit(tier))) return false;
  it->second &= static_cast<uint16_t>(~TierBit(tier));
  --slot.blocks[TierSlot(tier)];
  if (it->second == 0) {
    slot.resident.erase(it);
    auto holder = holders_.find(key);
    if (holder != holders_.end()) {
      std::erase(holder->second, slot.number);
      if (holder->second.empty()) holders_.erase(holder);
    }
  }
  return true;
}

ApplyResult ResidencyIndex::ApplyStoredLocked(WorkerSlot& slot, const BlockStored& stored) {
  ApplyResult result;
  const ResidencyTier tier = TierForMedium(stored.medium);
  BlockKey parent = 0;
  if (stored.parent_block_hash.has_value()) {
    auto it = slot.engine_keys.find(EngineRef{*stored.parent_block_hash, stored.group_idx});
    if (it == slot.engine_keys.end()) {
      // Without the parent's key the chain cannot be keyed; crediting these
      // blocks under a guessed parent could match the wrong prefix.
      result.orphan_blocks = stored.block_hashes.size();
      return result;
    }
    parent = it->second;
  } else {
    parent = hasher_.Root(ChainNamespace{slot.model, stored.lora_name, stored.group_idx});
  }
  const size_t block_size = static_cast<size_t>(slot.block_size);
  std::span<const int64_t> tokens(stored.token_ids);
  for (size_t i = 0; i < stored.block_hashes.size(); ++i) {
    // Both arms string_view: a "" arm would make the result a temporary
    // std::string and leave `extra` dangling.
    std::string_view extra =
        i < stored.extra_keys.size() ? std::string_view(stored.extra_keys[i]) : std::string_view();
    const BlockKey key = hasher_.Next(parent, tokens.subspan(i * block_size, block_size), extra);
    slot.engine_keys[EngineRef{stored.block_hashes[i], stored.group_idx}] = key;
    AddTierLocked(slot, key, tier);
    parent = key;
  }
  result.blocks_stored = stored.block_hashes.size();
  if (tier == ResidencyTier::kUnknown) result.unknown_medium = stored.block_hashes.size();
  return result;
}

ApplyResult ResidencyIndex::ApplyRemovedLocked(WorkerSlot& slot, const BlockRemoved& removed) {
  ApplyResult result;
  const ResidencyTier tier = TierForMedium(removed.medium);
  for (EngineHash hash : removed.block_hashes) {
    auto it = slot.engine_keys.find(EngineRef{hash, removed.group_idx});
    if (it == slot.engine_keys.end() || !RemoveTierLocked(slot, it->second, tier)) {
      ++result.unknown_removals;
      continue;
    }
    ++result.blocks_removed;
    // Keep the engine mapping while another tier still holds the block: a
    // later removal from that tier, or a child's parent lookup, needs it.
    if (!slot.resident.contains(it->second)) slot.engine_keys.erase(it);
  }
  return result;
}

Result<ApplyResult> ResidencyIndex::Apply(std::string_view worker, const EngineEvent& event) {
  std::unique_lock lock(mu_);
  WorkerSlot* slot = FindLocked(worker);
  if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
  if (const auto* stored = std::get_if<BlockStored>(&event)) {
    if (stored->block_size != slot->block_size) {
      return Status::InvalidArgument("block_size: worker '" + slot->id + "' uses " +
                                     std::to_string(slot->block_size) + ", event has " +
                                     std::to_string(stored->block_size));
    }
    if (stored->token_ids.size() !=
        stored->block_hashes.size() * static_cast<size_t>(slot->block_size)) {
      return Status::InvalidArgument(
          "token_ids: " + std::to_string(stored->token_ids.size()) + " tokens for " +
          std::to_string(stored->block_hashes.size()) + " blocks of " +
          std::to_string(slot->block_size));
    }
    return ApplyStoredLocked(*slot, *stored);
  }
  if (const auto* removed = std::get_if<BlockRemoved>(&event)) {
    return ApplyRemovedLocked(*slot, *removed);
  }
  ClearLocked(*slot);
  return ApplyResult{};
}

Status ResidencyIndex::AddBlocks(std::string_view worker, std::span<const BlockKey> keys,
                                 ResidencyTier tier) {
  std::unique_lock lock(mu_);
  WorkerSlot* slot = FindLocked(worker);
  if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
  for (BlockKey key : keys) AddTierLocked(*slot, key, tier);
  return Status::Ok();
}

Status ResidencyIndex::RemoveBlocks(std::string_view worker, std::span<const BlockKey> keys,
                                    ResidencyTier tier) {
  std::unique_lock lock(mu_);
  WorkerSlot* slot = FindLocked(worker);
  if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
  for (BlockKey key : keys) RemoveTierLocked(*slot, key, tier);
  return Status::Ok();
}

Result<std::vector<BlockKey>> ResidencyIndex::KeysForEngineHashes(
    std::string_view worker, std::span<const EngineHash> hashes, int64_t group_idx) const {
  std::shared_lock lock(mu_);
  WorkerSlot* slot = FindLocked(worker);
  if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
  std::vector<BlockKey> keys;
  keys.reserve(hashes.size());
  for (EngineHash hash : hashes) {
    auto it = slot->engine_keys.find(EngineRef{hash, group_idx});
    if (it == slot->engine_keys.end()) {
      return Status::NotFound("worker '" + slot->id + "' holds no block with engine hash " +
                              std::to_string(hash));
    }
    keys.push_back(it->second);
  }
  return keys;
}

std::vector<WorkerResidency> ResidencyIndex::Workers() const {
  std::shared_lock lock(mu_);
  std::vector<WorkerResidency> out;
  for (const auto& slot : workers_) {
    if (!slot) continue;
    out.push_back({slot->id, slot->model, slot->block_size, slot->state, slot->blocks});
  }
  std::sort(out.begin(), out.end(),
            [](const WorkerResidency& a, const WorkerResidency& b) { return a.id < b.id; });
  return out;
}

std::optional<WorkerResidency> ResidencyIndex::Worker(std::string_view worker) const {
  std::shared_lock lock(mu_);
  WorkerSlot* slot = FindLocked(worker);
  if (slot == nullptr) return std::nullopt;
  return WorkerResidency{slot->id, slot->model, slot->block_size, slot->state, slot->blocks};
}

std::vector<WorkerOverlap> ResidencyIndex::Overlap(std::span<const BlockKey> chain) const {
  std::shared_lock lock(mu_);
  std::vector<WorkerOverlap> out;
  if (chain.empty()) return out;
  auto first = holders_.find(chain[0]);
  if (first == holders_.end()) return out;

  // Walk the chain once per candidate: O(depth x candidates), stopping at
  // each worker's first missing block.
  for (uint32_t number : first->second) {
    const WorkerSlot& slot = *workers_[number];
    if (slot.state != WorkerState::kLive) continue;
    WorkerOverlap overlap;
    overlap.worker = slot.id;
    for (BlockKey key : chain) {
      auto it = slot.resident.find(key);
      if (it == slot.resident.end()) break;
      const size_t tier = BestTierSlot(it->second);
      ++overlap.blocks;
      ++overlap.by_tier[tier];
      overlap.best_tier.push_back(static_cast<uint8_t>(tier));
    }
    out.push_back(std::move(overlap));
  }
  std::sort(out.begin(), out.end(),
            [](const WorkerOverlap& a, const WorkerOverlap& b) { return a.worker < b.worker; });
  return out;
}

uint64_t ResidencyIndex::ResidentPairs() const {
  std::shared_lock lock(mu_);
  uint64_t pairs = 0;
  for (const auto& slot : workers_) {
    if (slot) pairs += slot->resident.size();
  }
  return pairs;
}

}  // namespace kvgov::index
