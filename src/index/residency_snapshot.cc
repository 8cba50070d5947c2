// The residency index's snapshots of one worker: the format of
// docs/formats/index-snapshot.md, written from and restored into a worker's
// slot (worker_slot.h) under its shard's lock.

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "index/worker_slot.h"
#include "kvgov/core/hex.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/index/worker_capture.h"

namespace kvgov::index {

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
static_assert(kSnapshotTierBits == HolderIndex::kAllTiers, "a holder word keeps every tier");
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

uint64_t KeyProbe(const BlockKeyHasher& hasher) {
  return hasher.Root(ChainNamespace{std::string(kKeyProbeNamespace), "", 0});
}

}  // namespace

Result<WorkerCapture> ResidencyIndex::CaptureWorker(std::string_view worker) const {
  using KeyTiers = WorkerCapture::KeyTiers;
  using KeyRef = WorkerCapture::KeyRef;
  WorkerCapture capture;
  capture.key_probe = KeyProbe(hasher_);
  const auto [slot, lock] = LockWorker<ReadLock>(worker);
  if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
  capture.model = slot->model;
  capture.block_size = slot->block_size;
  capture.state = slot->state;
  // This is the part writers wait for: the worker's tables walked in order
  // and, unless every key is in one known tier, each key's tiers read from
  // its holder word, in the holder table's order. Fresh buffers each time,
  // written once all over: huge pages spare most of their first-touch
  // faults.
  std::vector<KeyRef>& refs = capture.refs;
  refs.reserve(slot->EngineRefs());
  AdviseHugePages(refs.data(), refs.capacity() * sizeof(KeyRef));
  for (const EngineGroup& group : slot->engine_groups) {
    group.keys.ForEach([&](EngineHash hash, BlockKey key) {
      refs.push_back({key, group.group_idx, hash});
    });
  }
  capture.uniform = slot->UniformTiers();
  if (!capture.uniform.has_value()) {
    std::vector<KeyTiers>& keys = capture.keys;
    keys.reserve(slot->pairs);
    AdviseHugePages(keys.data(), keys.capacity() * sizeof(KeyTiers));
    const HolderIndex& holders = ShardOf(slot->number).holders;
    const uint32_t number =
        slot->number;  // clang 14 (the fuzz tree) captures no structured binding
    auto read_tiers = [&](BlockKey key) {
      if (const uint16_t held = holders.Tiers(key, number); held != 0) {
        keys.push_back({key, held});
      }
    };
    for (const KeyRef& ref :
         InHomeOrder(std::span<const KeyRef>(refs), [](const KeyRef& ref) { return ref.key; })) {
      read_tiers(ref.key);
    }
    slot->loose.ForEach([&](BlockKey key, uint8_t) { read_tiers(key); });
  }
  return capture;
}

Result<std::string> ResidencyIndex::SnapshotWorker(std::string_view worker) const {
  KVGOV_ASSIGN_OR_RETURN(WorkerCapture capture, CaptureWorker(worker));
  return EncodeWorkerSnapshot(std::move(capture));
}

std::string EncodeWorkerSnapshot(WorkerCapture capture) {
  using KeyTiers = WorkerCapture::KeyTiers;
  using KeyRef = WorkerCapture::KeyRef;
  std::vector<KeyRef>& refs = capture.refs;
  std::vector<KeyTiers>& keys = capture.keys;
  const std::string& model = capture.model;
  const std::optional<uint16_t> uniform = capture.uniform;
  // The canonical order of the format: equal residency, equal bytes.
  std::sort(refs.begin(), refs.end(), [](const KeyRef& a, const KeyRef& b) {
    if (a.key != b.key) return a.key < b.key;
    if (a.group_idx != b.group_idx) return a.group_idx < b.group_idx;
    return a.hash < b.hash;
  });
  if (uniform.has_value()) {
    // Each ref names a resident key of its own (UniformTiers says why), so
    // the keys are the refs' keys, already in order: no second sort.
    keys.reserve(refs.size());
    for (const KeyRef& ref : refs) keys.push_back({ref.key, *uniform});
  } else {
    // A key several refs name (or a ref and `loose`) was read more than once.
    std::sort(keys.begin(), keys.end(),
              [](const KeyTiers& a, const KeyTiers& b) { return a.key < b.key; });
    keys.erase(std::unique(keys.begin(), keys.end(),
                           [](const KeyTiers& a, const KeyTiers& b) { return a.key == b.key; }),
               keys.end());
  }

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
  AdviseHugePages(out.data(), size);
  SnapshotWriter writer(out);
  writer.Bytes(kSnapshotMagic);
  writer.U32(kSnapshotVersion);
  writer.U64(size);
  writer.U64(capture.key_probe);
  writer.U8(capture.state == WorkerState::kLive ? 0 : 1);
  writer.U64(static_cast<uint64_t>(capture.block_size));
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

// A snapshot decoded, not yet in the index: the worker's tables (its number
// unset, in no holder list) and each resident key's tiers, in key order.
struct ResidencyIndex::DecodedSnapshot {
  struct KeyTiers {
    BlockKey key;
    uint16_t tiers;
  };
  WorkerSlot slot;
  std::vector<KeyTiers> resident;
  // How engine refs go into the slot's tables: inserted in home order once
  // every record is read (fast), or as each record is read (slow). Only a
  // reader going record by record reports the first problem in a corrupt
  // snapshot (a ref named twice is found at its record), so a restore
  // whose fast decode fails decodes again in place for the error.
  bool refs_in_place = false;
  // The worker's declared pool: group 0's table is sized for it, as
  // AddWorker sized it, so the blocks stored after the restore do not
  // rehash a table just filled to its limit.
  uint64_t pool_blocks = 0;
};

Status ResidencyIndex::DecodeSnapshot(std::string_view snapshot, DecodedSnapshot& decoded) const {
  WorkerSlot& out = decoded.slot;
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
    return Reader::Error(end, "checksum mismatch: stored " + HexNumber(stored_crc) + ", computed " +
                                  HexNumber(crc) + " over bytes [0, " + std::to_string(end) + ")");
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
  out.engine_groups.clear();
  out.loose.Clear();
  out.blocks.fill(0);
  decoded.resident.clear();
  // Sized once for everything: at ten million keys, growing up to size
  // would rehash about as many entries again as the snapshot holds. The
  // refs are reserved in group 0, where they almost always are.
  decoded.resident.reserve(static_cast<size_t>(key_count));
  AdviseHugePages(decoded.resident.data(),
                  decoded.resident.capacity() * sizeof(DecodedSnapshot::KeyTiers));
  struct EngineRef {
    EngineHash hash;
    BlockKey key;
  };
  std::vector<std::pair<int64_t, std::vector<EngineRef>>> refs_by_group;
  std::vector<EngineRef>* group_refs = nullptr;  // refs_by_group's vector of group_refs_idx
  FlatMap<BlockKey>* group_table = nullptr;      // in place: the table of group_refs_idx
  int64_t group_refs_idx = 0;
  if (decoded.refs_in_place) {
    if (ref_count > 0 || decoded.pool_blocks > 0) {
      out.Group(0).keys.Reserve(static_cast<size_t>(std::max(ref_count, decoded.pool_blocks)));
    }
  } else {
    refs_by_group.emplace_back(0, std::vector<EngineRef>());
    std::vector<EngineRef>& refs = refs_by_group.back().second;
    refs.reserve(static_cast<size_t>(ref_count));
    AdviseHugePages(refs.data(), refs.capacity() * sizeof(EngineRef));
  }

  uint64_t refs_seen = 0;
  BlockKey previous_key = 0;
  for (uint64_t i = 0; i < key_count; ++i) {
    const size_t record_at = reader.offset();
    // Built only on error: a label per record would be an allocation each.
    auto record = [i] { return "key record " + std::to_string(i); };
    BlockKey key = 0;
    KVGOV_RETURN_IF_ERROR(reader.U64("key", key));
    if (i > 0 && key <= previous_key) {
      return Reader::Error(record_at, record() + ": key " + HexNumber(key) +
                                          " is not greater than the previous key " +
                                          HexNumber(previous_key));
    }
    previous_key = key;
    at = reader.offset();
    uint64_t tiers = 0;
    KVGOV_RETURN_IF_ERROR(reader.Varint("tiers", tiers));
    if ((tiers & ~uint64_t{kSnapshotTierBits}) != 0) {
      return Reader::Error(at, record() + " (key " + HexNumber(key) + "): tier mask " +
                                   HexNumber(tiers) + " has bits outside the known tiers " +
                                   HexNumber(kSnapshotTierBits));
    }
    at = reader.offset();
    uint64_t nrefs = 0;
    KVGOV_RETURN_IF_ERROR(reader.Varint("nrefs", nrefs));
    if (tiers == 0 && nrefs == 0) {
      return Reader::Error(
          record_at, record() + " (key " + HexNumber(key) + ") has no tier and no engine ref");
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
      decoded.resident.push_back({key, static_cast<uint16_t>(tiers)});
      if (nrefs == 0) out.loose.Insert(key, 0);
      for (unsigned bit = 0; bit < kSnapshotTierCount; ++bit) {
        if (tiers & (uint64_t{1} << bit)) ++out.blocks[TierSlot(static_cast<ResidencyTier>(bit))];
      }
    }
    EngineHash previous_hash = 0;
    int64_t previous_group = 0;
    for (uint64_t r = 0; r < nrefs; ++r) {
      const size_t ref_at = reader.offset();
      EngineHash hash = 0;
      uint64_t group = 0;
      KVGOV_RETURN_IF_ERROR(reader.U64("engine hash", hash));
      KVGOV_RETURN_IF_ERROR(reader.Varint("group", group));
      const int64_t group_idx = UnZigZag(group);
      if (r > 0 &&
          (group_idx < previous_group || (group_idx == previous_group && hash <= previous_hash))) {
        return Reader::Error(ref_at, record() + ": engine ref (hash " + HexNumber(hash) +
                                         ", group " + std::to_string(group_idx) +
                                         ") is out of order");
      }
      previous_hash = hash;
      previous_group = group_idx;
      if (!decoded.refs_in_place) {
        if (group_refs == nullptr || group_idx != group_refs_idx) {
          auto it = std::find_if(refs_by_group.begin(), refs_by_group.end(),
                                 [&](const auto& entry) { return entry.first == group_idx; });
          if (it == refs_by_group.end()) {
            it = refs_by_group.emplace(refs_by_group.end(), group_idx, std::vector<EngineRef>());
          }
          group_refs = &it->second;  // may move the other vectors: re-fetched on change
          group_refs_idx = group_idx;
        }
        group_refs->push_back({hash, key});
        continue;
      }
      if (group_table == nullptr || group_idx != group_refs_idx) {
        group_table =
            &out.Group(group_idx).keys;  // may move the other tables: re-fetched on change
        group_refs_idx = group_idx;
      }
      if (!group_table->Insert(hash, key).second) {
        return Reader::Error(ref_at, record() + ": engine ref (hash " + HexNumber(hash) +
                                         ", group " + std::to_string(group_idx) +
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
  for (const auto& [group_idx, refs] : refs_by_group) {
    if (refs.empty()) continue;
    // A fresh table, sized for every ref before the first goes in.
    FlatMap<BlockKey>& table = out.Group(group_idx).keys;
    table.Reserve(group_idx == 0 ? std::max<size_t>(refs.size(), decoded.pool_blocks)
                                 : refs.size());
    bool duplicate = false;
    for (const EngineRef& ref : InHomeOrder(std::span<const EngineRef>(refs),
                                            [](const EngineRef& ref) { return ref.hash; })) {
      duplicate |= !table.Insert(ref.hash, ref.key).second;
    }
    if (duplicate) {
      return Status::Corruption("index snapshot: an engine ref is named twice");
    }
  }
  if (decoded.refs_in_place && ref_count > 0 && decoded.pool_blocks == 0) {
    out.Group(0).keys.ShrinkToFit();  // a no-op when group 0 has every ref
    out.DropGroupIfEmpty(0);
  }
  if (const uint64_t ours = KeyProbe(hasher_); probe != ours) {
    return Status::FailedPrecondition(
        "index snapshot: its keys come from another block-key hasher (key probe " +
        HexNumber(probe) + ", this index's " + HexNumber(ours) +
        "); they would match no route request");
  }
  return Status::Ok();
}

Status ResidencyIndex::RestoreWorker(std::string_view worker, std::string_view snapshot) {
  // Decoded outside the lock: reading the records is the slow part, and
  // queries and other workers' events need not wait for it.
  uint64_t pool_blocks = 0;
  if (const auto [slot, lock] = LockWorker<ReadLock>(worker); slot != nullptr) {
    pool_blocks = slot->pool_blocks;
  }
  DecodedSnapshot decoded;
  decoded.pool_blocks = pool_blocks;
  if (Status fast = DecodeSnapshot(snapshot, decoded); !fast.ok()) {
    if (fast.code() != StatusCode::kCorruption) return fast;
    decoded = DecodedSnapshot{};
    decoded.refs_in_place = true;
    decoded.pool_blocks = pool_blocks;
    KVGOV_RETURN_IF_ERROR(DecodeSnapshot(snapshot, decoded));
  }
  const std::vector<DecodedSnapshot::KeyTiers>& resident = decoded.resident;
  {
    auto [slot, lock] = LockWorker<WriteLock>(worker);
    if (slot == nullptr) return Status::NotFound("worker '" + std::string(worker) + "'");
    const WorkerSlot& restored = decoded.slot;
    if (restored.model != slot->model || restored.block_size != slot->block_size) {
      return Status::FailedPrecondition("index snapshot is of model '" + restored.model +
                                        "' with block size " + std::to_string(restored.block_size) +
                                        "; worker '" + slot->id + "' is registered with model '" +
                                        slot->model + "' and block size " +
                                        std::to_string(slot->block_size));
    }
    const uint32_t number = slot->number;
    HolderIndex& holders = ShardOf(number).holders;
    if (slot->pairs != 0) {
      // Keys that leave the worker. Only they and keys that enter or change
      // tiers touch the holders: a restore over similar state (a re-sync) then
      // leaves most holder lists alone.
      slot->ForEachKey([&](BlockKey key) {
        const auto at = std::lower_bound(
            resident.begin(), resident.end(), key,
            [](const DecodedSnapshot::KeyTiers& entry, BlockKey k) { return entry.key < k; });
        if (at == resident.end() || at->key != key) holders.Remove(key, number);
      });
    }
    using KeyTiers = DecodedSnapshot::KeyTiers;
    const HomeOrdered<KeyTiers> ordered = InHomeOrder(
        std::span<const KeyTiers>(resident), [](const KeyTiers& entry) { return entry.key; });
    // Room for the keys that no worker holds yet, before the first goes in
    // (InHomeOrder says why): keys others hold take no new slot. Grown by
    // half at least, as inserts grow it: at a restart every worker is
    // restored in turn, and the blocks stored after each want room too.
    size_t entering = 0;
    for (const KeyTiers& entry : ordered) entering += holders.Contains(entry.key) ? 0 : 1;
    holders.MakeRoom(holders.keys() + entering);
    for (const KeyTiers& entry : ordered) {
      const uint16_t had = holders.AddTiers(entry.key, number, entry.tiers);
      if ((had & ~entry.tiers) != 0) holders.RemoveTiers(entry.key, number, had & ~entry.tiers);
    }
    holders.ShrinkIfSparse();
    slot->engine_groups.swap(decoded.slot.engine_groups);
    slot->loose.swap(decoded.slot.loose);
    slot->pairs = resident.size();
    slot->blocks = restored.blocks;
    slot->state = restored.state;
    // Snapshots carry no lineage: every restored ref may be any tenant's
    // until it is removed or stored again (the new tables have no lineage
    // entries, so each of them is one without).
    slot->lineages = Lineages();
    slot->lineages.restored = slot->EngineRefs();
  }
  // `decoded` now holds the worker's old tables; they are freed here, after
  // the lock is released.
  return Status::Ok();
}

}  // namespace kvgov::index
