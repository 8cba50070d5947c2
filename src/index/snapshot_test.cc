// ResidencyIndex::SnapshotWorker / RestoreWorker: round trips, a property
// test against a live index, and corruption handling.
// Format: docs/formats/index-snapshot.md.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kvgov/index/residency_index.h"

namespace kvgov::index {
namespace {

constexpr int64_t kBlockSize = 2;
constexpr std::string_view kModel = "llama";

// ---------------------------------------------------------------------------
// Byte-level helpers. The CRC is an independent bitwise reference, so the
// tests check the library's table-driven one rather than reuse it.

uint32_t ReferenceCrc32c(std::string_view data) {
  uint32_t crc = 0xffffffffu;
  for (char c : data) {
    crc ^= static_cast<uint8_t>(c);
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82f63b78u : 0u);
  }
  return ~crc;
}

void PutU32(std::string& out, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(value >> shift));
}
void PutU64(std::string& out, uint64_t value) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(value >> shift));
}
void PutVarint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}
uint32_t GetU32(std::string_view in, size_t at) {
  uint32_t value = 0;
  for (size_t i = 0; i < 4; ++i) value = (value << 8) | static_cast<uint8_t>(in[at + i]);
  return value;
}

// Rewrites the length field and the checksum of `body` (a snapshot without
// its checksum), as a buggy but well-meaning writer would.
std::string Seal(std::string body) {
  const uint64_t length = body.size() + 4;
  for (int i = 0; i < 8; ++i) body[12 + i] = static_cast<char>(length >> (56 - 8 * i));
  PutU32(body, ReferenceCrc32c(body));
  return body;
}

// Hand-built snapshots for the cases a correct writer never produces.
struct Crafted {
  std::string probe;  // 8 bytes, from a real snapshot
  uint32_t version = 1;
  uint8_t state = 0;
  int64_t block_size = kBlockSize;
  std::string model = std::string(kModel);
  uint64_t key_count = 0;
  uint64_t ref_count = 0;
  std::string records;

  // Offset where `records` starts in the built snapshot.
  size_t RecordsAt() const { return Header().size(); }
  std::string Header() const {
    std::string out = "kvgovidx";
    PutU32(out, version);
    PutU64(out, 0);  // length, set by Seal
    out += probe;
    out.push_back(static_cast<char>(state));
    PutU64(out, static_cast<uint64_t>(block_size));
    PutVarint(out, model.size());
    out += model;
    PutVarint(out, key_count);
    PutVarint(out, ref_count);
    return out;
  }
  std::string Build() const { return Seal(Header() + records); }
};

void AddRecord(Crafted& crafted, uint64_t key, uint64_t tiers,
               std::vector<std::pair<EngineHash, uint64_t>> refs) {
  PutU64(crafted.records, key);
  PutVarint(crafted.records, tiers);
  PutVarint(crafted.records, refs.size());
  for (const auto& [hash, zigzag_group] : refs) {
    PutU64(crafted.records, hash);
    PutVarint(crafted.records, zigzag_group);
  }
}

// ---------------------------------------------------------------------------
// Event helpers.

BlockStored Stored(std::vector<EngineHash> hashes, std::optional<EngineHash> parent,
                   std::vector<int64_t> tokens, std::string medium = "GPU", int64_t group = 0) {
  BlockStored stored;
  stored.block_hashes = std::move(hashes);
  stored.parent_block_hash = parent;
  stored.token_ids = std::move(tokens);
  stored.block_size = kBlockSize;
  stored.medium = std::move(medium);
  stored.group_idx = group;
  return stored;
}

std::vector<int64_t> Tokens(size_t blocks, int64_t start = 100) {
  std::vector<int64_t> tokens(blocks * kBlockSize);
  std::iota(tokens.begin(), tokens.end(), start);
  return tokens;
}

// ---------------------------------------------------------------------------
// Observable equality: everything a caller can ask the index.

struct Probe {
  std::vector<std::vector<BlockKey>> chains;
  std::vector<std::pair<EngineHash, int64_t>> refs;
};

std::string DescribeOverlap(const std::vector<WorkerOverlap>& overlaps) {
  std::string out;
  for (const WorkerOverlap& o : overlaps) {
    out += o.worker + ":" + std::to_string(o.blocks) + "[";
    for (uint64_t n : o.by_tier) out += std::to_string(n) + ",";
    out += "|";
    for (uint8_t t : o.best_tier) out += std::to_string(t);
    out += "] ";
  }
  return out;
}

std::string DescribeWorkers(const std::vector<WorkerResidency>& workers) {
  std::string out;
  for (const WorkerResidency& w : workers) {
    out += w.id + "/" + w.model + "/" + std::to_string(w.block_size) + "/" +
           std::string(ToString(w.state)) + "[";
    for (uint64_t n : w.blocks) out += std::to_string(n) + ",";
    out += "] ";
  }
  return out;
}

// "" when `a` and `b` answer every probe alike, else the first difference.
std::string ObservableDiff(const ResidencyIndex& a, const ResidencyIndex& b, const Probe& probe) {
  if (std::string wa = DescribeWorkers(a.Workers()), wb = DescribeWorkers(b.Workers()); wa != wb) {
    return "Workers(): " + wa + " vs " + wb;
  }
  if (a.ResidentPairs() != b.ResidentPairs()) {
    return "ResidentPairs(): " + std::to_string(a.ResidentPairs()) + " vs " +
           std::to_string(b.ResidentPairs());
  }
  for (const std::vector<BlockKey>& chain : probe.chains) {
    std::string oa = DescribeOverlap(a.Overlap(chain));
    std::string ob = DescribeOverlap(b.Overlap(chain));
    if (oa != ob)
      return "Overlap of a " + std::to_string(chain.size()) + "-key chain: " + oa + " vs " + ob;
  }
  for (const WorkerResidency& worker : a.Workers()) {
    for (const auto& [hash, group] : probe.refs) {
      const EngineHash one[] = {hash};
      Result<std::vector<BlockKey>> ka = a.KeysForEngineHashes(worker.id, one, group);
      Result<std::vector<BlockKey>> kb = b.KeysForEngineHashes(worker.id, one, group);
      if (ka.ok() != kb.ok() || (ka.ok() && *ka != *kb)) {
        return "KeysForEngineHashes(" + worker.id + ", " + std::to_string(hash) + ", " +
               std::to_string(group) + "): " + ka.status().ToString() + " vs " +
               kb.status().ToString();
      }
    }
  }
  return "";
}

// ---------------------------------------------------------------------------
// Round trips.

class IndexSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (ResidencyIndex* index : {&a_, &b_}) {
      ASSERT_TRUE(index->AddWorker("w", kModel, kBlockSize).ok());
      ASSERT_TRUE(index->AddWorker("peer", kModel, kBlockSize).ok());
    }
  }
  std::vector<BlockKey> Chain(const std::vector<int64_t>& tokens, int64_t group = 0) const {
    return a_.hasher().Chain({std::string(kModel), "", group}, tokens, kBlockSize);
  }
  std::string Snapshot(const ResidencyIndex& index, std::string_view worker = "w") const {
    Result<std::string> snapshot = index.SnapshotWorker(worker);
    EXPECT_TRUE(snapshot.ok()) << snapshot.status().ToString();
    return snapshot.ok() ? *snapshot : std::string();
  }

  // A worker with every kind of state: chains over several events and
  // groups (one negative), a second tier, an unknown medium, transport keys
  // with no engine hash (in a tier the index counts as unknown), and an
  // engine hash whose key no tier holds any more.
  void FillSmall(ResidencyIndex& index) {
    ASSERT_TRUE(index.Apply("w", Stored({11, 12}, std::nullopt, Tokens(2))).ok());
    ASSERT_TRUE(index.Apply("w", Stored({13}, EngineHash{12}, Tokens(1, 300))).ok());
    ASSERT_TRUE(index.Apply("w", Stored({11}, std::nullopt, Tokens(1), "CPU")).ok());
    ASSERT_TRUE(index.Apply("w", Stored({~uint64_t{0}}, std::nullopt, Tokens(1), "GPU", -3)).ok());
    ASSERT_TRUE(index.Apply("w", Stored({21}, std::nullopt, Tokens(1, 500), "NVME9", 1)).ok());
    std::vector<BlockKey> transport = Chain(Tokens(2, 700));
    ASSERT_TRUE(index.AddBlocks("w", transport, ResidencyTier::kCXL).ok());
    ASSERT_TRUE(index.AddBlocks("w", {&transport[0], 1}, ResidencyTier::kRecompute).ok());
    // Key of hash 13 leaves by key, not by hash: the hash still names it.
    std::vector<BlockKey> third = *index.KeysForEngineHashes("w", {{13}}, 0);
    ASSERT_TRUE(index.RemoveBlocks("w", third, ResidencyTier::kHBM).ok());
    ASSERT_TRUE(index.SetState("w", WorkerState::kStale).ok());
  }

  Probe SmallProbe() const {
    Probe probe;
    std::vector<int64_t> chain3 = Tokens(2);
    std::vector<int64_t> tail = Tokens(1, 300);
    chain3.insert(chain3.end(), tail.begin(), tail.end());
    probe.chains = {Chain(Tokens(2)),         Chain(chain3),
                    Chain(Tokens(1)),         Chain(Tokens(1), -3),
                    Chain(Tokens(1, 500), 1), Chain(Tokens(2, 700))};
    for (EngineHash hash : {EngineHash{11}, EngineHash{12}, EngineHash{13}, EngineHash{21},
                            ~EngineHash{0}, EngineHash{99}}) {
      for (int64_t group : {int64_t{-3}, int64_t{0}, int64_t{1}}) {
        probe.refs.push_back({hash, group});
      }
    }
    return probe;
  }

  ResidencyIndex a_;
  ResidencyIndex b_;
};

TEST_F(IndexSnapshotTest, RoundTripKeepsEverythingObservable) {
  FillSmall(a_);
  ASSERT_TRUE(a_.Apply("peer", Stored({11, 12}, std::nullopt, Tokens(2))).ok());
  ASSERT_TRUE(b_.Apply("peer", Stored({11, 12}, std::nullopt, Tokens(2))).ok());
  const std::string snapshot = Snapshot(a_);
  ASSERT_TRUE(b_.RestoreWorker("w", snapshot).ok());

  EXPECT_EQ(ObservableDiff(a_, b_, SmallProbe()), "");
  EXPECT_EQ(b_.Worker("w")->state, WorkerState::kStale);
  // Canonical: the restored worker snapshots to the same bytes.
  EXPECT_EQ(Snapshot(b_), snapshot);
  // The hash whose key no tier holds still resolves, and still parents.
  EXPECT_TRUE(b_.KeysForEngineHashes("w", {{13}}, 0).ok());
  ASSERT_TRUE(b_.SetState("w", WorkerState::kLive).ok());
  ASSERT_TRUE(a_.SetState("w", WorkerState::kLive).ok());
  for (ResidencyIndex* index : {&a_, &b_}) {
    Result<ApplyResult> child = index->Apply("w", Stored({14}, EngineHash{13}, Tokens(1, 900)));
    ASSERT_TRUE(child.ok());
    EXPECT_EQ(child->orphan_blocks, 0u);
  }
  EXPECT_EQ(ObservableDiff(a_, b_, SmallProbe()), "");
}

TEST_F(IndexSnapshotTest, RemovalByEngineHashWorksAfterRestore) {
  std::vector<int64_t> tokens = Tokens(3);
  ASSERT_TRUE(a_.Apply("w", Stored({1, 2, 3}, std::nullopt, tokens)).ok());
  ASSERT_TRUE(
      a_.Apply("w", Stored({1, 2}, std::nullopt, {tokens.begin(), tokens.begin() + 4}, "CPU"))
          .ok());
  ASSERT_TRUE(b_.RestoreWorker("w", Snapshot(a_)).ok());
  ASSERT_EQ(b_.Overlap(Chain(tokens))[0].blocks, 3u);

  Result<ApplyResult> removed = b_.Apply("w", BlockRemoved{{2, 3}, "GPU", 0});
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(removed->blocks_removed, 2u);
  EXPECT_EQ(removed->unknown_removals, 0u);
  std::vector<WorkerOverlap> overlap = b_.Overlap(Chain(tokens));
  ASSERT_EQ(overlap.size(), 1u);
  EXPECT_EQ(overlap[0].blocks, 2u);                               // block 2 is gone from every tier
  EXPECT_EQ(overlap[0].best_tier, (std::vector<uint8_t>{0, 1}));  // hbm, then dram
  ASSERT_TRUE(b_.Apply("w", BlockRemoved{{1, 2}, "CPU", 0}).ok());
  ASSERT_TRUE(b_.Apply("w", BlockRemoved{{1}, "GPU", 0}).ok());
  EXPECT_EQ(b_.ResidentPairs(), 0u);
  EXPECT_TRUE(b_.Overlap(Chain(tokens)).empty());
}

TEST_F(IndexSnapshotTest, KeysForEngineHashesAfterRestore) {
  ASSERT_TRUE(a_.Apply("w", Stored({5, 6, 7, 8}, std::nullopt, Tokens(4))).ok());
  ASSERT_TRUE(b_.RestoreWorker("w", Snapshot(a_)).ok());
  const EngineHash hashes[] = {8, 5, 7};
  EXPECT_EQ(*b_.KeysForEngineHashes("w", hashes, 0), *a_.KeysForEngineHashes("w", hashes, 0));
  EXPECT_EQ(b_.KeysForEngineHashes("w", hashes, 1).status().code(), StatusCode::kNotFound);
}

TEST_F(IndexSnapshotTest, EmptyWorkerRoundTrips) {
  ASSERT_TRUE(b_.Apply("w", Stored({1}, std::nullopt, Tokens(1))).ok());
  ASSERT_TRUE(b_.RestoreWorker("w", Snapshot(a_)).ok());
  EXPECT_EQ(b_.ResidentPairs(), 0u);
  EXPECT_EQ(Snapshot(b_), Snapshot(a_));
}

TEST_F(IndexSnapshotTest, RestoreOverExistingStateReplacesIt) {
  // b's w holds other blocks, some of them shared with peer.
  std::vector<int64_t> old_tokens = Tokens(3, 5000);
  ASSERT_TRUE(b_.Apply("w", Stored({41, 42, 43}, std::nullopt, old_tokens)).ok());
  ASSERT_TRUE(
      b_.Apply("peer", Stored({41, 42}, std::nullopt, {old_tokens.begin(), old_tokens.begin() + 4}))
          .ok());
  ASSERT_TRUE(b_.AddBlocks("w", Chain(Tokens(1, 6000)), ResidencyTier::kDisk).ok());
  ASSERT_TRUE(
      a_.Apply("peer", Stored({41, 42}, std::nullopt, {old_tokens.begin(), old_tokens.begin() + 4}))
          .ok());
  FillSmall(a_);
  // Live, so that Overlap would show w if it were still listed as a holder
  // of its old keys.
  ASSERT_TRUE(a_.SetState("w", WorkerState::kLive).ok());

  ASSERT_TRUE(b_.RestoreWorker("w", Snapshot(a_)).ok());
  Probe probe = SmallProbe();
  probe.chains.push_back(Chain(old_tokens));
  probe.chains.push_back(Chain(Tokens(1, 6000)));
  for (EngineHash hash : {41, 42, 43}) probe.refs.push_back({hash, 0});
  EXPECT_EQ(ObservableDiff(a_, b_, probe), "");
  // The old chain is peer's alone now, and w's old hashes are gone.
  std::vector<WorkerOverlap> overlap = b_.Overlap(Chain(old_tokens));
  ASSERT_EQ(overlap.size(), 1u);
  EXPECT_EQ(overlap[0].worker, "peer");
  EXPECT_TRUE(b_.Overlap(Chain(Tokens(1, 6000))).empty());
  ASSERT_EQ(b_.Overlap(Chain(Tokens(2))).size(), 1u);
  EXPECT_EQ(b_.Overlap(Chain(Tokens(2)))[0].worker, "w");
  EXPECT_EQ(b_.Apply("w", BlockRemoved{{43}, "GPU", 0})->unknown_removals, 1u);
  EXPECT_EQ(Snapshot(b_), Snapshot(a_));
}

TEST_F(IndexSnapshotTest, RegistrationMustMatch) {
  ResidencyIndex other;
  ASSERT_TRUE(other.AddWorker("w", "mistral", kBlockSize).ok());
  ASSERT_TRUE(other.AddWorker("w16", kModel, 16).ok());
  FillSmall(a_);
  const std::string snapshot = Snapshot(a_);

  Status model = other.RestoreWorker("w", snapshot);
  EXPECT_EQ(model.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(model.message().find("'llama'"), std::string::npos) << model.message();
  EXPECT_NE(model.message().find("'mistral'"), std::string::npos) << model.message();
  Status block_size = other.RestoreWorker("w16", snapshot);
  EXPECT_EQ(block_size.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(block_size.message().find("block size 2"), std::string::npos);
  EXPECT_NE(block_size.message().find("block size 16"), std::string::npos);
  EXPECT_EQ(other.RestoreWorker("nobody", snapshot).code(), StatusCode::kNotFound);
  EXPECT_EQ(other.SnapshotWorker("nobody").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(other.ResidentPairs(), 0u);
}

TEST_F(IndexSnapshotTest, KeysFromAnotherHasherSeedAreRefused) {
  ResidencyIndex reseeded(BlockKeyHasher(12345));
  ASSERT_TRUE(reseeded.AddWorker("w", kModel, kBlockSize).ok());
  FillSmall(a_);
  Status status = reseeded.RestoreWorker("w", Snapshot(a_));
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
  EXPECT_NE(status.message().find("hasher"), std::string::npos);
  EXPECT_EQ(reseeded.ResidentPairs(), 0u);
}

// Pins format version 1 byte for byte (docs/formats/index-snapshot.md,
// "Example"): a layout change must be a new version, not an accident.
TEST_F(IndexSnapshotTest, EmptyWorkerGoldenBytes) {
  const std::string snapshot = Snapshot(a_);
  std::string expected = "kvgovidx";
  PutU32(expected, 1);
  PutU64(expected, 49);
  PutU64(expected, a_.hasher().Root({"kvgov.index_snapshot.probe", "", 0}));
  expected.push_back('\0');  // live
  PutU64(expected, 2);       // block size
  expected += "\x05llama";
  expected.push_back('\0');  // key_count
  expected.push_back('\0');  // ref_count
  ASSERT_EQ(expected.size(), 45u);
  PutU32(expected, ReferenceCrc32c(expected));
  EXPECT_EQ(snapshot, expected);
  // The reference CRC is CRC-32C (the check value of the catalogue).
  EXPECT_EQ(ReferenceCrc32c("123456789"), 0xe3069283u);
}

// The example in docs/formats/index-snapshot.md, literally.
TEST(IndexSnapshotFormatTest, DocumentedExampleBytes) {
  ResidencyIndex index;
  ASSERT_TRUE(index.AddWorker("w", "llama", 16).ok());
  const std::string expected_hex =
      "6b76676f76696478"
      "00000001"
      "0000000000000031"
      "bc48c2d9f59e4345"
      "00"
      "0000000000000010"
      "056c6c616d61"
      "00"
      "00"
      "23b347dc";
  const std::string snapshot = index.SnapshotWorker("w").value();
  std::string hex;
  for (char c : snapshot) {
    static constexpr char kDigits[] = "0123456789abcdef";
    hex.push_back(kDigits[static_cast<uint8_t>(c) >> 4]);
    hex.push_back(kDigits[static_cast<uint8_t>(c) & 0xf]);
  }
  EXPECT_EQ(hex, expected_hex);
}

TEST_F(IndexSnapshotTest, RecordLayout) {
  // One key in hbm named by one hash of group 0, and one transport key in
  // recompute (bit 8, a two-byte varint) that no hash names.
  ASSERT_TRUE(a_.Apply("w", Stored({0x0102030405060708}, std::nullopt, Tokens(1))).ok());
  const BlockKey engine_key = Chain(Tokens(1))[0];
  const BlockKey transport_key = engine_key ^ 1;
  ASSERT_TRUE(a_.AddBlocks("w", {&transport_key, 1}, ResidencyTier::kRecompute).ok());
  const std::string snapshot = Snapshot(a_);

  std::string records;
  auto put_engine = [&] {
    PutU64(records, engine_key);
    records += "\x02\x01";  // tiers {hbm}, one ref
    PutU64(records, 0x0102030405060708);
    records.push_back('\0');  // group 0
  };
  auto put_transport = [&] {
    PutU64(records, transport_key);
    records += "\x80\x02";  // tiers {recompute}
    records.push_back('\0');
  };
  if (engine_key < transport_key) {
    put_engine();
    put_transport();
  } else {
    put_transport();
    put_engine();
  }
  const size_t records_at = 37 + 6 + 2;
  ASSERT_EQ(snapshot.size(), records_at + records.size() + 4);
  EXPECT_EQ(snapshot.substr(43, 2), std::string("\x02\x01", 2));  // key_count, ref_count
  EXPECT_EQ(snapshot.substr(records_at, records.size()), records);
  EXPECT_EQ(GetU32(snapshot, snapshot.size() - 4),
            ReferenceCrc32c(std::string_view(snapshot).substr(0, snapshot.size() - 4)));
}

// ---------------------------------------------------------------------------
// Corruption: every failure is Corruption (or FailedPrecondition for a
// well-formed snapshot that does not fit), and leaves the worker as it was.

class IndexSnapshotCorruptionTest : public IndexSnapshotTest {
 protected:
  void SetUp() override {
    IndexSnapshotTest::SetUp();
    FillSmall(a_);
    snapshot_ = Snapshot(a_);
    // The target holds something else, so "untouched" is visible.
    ASSERT_TRUE(b_.Apply("w", Stored({1, 2}, std::nullopt, Tokens(2, 40))).ok());
    before_ = Snapshot(b_);
  }

  // Restores `bytes` into b's w, expects `code`, and checks w is unchanged.
  Status ExpectRejected(std::string_view bytes, StatusCode code = StatusCode::kCorruption) {
    Status status = b_.RestoreWorker("w", bytes);
    EXPECT_EQ(status.code(), code) << status.ToString();
    EXPECT_EQ(Snapshot(b_), before_);
    return status;
  }

  Crafted Template() const {
    Crafted crafted;
    crafted.probe = snapshot_.substr(20, 8);
    return crafted;
  }

  std::string snapshot_;
  std::string before_;
};

TEST_F(IndexSnapshotCorruptionTest, EveryTruncationFails) {
  ASSERT_GT(snapshot_.size(), 100u);
  for (size_t length = 0; length < snapshot_.size(); ++length) {
    SCOPED_TRACE(length);
    Status status = ExpectRejected(std::string_view(snapshot_).substr(0, length));
    EXPECT_EQ(status.message().rfind("index snapshot: byte ", 0), 0u) << status.message();
    if (length >= 20) {
      EXPECT_NE(status.message().find("truncated"), std::string::npos) << status.message();
    }
  }
  EXPECT_NE(ExpectRejected("").message().find("magic alone needs 8"), std::string::npos);
}

TEST_F(IndexSnapshotCorruptionTest, EveryBitFlipFails) {
  for (size_t at = 0; at < snapshot_.size(); ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = snapshot_;
      flipped[at] = static_cast<char>(flipped[at] ^ (1 << bit));
      SCOPED_TRACE(testing::Message() << "byte " << at << " bit " << bit);
      (void)ExpectRejected(flipped);
    }
    std::string inverted = snapshot_;
    inverted[at] = static_cast<char>(~inverted[at]);
    (void)ExpectRejected(inverted);
  }
}

TEST_F(IndexSnapshotCorruptionTest, HeaderProblemsAreNamed) {
  std::string magic = snapshot_;
  magic[3] = 'X';
  EXPECT_EQ(ExpectRejected(magic).message(),
            "index snapshot: byte 0: wrong magic: not an index snapshot");

  std::string version = snapshot_;
  version[11] = 2;
  EXPECT_EQ(ExpectRejected(version).message(),
            "index snapshot: byte 8: unsupported version 2 (this build reads 1)");

  std::string longer = snapshot_ + "xyz";
  EXPECT_NE(ExpectRejected(longer).message().find("byte " + std::to_string(snapshot_.size()) +
                                                  ": 3 unexpected bytes"),
            std::string::npos);

  std::string checksum = snapshot_;
  checksum[60] ^= 0x10;
  Status status = ExpectRejected(checksum);
  EXPECT_NE(
      status.message().find("byte " + std::to_string(snapshot_.size() - 4) + ": checksum mismatch"),
      std::string::npos)
      << status.message();

  std::string tiny = Seal(snapshot_.substr(0, 30));
  EXPECT_NE(ExpectRejected(tiny).message().find("byte 12: length 34 is below the smallest"),
            std::string::npos);
}

TEST_F(IndexSnapshotCorruptionTest, HugeCountsFailBeforeAllocating) {
  // With a valid checksum, so only the count checks stand between these and
  // an allocation of exabytes.
  for (uint64_t count : {uint64_t{1} << 62, ~uint64_t{0}, uint64_t{1000}}) {
    Crafted keys = Template();
    keys.key_count = count;
    AddRecord(keys, 1, 2, {});
    Status status = ExpectRejected(keys.Build());
    EXPECT_NE(status.message().find("key_count " + std::to_string(count) + " runs past the end"),
              std::string::npos)
        << status.message();

    Crafted refs = Template();
    refs.key_count = 1;
    refs.ref_count = count;
    AddRecord(refs, 1, 2, {{7, 0}});
    status = ExpectRejected(refs.Build());
    EXPECT_NE(status.message().find("ref_count " + std::to_string(count) + " runs past the end"),
              std::string::npos)
        << status.message();

    Crafted nrefs = Template();
    nrefs.key_count = 1;
    nrefs.ref_count = 1;
    PutU64(nrefs.records, 1);
    PutVarint(nrefs.records, 2);
    PutVarint(nrefs.records, count);
    status = ExpectRejected(nrefs.Build());
    EXPECT_NE(status.message().find("byte " + std::to_string(nrefs.RecordsAt() + 9)),
              std::string::npos)
        << status.message();

    Crafted model = Template();
    model.model = "";
    std::string bytes = model.Header();
    // Replace the empty model's length (the byte at 37) by `count`.
    std::string huge_len;
    PutVarint(huge_len, count);
    bytes = bytes.substr(0, 37) + huge_len + bytes.substr(38);
    status = ExpectRejected(Seal(bytes));
    EXPECT_NE(status.message().find("byte 37: model length"), std::string::npos)
        << status.message();
  }
}

TEST_F(IndexSnapshotCorruptionTest, UnknownTierBitsAreRejected) {
  Crafted crafted = Template();
  crafted.key_count = 2;
  AddRecord(crafted, 1, 2, {});
  AddRecord(crafted, 2, 0x202, {});
  Status status = ExpectRejected(crafted.Build());
  const size_t tiers_at = crafted.RecordsAt() + 10 + 8;
  EXPECT_EQ(status.message(), "index snapshot: byte " + std::to_string(tiers_at) +
                                  ": key record 1 (key 0x2): tier mask 0x202 has bits outside "
                                  "the known tiers 0x1ff");
  // Every known tier is accepted.
  Crafted all = Template();
  all.key_count = 1;
  AddRecord(all, 1, 0x1ff, {});
  ASSERT_TRUE(b_.RestoreWorker("w", all.Build()).ok());
  WorkerResidency residency = *b_.Worker("w");
  // hbm, dram, disk, remote, and unknown counting unknown, numa_far, cxl,
  // provider and recompute.
  EXPECT_EQ(residency.blocks, (std::array<uint64_t, 5>{1, 1, 1, 1, 5}));
}

TEST_F(IndexSnapshotCorruptionTest, NonCanonicalRecordsAreRejected) {
  struct Case {
    std::string name;
    Crafted crafted;
    std::string expect;
  };
  std::vector<Case> cases;
  {
    Crafted c = Template();
    c.key_count = 2;
    AddRecord(c, 5, 2, {});
    AddRecord(c, 5, 4, {});
    cases.push_back({"duplicate key", c, "is not greater than the previous key 0x5"});
  }
  {
    Crafted c = Template();
    c.key_count = 2;
    AddRecord(c, 6, 2, {});
    AddRecord(c, 5, 4, {});
    cases.push_back({"descending keys", c, "key record 1: key 0x5 is not greater"});
  }
  {
    Crafted c = Template();
    c.key_count = 2;
    c.ref_count = 2;
    AddRecord(c, 5, 2, {{9, 0}});
    AddRecord(c, 6, 2, {{9, 0}});
    cases.push_back({"one ref, two keys", c, "already names another key"});
  }
  {
    Crafted c = Template();
    c.key_count = 1;
    c.ref_count = 2;
    AddRecord(c, 5, 2, {{9, 2}, {8, 0}});  // group 1 before group 0
    cases.push_back({"refs out of order", c, "(hash 0x8, group 0) is out of order"});
  }
  {
    Crafted c = Template();
    c.key_count = 1;
    AddRecord(c, 5, 0, {});
    cases.push_back({"empty record", c, "has no tier and no engine ref"});
  }
  {
    Crafted c = Template();
    c.key_count = 1;
    AddRecord(c, 5, 2, {});
    c.records += std::string(16, '\0');  // bytes key_count does not cover
    cases.push_back({"trailing bytes", c,
                     "byte " + std::to_string(c.RecordsAt() + 10) +
                         ": 16 unexpected bytes after the last key record"});
  }
  {
    Crafted c = Template();
    c.key_count = 1;
    c.ref_count = 0;
    AddRecord(c, 5, 2, {{9, 0}});
    cases.push_back({"more refs than ref_count", c, "exceed the 0 ref_count leaves"});
  }
  {
    Crafted c = Template();
    c.key_count = 1;
    PutU64(c.records, 5);
    c.records += std::string(10, '\x80');  // an 11-byte varint
    c.records += std::string(10, '\0');
    cases.push_back({"overlong varint", c, "varint tiers is longer than 64 bits"});
  }
  {
    Crafted c = Template();
    c.state = 2;
    cases.push_back({"state", c, "byte 28: state 2 is neither"});
  }
  {
    Crafted c = Template();
    c.block_size = 0;
    cases.push_back({"block size", c, "byte 29: block_size 0 is not positive"});
  }
  {
    Crafted c = Template();
    c.block_size = -4;
    cases.push_back({"negative block size", c, "block_size -4 is not positive"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Status status = ExpectRejected(c.crafted.Build());
    EXPECT_NE(status.message().find(c.expect), std::string::npos) << status.message();
  }
}

TEST_F(IndexSnapshotCorruptionTest, FewerRefsThanDeclaredIsNamed) {
  // The records end exactly at the checksum but hold one ref of two.
  Crafted c = Template();
  c.key_count = 2;
  c.ref_count = 2;
  AddRecord(c, 5, 2, {{9, 0}});
  AddRecord(c, 6, 2, {});
  Status status = ExpectRejected(c.Build());
  EXPECT_EQ(status.message(), "index snapshot: byte " + std::to_string(c.RecordsAt() - 1) +
                                  ": ref_count 2 but the records hold 1");
}

TEST_F(IndexSnapshotCorruptionTest, CraftedValidSnapshotIsAccepted) {
  // The builder itself is right: a well-formed crafted snapshot restores.
  Crafted c = Template();
  c.key_count = 2;
  c.ref_count = 3;
  // (hash 1, group -3), (hash 4, group -1), (hash 9, group 0): zigzag 5, 1, 0.
  AddRecord(c, 5, 2, {{1, 5}, {4, 1}, {9, 0}});
  AddRecord(c, 7, 4, {});
  ASSERT_TRUE(b_.RestoreWorker("w", c.Build()).ok());
  EXPECT_EQ(*b_.KeysForEngineHashes("w", {{1}}, -3), std::vector<BlockKey>{5});
  EXPECT_EQ(*b_.KeysForEngineHashes("w", {{4}}, -1), std::vector<BlockKey>{5});
  EXPECT_EQ(*b_.KeysForEngineHashes("w", {{9}}, 0), std::vector<BlockKey>{5});
  EXPECT_EQ(Snapshot(b_), c.Build());
}

// ---------------------------------------------------------------------------
// Property: snapshot + restore at any point, then the same events, gives an
// index no query can tell from the live one.

enum class OpKind { kApply, kAddBlocks, kRemoveBlocks, kSetState };

struct Op {
  OpKind kind = OpKind::kApply;
  EngineEvent event;
  std::vector<BlockKey> keys;
  ResidencyTier tier = ResidencyTier::kUnknown;
  WorkerState state = WorkerState::kLive;
};

class EventGenerator {
 public:
  EventGenerator(uint64_t seed, const BlockKeyHasher& hasher) : rng_(seed), hasher_(hasher) {
    // Small integers and full-width values, so both ends of u64 appear.
    for (EngineHash h = 1; h <= 24; ++h) hash_pool_.push_back(h);
    for (int i = 0; i < 16; ++i) hash_pool_.push_back(rng_());
  }

  std::vector<Op> Sequence(size_t length, Probe& probe) {
    std::vector<Op> ops;
    for (size_t i = 0; i < length; ++i) ops.push_back(Next(probe));
    for (EngineHash hash : hash_pool_) {
      for (int64_t group : kGroups) probe.refs.push_back({hash, group});
    }
    return ops;
  }

  // Engine-stored chains from a fixed prefix, so that peer shares keys.
  std::vector<BlockStored> PeerEvents(Probe& probe) {
    std::vector<BlockStored> events;
    for (int i = 0; i < 6; ++i) {
      std::vector<int64_t> tokens = RandomTokens(1 + Uniform(3));
      int64_t group = kGroups[Uniform(kGroups.size())];
      std::vector<EngineHash> hashes;
      for (size_t b = 0; b < tokens.size() / kBlockSize; ++b) hashes.push_back(RandomHash());
      probe.chains.push_back(hasher_.Chain({std::string(kModel), "", group}, tokens, kBlockSize));
      events.push_back(Stored(hashes, std::nullopt, tokens, "GPU", group));
    }
    return events;
  }

 private:
  static constexpr std::array<int64_t, 4> kGroups = {0, 1, 2, -3};
  static constexpr std::array<std::string_view, 7> kMedia = {"GPU", "",          "CPU",  "DISK",
                                                             "L2",  "cpu_tier2", "NVME9"};
  static constexpr std::array<ResidencyTier, 9> kTiers = {
      ResidencyTier::kUnknown, ResidencyTier::kHBM,      ResidencyTier::kDRAM,
      ResidencyTier::kNumaFar, ResidencyTier::kCXL,      ResidencyTier::kDisk,
      ResidencyTier::kRemote,  ResidencyTier::kProvider, ResidencyTier::kRecompute};

  size_t Uniform(size_t n) { return static_cast<size_t>(rng_() % n); }
  bool Chance(int percent) { return Uniform(100) < static_cast<size_t>(percent); }
  EngineHash RandomHash() { return hash_pool_[Uniform(hash_pool_.size())]; }

  // Tokens from a three-letter alphabet: chains collide often, so different
  // engine hashes (and AddBlocks) land on the same keys.
  std::vector<int64_t> RandomTokens(size_t blocks) {
    std::vector<int64_t> tokens(blocks * kBlockSize);
    for (int64_t& token : tokens) token = static_cast<int64_t>(1 + Uniform(3));
    return tokens;
  }

  Op Next(Probe& probe) {
    Op op;
    const size_t roll = Uniform(100);
    const int64_t group = kGroups[Uniform(kGroups.size())];
    if (roll < 45) {
      const size_t blocks = 1 + Uniform(4);
      std::vector<EngineHash> hashes;
      for (size_t b = 0; b < blocks; ++b) hashes.push_back(RandomHash());
      std::optional<EngineHash> parent;
      auto& recent = recent_[group];
      if (Chance(55) && !recent.empty()) {
        parent = recent[Uniform(recent.size())];
      } else if (Chance(10)) {
        parent = RandomHash();  // often an orphan
      }
      std::vector<int64_t> tokens = RandomTokens(blocks);
      BlockStored stored =
          Stored(hashes, parent, tokens, std::string(kMedia[Uniform(kMedia.size())]), group);
      if (Chance(15)) stored.lora_name = "lora-a";
      if (Chance(15)) {
        stored.extra_keys.assign(blocks, "");
        stored.extra_keys[0] = "[\"salt\"]";
      }
      if (!parent) {
        probe.chains.push_back(hasher_.Chain({std::string(kModel), stored.lora_name, group}, tokens,
                                             kBlockSize, stored.extra_keys));
      }
      recent.insert(recent.end(), hashes.begin(), hashes.end());
      if (recent.size() > 12) recent.erase(recent.begin(), recent.begin() + 4);
      op.event = std::move(stored);
    } else if (roll < 75) {
      BlockRemoved removed;
      const size_t n = 1 + Uniform(4);
      for (size_t i = 0; i < n; ++i) {
        auto& recent = recent_[group];
        removed.block_hashes.push_back(
            Chance(70) && !recent.empty() ? recent[Uniform(recent.size())] : RandomHash());
      }
      removed.medium = std::string(kMedia[Uniform(kMedia.size())]);
      removed.group_idx = group;
      op.event = std::move(removed);
    } else if (roll < 78) {
      op.event = AllBlocksCleared{};
    } else if (roll < 96) {
      op.kind = roll < 88 ? OpKind::kAddBlocks : OpKind::kRemoveBlocks;
      op.tier = kTiers[Uniform(kTiers.size())];
      // Keys as a transport reports them: chains the engine may also hold,
      // and now and then a key nothing else produces.
      op.keys =
          hasher_.Chain({std::string(kModel), "", group}, RandomTokens(1 + Uniform(3)), kBlockSize);
      if (Chance(20)) op.keys.push_back(rng_());
      probe.chains.push_back(op.keys);
    } else {
      op.kind = OpKind::kSetState;
      op.state = Chance(50) ? WorkerState::kLive : WorkerState::kStale;
    }
    return op;
  }

  std::mt19937_64 rng_;
  const BlockKeyHasher& hasher_;
  std::vector<EngineHash> hash_pool_;
  std::map<int64_t, std::vector<EngineHash>> recent_;
};

// Applies `op` to w; returns what the caller could observe of the call.
std::string ApplyOp(ResidencyIndex& index, const Op& op) {
  switch (op.kind) {
    case OpKind::kApply: {
      Result<ApplyResult> result = index.Apply("w", op.event);
      if (!result.ok()) return result.status().ToString();
      return std::to_string(result->blocks_stored) + "/" + std::to_string(result->blocks_removed) +
             "/" + std::to_string(result->orphan_blocks) + "/" +
             std::to_string(result->unknown_removals) + "/" +
             std::to_string(result->unknown_medium);
    }
    case OpKind::kAddBlocks:
      return index.AddBlocks("w", op.keys, op.tier).ToString();
    case OpKind::kRemoveBlocks:
      return index.RemoveBlocks("w", op.keys, op.tier).ToString();
    case OpKind::kSetState:
      return index.SetState("w", op.state).ToString();
  }
  return "";
}

TEST(IndexSnapshotPropertyTest, RestoredIndexTracksTheLiveOne) {
  constexpr int kSequences = 300;
  constexpr size_t kLength = 160;
  size_t restores = 0;
  size_t max_blocks = 0;
  for (int seq = 0; seq < kSequences; ++seq) {
    SCOPED_TRACE(testing::Message() << "sequence seed " << seq);
    std::mt19937_64 plan(0x5eed0000u + static_cast<uint64_t>(seq));
    ResidencyIndex live;
    EventGenerator generator(static_cast<uint64_t>(seq), live.hasher());
    Probe probe;
    std::vector<BlockStored> peer_events = generator.PeerEvents(probe);
    std::vector<Op> ops = generator.Sequence(kLength, probe);

    auto fresh = [&](ResidencyIndex& index) {
      ASSERT_TRUE(index.AddWorker("w", kModel, kBlockSize).ok());
      ASSERT_TRUE(index.AddWorker("peer", kModel, kBlockSize).ok());
      for (const BlockStored& event : peer_events) ASSERT_TRUE(index.Apply("peer", event).ok());
    };
    fresh(live);

    // One to three cut points; at each, a new index restores the live
    // worker's snapshot and from then on receives the same operations.
    std::set<size_t> cuts;
    const size_t n_cuts = 1 + plan() % 3;
    while (cuts.size() < n_cuts) cuts.insert(plan() % (kLength + 1));
    std::vector<std::unique_ptr<ResidencyIndex>> restored;

    for (size_t i = 0; i <= kLength; ++i) {
      if (cuts.contains(i)) {
        Result<std::string> snapshot = live.SnapshotWorker("w");
        ASSERT_TRUE(snapshot.ok());
        ASSERT_EQ(GetU32(*snapshot, snapshot->size() - 4),
                  ReferenceCrc32c(std::string_view(*snapshot).substr(0, snapshot->size() - 4)));
        auto index = std::make_unique<ResidencyIndex>();
        fresh(*index);
        if (plan() % 2 == 0) {
          // Sometimes the worker already holds something the snapshot
          // must replace.
          for (size_t j = 0; j < 5; ++j) (void)ApplyOp(*index, ops[ops.size() - 1 - j]);
        }
        Status status = index->RestoreWorker("w", *snapshot);
        ASSERT_TRUE(status.ok()) << status.ToString();
        ASSERT_EQ(index->SnapshotWorker("w").value(), *snapshot);
        ASSERT_EQ(ObservableDiff(live, *index, probe), "") << "right after the restore at op " << i;
        restored.push_back(std::move(index));
        ++restores;
      }
      if (i == kLength) break;
      const std::string expected = ApplyOp(live, ops[i]);
      for (auto& index : restored) {
        ASSERT_EQ(ApplyOp(*index, ops[i]), expected) << "op " << i;
      }
    }
    const std::string final_snapshot = live.SnapshotWorker("w").value();
    for (auto& index : restored) {
      ASSERT_EQ(ObservableDiff(live, *index, probe), "");
      ASSERT_EQ(index->SnapshotWorker("w").value(), final_snapshot);
    }
    max_blocks = std::max<size_t>(max_blocks, live.ResidentPairs());
  }
  EXPECT_GE(restores, static_cast<size_t>(kSequences));
  EXPECT_GT(max_blocks, 20u);  // the sequences build real state
}

// Snapshots take the lock shared and restores exclusive: neither may tear
// a worker another thread is writing or reading. Meaningful under TSan
// (KVGOV_SANITIZE=thread); otherwise a smoke test that every snapshot taken
// mid-stream restores.
TEST(IndexSnapshotConcurrencyTest, SnapshotAndRestoreWhileApplyingAndQuerying) {
  ResidencyIndex index;
  ASSERT_TRUE(index.AddWorker("w", kModel, kBlockSize).ok());
  ASSERT_TRUE(index.AddWorker("copy", kModel, kBlockSize).ok());
  const std::vector<BlockKey> first_block =
      index.hasher().Chain({std::string(kModel), "", 0}, Tokens(1, 1), kBlockSize);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (EngineHash h = 1; h <= 2000; ++h) {
      (void)index.Apply("w", Stored({h}, h > 1 ? std::optional<EngineHash>(h - 1) : std::nullopt,
                                    Tokens(1, static_cast<int64_t>(h))));
      if (h % 7 == 0) (void)index.Apply("w", BlockRemoved{{h - 3}, "GPU", 0});
    }
    done = true;
  });
  std::thread reader([&] {
    while (!done) {
      (void)index.Overlap(first_block);
      (void)index.Workers();
    }
  });
  int snapshots = 0;
  int failures = 0;
  while (!done || snapshots == 0) {
    Result<std::string> snapshot = index.SnapshotWorker("w");
    if (!snapshot.ok() || !index.RestoreWorker("copy", *snapshot).ok()) ++failures;
    ++snapshots;
  }
  writer.join();
  reader.join();
  EXPECT_EQ(failures, 0);
  ASSERT_TRUE(index.RestoreWorker("copy", index.SnapshotWorker("w").value()).ok());
  EXPECT_EQ(index.Worker("copy")->blocks, index.Worker("w")->blocks);
  EXPECT_EQ(index.Overlap(first_block).size(), 2u);
}

}  // namespace
}  // namespace kvgov::index
