#include "kvgov/index/residency_index.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>

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

// ---------------------------------------------------------------------------
// Snapshots (docs/formats/index-snapshot.md).

namespace {

constexpr std::string_view kSnapshotMagic = "kvgovidx";
constexpr uint32_t kSnapshotVersion = 1;
constexpr size_t kSnapshotFixedHeader = 37;  // magic .. block_size
constexpr size_t kSnapshotChecksumBytes = 4;
// A one-byte model, no records: 37 + 1 + 1 + 1 + 1 + 4.
constexpr size_t kSnapshotMinBytes = kSnapshotFixedHeader + 4 + kSnapshotChecksumBytes;
constexpr size_t kMinKeyRecordBytes = 8 + 1 + 1;
constexpr size_t kMinEngineRefBytes = 8 + 1;
constexpr std::string_view kKeyProbeNamespace = "kvgov.index_snapshot.probe";

// Format v1 defines tier bit i as ResidencyTier value i. Pin the values so
// that reordering the enum breaks the build, not every stored snapshot.
static_assert(static_cast<int>(ResidencyTier::kUnknown) == 0);
static_assert(static_cast<int>(ResidencyTier::kHBM) == 1);
static_assert(static_cast<int>(ResidencyTier::kDRAM) == 2);
static_assert(static_cast<int>(ResidencyTier::kNumaFar) == 3);
static_assert(static_cast<int>(ResidencyTier::kCXL) == 4);
static_assert(static_cast<int>(ResidencyTier::kDisk) == 5);
static_assert(static_cast<int>(ResidencyTier::kRemote) == 6);
static_assert(static_cast<int>(ResidencyTier::kProvider) == 7);
static_assert(static_cast<int>(ResidencyTier::kRecompute) == 8);
constexpr uint16_t kSnapshotTierBits = 0x1ff;
constexpr unsigned kSnapshotTierCount = 9;

// CRC-32C (Castagnoli), slice-by-8: about 6x SHA-256's speed here, and a
// CRC catches every burst of up to 32 bits, which a hash only makes likely.
using CrcTables = std::array<std::array<uint32_t, 256>, 8>;

constexpr CrcTables MakeCrcTables() {
  CrcTables tables{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82f63b78u : 0u);
    tables[0][i] = crc;
  }
  for (size_t t = 1; t < tables.size(); ++t) {
    for (size_t i = 0; i < 256; ++i) {
      const uint32_t prev = tables[t - 1][i];
      tables[t][i] = (prev >> 8) ^ tables[0][prev & 0xffu];
    }
  }
  return tables;
}
constexpr CrcTables kCrcTables = MakeCrcTables();

uint32_t Crc32c(std::string_view data) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t n = data.size();
  uint32_t crc = 0xffffffffu;
  while (n >= 8) {
    // Assembled byte by byte, so the host's byte order does not matter; the
    // compiler turns this into one load on little-endian hosts.
    uint64_t word = 0;
    for (int i = 7; i >= 0; --i) word = (word << 8) | p[i];
    word ^= crc;
    crc = kCrcTables[7][word & 0xff] ^ kCrcTables[6][(word >> 8) & 0xff] ^
          kCrcTables[5][(word >> 16) & 0xff] ^ kCrcTables[4][(word >> 24) & 0xff] ^
          kCrcTables[3][(word >> 32) & 0xff] ^ kCrcTables[2][(word >> 40) & 0xff] ^
          kCrcTables[1][(word >> 48) & 0xff] ^ kCrcTables[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = kCrcTables[0][(crc ^ *p++) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

size_t VarintSize(uint64_t value) {
  size_t n = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++n;
  }
  return n;
}

uint64_t ZigZag(int64_t value) {
  return (static_cast<uint64_t>(value) << 1) ^ static_cast<uint64_t>(value >> 63);
}

int64_t UnZigZag(uint64_t value) { return static_cast<int64_t>((value >> 1) ^ (~(value & 1) + 1)); }

// Appends to a string reserved to the exact size up front.
class SnapshotWriter {
 public:
  explicit SnapshotWriter(std::string& out) : out_(out) {}
  void Bytes(std::string_view bytes) { out_.append(bytes); }
  void U8(uint8_t value) { out_.push_back(static_cast<char>(value)); }
  void U32(uint32_t value) {
    for (int shift = 24; shift >= 0; shift -= 8) U8(static_cast<uint8_t>(value >> shift));
  }
  void U64(uint64_t value) {
    char bytes[8];
    for (int i = 7; i >= 0; --i) {
      bytes[i] = static_cast<char>(value & 0xff);
      value >>= 8;
    }
    out_.append(bytes, sizeof(bytes));
  }
  void Varint(uint64_t value) {
    while (value >= 0x80) {
      U8(static_cast<uint8_t>(value | 0x80));
      value >>= 7;
    }
    U8(static_cast<uint8_t>(value));
  }

 private:
  std::string& out_;
};

// Reads the body of a snapshot whose length and checksum were verified;
// every read is still bounds-checked, since a writer bug must not become an
// out-of-bounds read. Errors name the offset where the field starts.
class SnapshotReader {
 public:
  // `end` is where the checksum starts.
  SnapshotReader(std::string_view bytes, size_t offset, size_t end)
      : bytes_(bytes), offset_(offset), end_(end) {}

  size_t offset() const { return offset_; }
  size_t remaining() const { return end_ - offset_; }

  Status U8(std::string_view field, uint8_t& out) {
    KVGOV_RETURN_IF_ERROR(Need(field, 1));
    out = static_cast<uint8_t>(bytes_[offset_++]);
    return Status::Ok();
  }
  Status U64(std::string_view field, uint64_t& out) {
    KVGOV_RETURN_IF_ERROR(Need(field, 8));
    out = 0;
    for (size_t i = 0; i < 8; ++i) out = (out << 8) | static_cast<uint8_t>(bytes_[offset_ + i]);
    offset_ += 8;
    return Status::Ok();
  }
  Status Varint(std::string_view field, uint64_t& out) {
    const size_t start = offset_;
    out = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
      if (offset_ >= end_) {
        return Error(start, "truncated: varint " + std::string(field) + " runs into the checksum");
      }
      const auto byte = static_cast<uint8_t>(bytes_[offset_++]);
      // The tenth byte holds bit 63 only.
      if (shift == 63 && byte > 1) break;
      out |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return Status::Ok();
    }
    return Error(start, "varint " + std::string(field) + " is longer than 64 bits");
  }
  Status Bytes(std::string_view field, size_t n, std::string_view& out) {
    KVGOV_RETURN_IF_ERROR(Need(field, n));
    out = bytes_.substr(offset_, n);
    offset_ += n;
    return Status::Ok();
  }

  static Status Error(size_t offset, std::string_view what) {
    return Status::Corruption("index snapshot: byte " + std::to_string(offset) + ": " +
                              std::string(what));
  }

 private:
  Status Need(std::string_view field, size_t n) const {
    if (remaining() >= n) return Status::Ok();
    return Error(offset_, "truncated: " + std::string(field) + " needs " + std::to_string(n) +
                              " bytes, " + std::to_string(remaining()) +
                              " remain before the checksum");
  }

  std::string_view bytes_;
  size_t offset_;
  size_t end_;
};

std::string Hex(uint64_t value) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out = "0x";
  bool started = false;
  for (int shift = 60; shift >= 0; shift -= 4) {
    const unsigned digit = (value >> shift) & 0xf;
    if (digit != 0 || started || shift == 0) {
      out.push_back(kDigits[digit]);
      started = true;
    }
  }
  return out;
}

uint64_t KeyProbe(const BlockKeyHasher& hasher) {
  return hasher.Root(ChainNamespace{std::string(kKeyProbeNamespace), "", 0});
}

}  // namespace

Result<std::string> ResidencyIndex::SnapshotWorker(std::string_view worker) const {
  struct KeyTiers {
    BlockKey key;
    uint16_t tiers;
  };
  struct KeyRef {
    BlockKey key;
    int64_t group_idx;
    EngineHash hash;
  };
  std::string model;
  int64_t block_size = 0;
  WorkerState state = WorkerState::kLive;
  std::vector<KeyTiers> keys;
  std::vector<KeyRef> refs;
  {
    // Copy only: writers wait for this, not for the sort and the encoding.
    std::shared_lock lock(mu_);
    const WorkerSlot* slot = FindLocked(worker);
    if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
    model = slot->model;
    block_size = slot->block_size;
    state = slot->state;
    // Bucket by bucket rather than along the node list: each bucket's first
    // node is an independent load the CPU can overlap with the next ones,
    // where the list is one dependent cache miss per node (about twice as
    // fast at a million blocks, and this is the part writers wait for).
    keys.reserve(slot->resident.size());
    for (size_t b = 0; b < slot->resident.bucket_count(); ++b) {
      for (auto it = slot->resident.begin(b); it != slot->resident.end(b); ++it) {
        keys.push_back({it->first, it->second});
      }
    }
    refs.reserve(slot->engine_keys.size());
    for (size_t b = 0; b < slot->engine_keys.bucket_count(); ++b) {
      for (auto it = slot->engine_keys.begin(b); it != slot->engine_keys.end(b); ++it) {
        refs.push_back({it->second, it->first.group_idx, it->first.hash});
      }
    }
  }
  // The canonical order of the format: equal residency, equal bytes.
  std::sort(keys.begin(), keys.end(),
            [](const KeyTiers& a, const KeyTiers& b) { return a.key < b.key; });
  std::sort(refs.begin(), refs.end(), [](const KeyRef& a, const KeyRef& b) {
    if (a.key != b.key) return a.key < b.key;
    if (a.group_idx != b.group_idx) return a.group_idx < b.group_idx;
    return a.hash < b.hash;
  });

  // Records are the union of resident keys and keys engine refs name; a
  // key only refs name is written with no tiers. Walked twice: once to size
  // the output exactly, once to write it.
  auto for_each_record = [&](auto&& visit) {
    size_t k = 0;
    size_t r = 0;
    while (k < keys.size() || r < refs.size()) {
      BlockKey key = 0;
      uint16_t tiers = 0;
      if (r == refs.size() || (k < keys.size() && keys[k].key <= refs[r].key)) {
        key = keys[k].key;
        tiers = keys[k].tiers;
        ++k;
      } else {
        key = refs[r].key;
      }
      const size_t first_ref = r;
      while (r < refs.size() && refs[r].key == key) ++r;
      visit(key, tiers, std::span<const KeyRef>(refs.data() + first_ref, r - first_ref));
    }
  };
  uint64_t key_count = 0;
  size_t size = kSnapshotFixedHeader + VarintSize(model.size()) + model.size() +
                VarintSize(refs.size()) + kSnapshotChecksumBytes;
  for_each_record([&](BlockKey, uint16_t tiers, std::span<const KeyRef> key_refs) {
    ++key_count;
    size += 8 + VarintSize(tiers) + VarintSize(key_refs.size());
    for (const KeyRef& ref : key_refs) size += 8 + VarintSize(ZigZag(ref.group_idx));
  });
  size += VarintSize(key_count);

  std::string out;
  out.reserve(size);
  SnapshotWriter writer(out);
  writer.Bytes(kSnapshotMagic);
  writer.U32(kSnapshotVersion);
  writer.U64(size);
  writer.U64(KeyProbe(hasher_));
  writer.U8(state == WorkerState::kLive ? 0 : 1);
  writer.U64(static_cast<uint64_t>(block_size));
  writer.Varint(model.size());
  writer.Bytes(model);
  writer.Varint(key_count);
  writer.Varint(refs.size());
  for_each_record([&](BlockKey key, uint16_t tiers, std::span<const KeyRef> key_refs) {
    writer.U64(key);
    writer.Varint(tiers);
    writer.Varint(key_refs.size());
    for (const KeyRef& ref : key_refs) {
      writer.U64(ref.hash);
      writer.Varint(ZigZag(ref.group_idx));
    }
  });
  writer.U32(Crc32c(out));
  return out;
}

Status ResidencyIndex::DecodeSnapshot(std::string_view snapshot, WorkerSlot& out) const {
  using Reader = SnapshotReader;
  const size_t size = snapshot.size();
  // The fixed prefix, each field checked as soon as it is present, so that a
  // truncated value says so instead of failing the checksum.
  if (size < 8) {
    return Reader::Error(size,
                         "truncated: " + std::to_string(size) + " bytes, the magic alone needs 8");
  }
  if (snapshot.substr(0, 8) != kSnapshotMagic) {
    return Reader::Error(0, "wrong magic: not an index snapshot");
  }
  if (size < 12) {
    return Reader::Error(
        size, "truncated: " + std::to_string(size) + " bytes, the version needs 4 from byte 8");
  }
  uint32_t version = 0;
  for (size_t i = 8; i < 12; ++i) version = (version << 8) | static_cast<uint8_t>(snapshot[i]);
  if (version != kSnapshotVersion) {
    return Reader::Error(8, "unsupported version " + std::to_string(version) +
                                " (this build reads " + std::to_string(kSnapshotVersion) + ")");
  }
  if (size < 20) {
    return Reader::Error(
        size, "truncated: " + std::to_string(size) + " bytes, the length needs 8 from byte 12");
  }
  uint64_t length = 0;
  for (size_t i = 12; i < 20; ++i) length = (length << 8) | static_cast<uint8_t>(snapshot[i]);
  if (length < kSnapshotMinBytes) {
    return Reader::Error(12, "length " + std::to_string(length) +
                                 " is below the smallest snapshot (" +
                                 std::to_string(kSnapshotMinBytes) + " bytes)");
  }
  if (size < length) {
    return Reader::Error(size, "truncated: the snapshot declares " + std::to_string(length) +
                                   " bytes, " + std::to_string(size) + " are present");
  }
  if (size > length) {
    return Reader::Error(static_cast<size_t>(length),
                         std::to_string(size - length) +
                             " unexpected bytes after the declared length " +
                             std::to_string(length));
  }
  const size_t end = size - kSnapshotChecksumBytes;
  uint32_t stored_crc = 0;
  for (size_t i = end; i < size; ++i) {
    stored_crc = (stored_crc << 8) | static_cast<uint8_t>(snapshot[i]);
  }
  const uint32_t crc = Crc32c(snapshot.substr(0, end));
  if (stored_crc != crc) {
    return Reader::Error(end, "checksum mismatch: stored " + Hex(stored_crc) + ", computed " +
                                  Hex(crc) + " over bytes [0, " + std::to_string(end) + ")");
  }

  // The header. Past the checksum every read is still bounds-checked: a
  // writer bug must not become an out-of-bounds read.
  Reader reader(snapshot, 20, end);
  uint64_t probe = 0;
  KVGOV_RETURN_IF_ERROR(reader.U64("key_probe", probe));
  size_t at = reader.offset();
  uint8_t state = 0;
  KVGOV_RETURN_IF_ERROR(reader.U8("state", state));
  if (state > 1) {
    return Reader::Error(at,
                         "state " + std::to_string(state) + " is neither 0 (live) nor 1 (stale)");
  }
  at = reader.offset();
  uint64_t block_size = 0;
  KVGOV_RETURN_IF_ERROR(reader.U64("block_size", block_size));
  if (static_cast<int64_t>(block_size) <= 0) {
    return Reader::Error(
        at, "block_size " + std::to_string(static_cast<int64_t>(block_size)) + " is not positive");
  }
  at = reader.offset();
  uint64_t model_len = 0;
  KVGOV_RETURN_IF_ERROR(reader.Varint("model_len", model_len));
  if (model_len == 0) return Reader::Error(at, "empty model");
  if (model_len > reader.remaining()) {
    return Reader::Error(at, "model length " + std::to_string(model_len) + " runs past the end (" +
                                 std::to_string(reader.remaining()) + " bytes remain)");
  }
  std::string_view model;
  KVGOV_RETURN_IF_ERROR(reader.Bytes("model", static_cast<size_t>(model_len), model));
  const size_t key_count_at = reader.offset();
  uint64_t key_count = 0;
  KVGOV_RETURN_IF_ERROR(reader.Varint("key_count", key_count));
  const size_t ref_count_at = reader.offset();
  uint64_t ref_count = 0;
  KVGOV_RETURN_IF_ERROR(reader.Varint("ref_count", ref_count));
  // Counts are checked against the bytes left before anything is reserved:
  // a corrupt count must fail here, not as a multi-gigabyte allocation.
  if (key_count > reader.remaining() / kMinKeyRecordBytes) {
    return Reader::Error(key_count_at,
                         "key_count " + std::to_string(key_count) +
                             " runs past the end: " + std::to_string(reader.remaining()) +
                             " bytes remain, a key record takes at least " +
                             std::to_string(kMinKeyRecordBytes));
  }
  if (ref_count > reader.remaining() / kMinEngineRefBytes) {
    return Reader::Error(ref_count_at,
                         "ref_count " + std::to_string(ref_count) +
                             " runs past the end: " + std::to_string(reader.remaining()) +
                             " bytes remain, an engine ref takes at least " +
                             std::to_string(kMinEngineRefBytes));
  }

  out.model = std::string(model);
  out.block_size = static_cast<int64_t>(block_size);
  out.state = state == 0 ? WorkerState::kLive : WorkerState::kStale;
  out.engine_keys.clear();
  out.resident.clear();
  out.blocks.fill(0);
  out.resident.reserve(static_cast<size_t>(key_count));
  out.engine_keys.reserve(static_cast<size_t>(ref_count));

  uint64_t refs_seen = 0;
  BlockKey previous_key = 0;
  for (uint64_t i = 0; i < key_count; ++i) {
    const size_t record_at = reader.offset();
    // Built only on error: a label per record would be an allocation each.
    auto record = [i] { return "key record " + std::to_string(i); };
    BlockKey key = 0;
    KVGOV_RETURN_IF_ERROR(reader.U64("key", key));
    if (i > 0 && key <= previous_key) {
      return Reader::Error(record_at, record() + ": key " + Hex(key) +
                                          " is not greater than the previous key " +
                                          Hex(previous_key));
    }
    previous_key = key;
    at = reader.offset();
    uint64_t tiers = 0;
    KVGOV_RETURN_IF_ERROR(reader.Varint("tiers", tiers));
    if ((tiers & ~uint64_t{kSnapshotTierBits}) != 0) {
      return Reader::Error(at, record() + " (key " + Hex(key) + "): tier mask " + Hex(tiers) +
                                   " has bits outside the known tiers " + Hex(kSnapshotTierBits));
    }
    at = reader.offset();
    uint64_t nrefs = 0;
    KVGOV_RETURN_IF_ERROR(reader.Varint("nrefs", nrefs));
    if (tiers == 0 && nrefs == 0) {
      return Reader::Error(record_at,
                           record() + " (key " + Hex(key) + ") has no tier and no engine ref");
    }
    if (nrefs > ref_count - refs_seen) {
      return Reader::Error(at, record() + ": " + std::to_string(nrefs) +
                                   " engine refs exceed the " +
                                   std::to_string(ref_count - refs_seen) + " ref_count leaves");
    }
    if (nrefs > reader.remaining() / kMinEngineRefBytes) {
      return Reader::Error(at, record() + ": " + std::to_string(nrefs) +
                                   " engine refs run past the end (" +
                                   std::to_string(reader.remaining()) + " bytes remain)");
    }
    refs_seen += nrefs;
    if (tiers != 0) {
      out.resident.emplace(key, static_cast<uint16_t>(tiers));
      for (unsigned bit = 0; bit < kSnapshotTierCount; ++bit) {
        if (tiers & (uint64_t{1} << bit)) ++out.blocks[TierSlot(static_cast<ResidencyTier>(bit))];
      }
    }
    bool first_ref = true;
    EngineRef previous_ref{0, 0};
    for (uint64_t r = 0; r < nrefs; ++r) {
      const size_t ref_at = reader.offset();
      EngineRef ref{0, 0};
      uint64_t group = 0;
      KVGOV_RETURN_IF_ERROR(reader.U64("engine hash", ref.hash));
      KVGOV_RETURN_IF_ERROR(reader.Varint("group", group));
      ref.group_idx = UnZigZag(group);
      if (!first_ref &&
          (ref.group_idx < previous_ref.group_idx ||
           (ref.group_idx == previous_ref.group_idx && ref.hash <= previous_ref.hash))) {
        return Reader::Error(ref_at, record() + ": engine ref (hash " + Hex(ref.hash) + ", group " +
                                         std::to_string(ref.group_idx) + ") is out of order");
      }
      first_ref = false;
      previous_ref = ref;
      if (!out.engine_keys.emplace(ref, key).second) {
        return Reader::Error(ref_at, record() + ": engine ref (hash " + Hex(ref.hash) + ", group " +
                                         std::to_string(ref.group_idx) +
                                         ") already names another key");
      }
    }
  }
  if (reader.remaining() != 0) {
    return Reader::Error(reader.offset(), std::to_string(reader.remaining()) +
                                              " unexpected bytes after the last key record");
  }
  if (refs_seen != ref_count) {
    return Reader::Error(ref_count_at, "ref_count " + std::to_string(ref_count) + " but the " +
                                           "records hold " + std::to_string(refs_seen));
  }
  if (const uint64_t ours = KeyProbe(hasher_); probe != ours) {
    return Status::FailedPrecondition(
        "index snapshot: its keys come from another block-key hasher (key probe " + Hex(probe) +
        ", this index's " + Hex(ours) + "); they would match no route request");
  }
  return Status::Ok();
}

Status ResidencyIndex::RestoreWorker(std::string_view worker, std::string_view snapshot) {
  // Decoded outside the lock: building the tables is the slow part, and
  // queries and other workers' events need not wait for it.
  WorkerSlot decoded;
  KVGOV_RETURN_IF_ERROR(DecodeSnapshot(snapshot, decoded));
  {
    std::unique_lock lock(mu_);
    WorkerSlot* slot = FindLocked(worker);
    if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
    if (decoded.model != slot->model || decoded.block_size != slot->block_size) {
      return Status::FailedPrecondition("index snapshot is of model '" + decoded.model +
                                        "' with block size " + std::to_string(decoded.block_size) +
                                        "; worker '" + slot->id + "' is registered with model '" +
                                        slot->model + "' and block size " +
                                        std::to_string(slot->block_size));
    }
    // Only keys that enter or leave the worker touch holders_: a restore
    // over similar state (a re-sync) then leaves most holder lists alone,
    // and the lock is held for lookups rather than list churn.
    std::vector<BlockKey> entering;
    for (const auto& [key, tiers] : decoded.resident) {
      if (!slot->resident.contains(key)) entering.push_back(key);
    }
    for (const auto& [key, tiers] : slot->resident) {
      if (decoded.resident.contains(key)) continue;
      auto it = holders_.find(key);
      if (it == holders_.end()) continue;
      std::erase(it->second, slot->number);
      if (it->second.empty()) holders_.erase(it);
    }
    // One rehash up front instead of several while the keys go in.
    holders_.reserve(holders_.size() + entering.size());
    for (BlockKey key : entering) holders_[key].push_back(slot->number);
    slot->resident.swap(decoded.resident);
    slot->engine_keys.swap(decoded.engine_keys);
    slot->blocks = decoded.blocks;
    slot->state = decoded.state;
  }
  // `decoded` now holds the worker's old tables; they are freed here, after
  // the lock is released.
  return Status::Ok();
}

}  // namespace kvgov::index
