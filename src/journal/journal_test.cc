#include "kvgov/journal/journal.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>
#include <vector>

#include "kvgov/core/digest.h"

#include "testing/scratch_dir.h"

namespace kvgov::journal {
namespace {

namespace fs = std::filesystem;
using store::Column;
using store::KeyU64;
using store::WriteOp;

const std::string kZeros(64, '0');
const Attribution kBy{"token:ops", ""};

// The first format-1 row of docs/formats/journal.md's test vectors.
Row VectorRowV1() {
  Row row;
  row.format_version = 1;
  row.seq = 1;
  row.time_ms = 1700000000000;
  row.kind = "worker.drain";
  row.subject = "w1";
  row.payload = R"({"drain":true})";
  row.payload_digest = Sha256Hex(row.payload);
  row.prev_hash = kZeros;
  row.hash = RowHash(row);
  return row;
}

// The first row of the format-2 vectors: the same decision, attributed.
Row VectorRow() {
  Row row;
  row.seq = 1;
  row.time_ms = 1700000000000;
  row.kind = "worker.drain";
  row.subject = "w1";
  row.actor = "token:ops";
  row.payload = R"({"drain":true})";
  row.payload_digest = Sha256Hex(row.payload);
  row.prev_hash = kZeros;
  row.hash = RowHash(row);
  return row;
}

TEST(RowHashTest, MatchesTheDocumentedVectors) {
  Row first = VectorRow();
  EXPECT_EQ(first.hash, "c0e1bf0a00ab17ce97fbb41b00d5d703a1b8c89c39b33a42fb3aa4d673a60e57");
  Row second;
  second.seq = 2;
  second.time_ms = -5;  // negative times are two's complement
  second.kind = "config";
  second.actor = "kvgov";
  second.origin = "replica-a";
  second.payload = "{}";
  second.payload_digest = Sha256Hex(second.payload);
  second.prev_hash = first.hash;
  EXPECT_EQ(RowHash(second), "6d3de36469a2e76ecc592da5cef13d6adcbbbbaa9b7274a03bf7a17979638378");
}

TEST(RowHashTest, MatchesTheDocumentedFormat1Vectors) {
  Row first = VectorRowV1();
  EXPECT_EQ(first.payload_digest,
            "ab7dfe17550548f605085a61110561061d0e038f359a245bea72927025e071fe");
  EXPECT_EQ(first.hash, "f47d7e76dd59e4a9a93379ded263d26de3d2f0fb26ac6f336338141e5724eb90");

  Row second;
  second.format_version = 1;
  second.seq = 2;
  second.time_ms = -5;
  second.kind = "config";
  second.payload = "{}";
  second.payload_digest = Sha256Hex(second.payload);
  second.prev_hash = first.hash;
  EXPECT_EQ(RowHash(second), "ba6a3b43c85c8e02daabb161dfc22f180f75c0224b684ba773f874777c10f299");
}

TEST(RowHashTest, EveryHashedFieldMatters) {
  const Row base = VectorRow();
  std::set<std::string> hashes = {RowHash(base)};
  Row r = base;
  r.format_version = 3;
  hashes.insert(RowHash(r));
  r = base;
  r.seq = 2;
  hashes.insert(RowHash(r));
  r = base;
  r.time_ms += 1;
  hashes.insert(RowHash(r));
  r = base;
  r.kind = "worker.drainw";
  r.subject = "1";  // same concatenation, different framing
  hashes.insert(RowHash(r));
  r = base;
  r.actor = "token:op";
  r.origin = "s";  // same concatenation, different framing
  hashes.insert(RowHash(r));
  r = base;
  r.origin = "replica-a";
  hashes.insert(RowHash(r));
  r = base;
  r.payload_digest = Sha256Hex("other");
  hashes.insert(RowHash(r));
  r = base;
  r.prev_hash = std::string(64, '1');
  hashes.insert(RowHash(r));
  EXPECT_EQ(hashes.size(), 9u);

  // The payload is covered through its digest, not directly.
  r = base;
  r.payload = "anything";
  EXPECT_EQ(RowHash(r), RowHash(base));
}

TEST(RowCodecTest, RoundTrips) {
  Row row = VectorRow();
  std::string bytes = EncodeRow(row);
  EXPECT_EQ(bytes.size(), 49 + row.kind.size() + row.subject.size() + row.actor.size() +
                              row.payload.size() + 3 * 64);
  EXPECT_EQ(bytes[0], '\x02');
  EXPECT_EQ(bytes.substr(17 + 16 + 6, 4 + 9), std::string("\x00\x00\x00\x09", 4) + "token:ops");
  EXPECT_EQ(bytes.size(), 278u);
  EXPECT_EQ(Sha256Hex(bytes), "36a4a42d726a89b855f86fd44e782cf8a533a8b8ee406b54488ea2dbbe2b8950");
  Result<Row> decoded = DecodeRow(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, row);

  Row empty;
  empty.time_ms = -1;
  decoded = DecodeRow(EncodeRow(empty));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, empty);
}

// A journal begun by an older kvgov keeps its format-1 rows, byte for byte.
TEST(RowCodecTest, ReadsFormat1Rows) {
  Row row = VectorRowV1();
  std::string bytes = EncodeRow(row);
  EXPECT_EQ(bytes.size(), 41 + row.kind.size() + row.subject.size() + row.payload.size() + 3 * 64);
  EXPECT_EQ(bytes.substr(0, 17), std::string("\x01"
                                             "\x00\x00\x00\x00\x00\x00\x00\x01"
                                             "\x00\x00\x01\x8b\xcf\xe5\x68\x00",
                                             17));
  EXPECT_EQ(bytes.substr(17, 4 + 12), std::string("\x00\x00\x00\x0c", 4) + "worker.drain");
  EXPECT_EQ(bytes.size(), 261u);
  EXPECT_EQ(Sha256Hex(bytes), "bd794572f41f7f673fb32b28f9ef8244fb831201880d253ecece02a01defe365");
  Result<Row> decoded = DecodeRow(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, row);
}

TEST(RowCodecTest, RejectsDamagedRows) {
  const std::string good = EncodeRow(VectorRowV1());
  auto expect_corruption = [](std::string_view bytes, std::string_view needle) {
    Result<Row> row = DecodeRow(bytes);
    ASSERT_FALSE(row.ok());
    EXPECT_EQ(row.status().code(), StatusCode::kCorruption);
    EXPECT_NE(row.status().message().find(needle), std::string::npos) << row.status().ToString();
  };
  expect_corruption("", "format version at offset 0 runs past the end (0 bytes)");
  expect_corruption(good.substr(0, 5), "seq at offset 1 runs past the end (5 bytes)");
  expect_corruption(good.substr(0, 10), "time_ms at offset 9 runs past the end (10 bytes)");
  expect_corruption(good.substr(0, 19), "length of kind at offset 17 runs past the end");

  std::string bad_version = good;
  bad_version[0] = 3;
  expect_corruption(bad_version, "format version 3 at offset 0, this kvgov reads 1 and 2");

  // kind's length says 0x7fffffff.
  std::string long_field = good;
  long_field.replace(17, 4, std::string("\x7f\xff\xff\xff", 4));
  expect_corruption(long_field, "field kind at offset 17 has length 2147483647, past the end");

  // The last field (hash) one byte short.
  expect_corruption(good.substr(0, good.size() - 1), "field hash at offset");

  expect_corruption(good + "x", "1 trailing bytes at offset " + std::to_string(good.size()));

  std::string huge(kMaxRowBytes + 1, '\0');
  huge[0] = 1;
  expect_corruption(huge, "1048577 bytes, over the 1048576-byte limit");
}

// The real store, with every synced write slowed down (as a disk's fsync
// is) and counted, and, when `fail_next` is set, the next one refused.
class SlowSyncStore final : public store::Store {
 public:
  explicit SlowSyncStore(store::Store* real) : real_(real) {}
  Status Write(std::span<const WriteOp> ops, bool sync) override {
    if (sync) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      synced_writes.fetch_add(1);
      if (fail_next.exchange(false)) return Status::IOError("store: injected failure");
    }
    return real_->Write(ops, sync);
  }
  Result<std::optional<std::string>> Get(Column column, std::string_view key) const override {
    return real_->Get(column, key);
  }
  Status Scan(Column column, std::string_view begin, std::string_view end,
              const std::function<bool(std::string_view, std::string_view)>& visit) const override {
    return real_->Scan(column, begin, end, visit);
  }
  Result<std::optional<std::string>> LastKey(Column column) const override {
    return real_->LastKey(column);
  }
  Status SyncWal() override { return real_->SyncWal(); }
  Status ResumeCompactions() override { return real_->ResumeCompactions(); }
  Status PutFlushed(store::Column column, std::string_view key, std::string_view value) override {
    return real_->PutFlushed(column, key, value);
  }
  Result<bool> ReadPinned(
      store::Column column, std::string_view key,
      const std::function<Status(std::string_view value)>& read) const override {
    return real_->ReadPinned(column, key, read);
  }
  Status FlushForTest() override { return real_->FlushForTest(); }
  const std::string& dir() const override { return real_->dir(); }

  std::atomic<int> synced_writes{0};
  std::atomic<bool> fail_next{false};

 private:
  store::Store* const real_;
};

class JournalTest : public ::testing::Test {
 protected:
  void SetUp() override { OpenStore(); }

  void OpenStore() {
    store_.reset();
    Result<std::unique_ptr<store::Store>> opened = store::Store::Open(dir_.string());
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    store_ = std::move(opened).value();
  }

  std::unique_ptr<Journal> OpenJournal() {
    Result<std::unique_ptr<Journal>> journal = Journal::Open(store_.get());
    EXPECT_TRUE(journal.ok()) << journal.status().ToString();
    return journal.ok() ? std::move(journal).value() : nullptr;
  }

  // Appends rows 1..n with distinct kinds, subjects and payloads.
  void AppendRows(Journal& journal, int n) {
    for (int i = 1; i <= n; ++i) {
      Result<Row> row = journal.Append("kind." + std::to_string(i), "subject-" + std::to_string(i),
                                       kBy, R"({"i":)" + std::to_string(i) + "}", 1000 + i);
      ASSERT_TRUE(row.ok()) << row.status().ToString();
    }
  }

  Row StoredRow(uint64_t seq) {
    Result<std::optional<std::string>> bytes = store_->Get(Column::kJournal, KeyU64(seq));
    EXPECT_TRUE(bytes.ok() && bytes->has_value()) << seq;
    Result<Row> row = DecodeRow(bytes.ok() && bytes->has_value() ? **bytes : "");
    EXPECT_TRUE(row.ok()) << row.status().ToString();
    return row.ok() ? *row : Row{};
  }

  void PutRaw(uint64_t seq, std::optional<std::string> bytes) {
    WriteOp op{Column::kJournal, KeyU64(seq), std::move(bytes)};
    ASSERT_TRUE(store_->Write(std::span<const WriteOp>(&op, 1), true).ok());
  }

  VerifyReport MustVerify() {
    Result<VerifyReport> report = Verify(*store_);
    EXPECT_TRUE(report.ok()) << report.status().ToString();
    return report.ok() ? *report : VerifyReport{};
  }

  test_support::ScratchDir dir_{"kvgov_journal_test"};  // outlives the store
  std::unique_ptr<store::Store> store_;
};

TEST_F(JournalTest, EmptyJournal) {
  std::unique_ptr<Journal> journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  EXPECT_EQ(journal->head_seq(), 0u);
  EXPECT_EQ(journal->head_hash(), kZeros);
  Result<std::vector<Row>> rows = journal->Read(0, 10);
  ASSERT_TRUE(rows.ok());
  EXPECT_TRUE(rows->empty());
  VerifyReport report = MustVerify();
  EXPECT_EQ(report.rows, 0u);
  EXPECT_FALSE(report.first_broken_seq.has_value());
}

TEST_F(JournalTest, AppendedRowsChainAndVerify) {
  std::unique_ptr<Journal> journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  Result<Row> first =
      journal->Append("worker.drain", "w1", kBy, R"({"drain":true})", 1700000000000);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, VectorRow());  // the documented vector, through Append

  Result<Row> second =
      journal->Append("lease.transition", "lease-7", kBy, R"({"to":"expired"})", 5);
  Result<Row> third = journal->Append("config", "", kBy, "", 6);
  ASSERT_TRUE(second.ok() && third.ok());
  EXPECT_EQ(second->seq, 2u);
  EXPECT_EQ(third->seq, 3u);
  EXPECT_EQ(second->prev_hash, first->hash);
  EXPECT_EQ(third->prev_hash, second->hash);
  EXPECT_EQ(third->hash, RowHash(*third));
  EXPECT_EQ(third->payload_digest, Sha256Hex(""));
  EXPECT_EQ(journal->head_seq(), 3u);
  EXPECT_EQ(journal->head_hash(), third->hash);
  EXPECT_EQ(StoredRow(2), *second);

  VerifyReport report = MustVerify();
  EXPECT_EQ(report.rows, 3u);
  EXPECT_FALSE(report.first_broken_seq.has_value()) << report.problem;
}

TEST_F(JournalTest, ReadPages) {
  std::unique_ptr<Journal> journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  AppendRows(*journal, 7);

  auto seqs = [](const std::vector<Row>& rows) {
    std::vector<uint64_t> out;
    for (const Row& row : rows) out.push_back(row.seq);
    return out;
  };
  Result<std::vector<Row>> page = journal->Read(0, 3);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(seqs(*page), (std::vector<uint64_t>{1, 2, 3}));
  page = journal->Read(page->back().seq + 1, 3);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(seqs(*page), (std::vector<uint64_t>{4, 5, 6}));
  page = journal->Read(page->back().seq + 1, 3);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(seqs(*page), (std::vector<uint64_t>{7}));
  EXPECT_EQ(page->front(), StoredRow(7));
  page = journal->Read(8, 3);
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->empty());
  page = journal->Read(1, 0);
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->empty());
}

TEST_F(JournalTest, ReadReportsARowThatDoesNotDecode) {
  std::unique_ptr<Journal> journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  AppendRows(*journal, 3);
  PutRaw(2, "garbage");
  Result<std::vector<Row>> rows = journal->Read(1, 10);
  ASSERT_FALSE(rows.ok());
  EXPECT_EQ(rows.status().code(), StatusCode::kCorruption);
  EXPECT_NE(rows.status().message().find("journal row 2: "), std::string::npos)
      << rows.status().ToString();
}

TEST_F(JournalTest, ReopenResumesTheChain) {
  std::string hash_of_3;
  {
    std::unique_ptr<Journal> journal = OpenJournal();
    ASSERT_NE(journal, nullptr);
    AppendRows(*journal, 3);
    hash_of_3 = journal->head_hash();
  }
  OpenStore();
  std::unique_ptr<Journal> journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  EXPECT_EQ(journal->head_seq(), 3u);
  EXPECT_EQ(journal->head_hash(), hash_of_3);
  Result<Row> fourth = journal->Append("config", "after-restart", kBy, "{}", 99);
  ASSERT_TRUE(fourth.ok());
  EXPECT_EQ(fourth->seq, 4u);
  EXPECT_EQ(fourth->prev_hash, hash_of_3);
  VerifyReport report = MustVerify();
  EXPECT_EQ(report.rows, 4u);
  EXPECT_FALSE(report.first_broken_seq.has_value()) << report.problem;
}

// The head's time survives a reopen, so a writer whose clock went back
// across the restart can stamp no earlier row.
TEST_F(JournalTest, HeadTimeIsTheLastRowsAndSurvivesAReopen) {
  {
    std::unique_ptr<Journal> journal = OpenJournal();
    ASSERT_NE(journal, nullptr);
    EXPECT_EQ(journal->head_time_ms(), 0);
    AppendRows(*journal, 3);  // times 1001..1003
    EXPECT_EQ(journal->head_time_ms(), 1003);
  }
  OpenStore();
  std::unique_ptr<Journal> journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  EXPECT_EQ(journal->head_time_ms(), 1003);
}

// A replica that rejoins from a snapshot adopts the fleet's head: the rows
// it never had are an adopted span, which Verify crosses and reports; the
// next row chains to the adopted hash, and a reopen resumes from it.
TEST_F(JournalTest, AdoptedHeadIsAReportedSpanTheChainContinuesFrom) {
  const std::string fleet_hash(64, 'c');
  {
    std::unique_ptr<Journal> journal = OpenJournal();
    ASSERT_NE(journal, nullptr);
    AppendRows(*journal, 2);
    const WriteOp extra{Column::kMeta, "cursor", "9-0"};
    ASSERT_TRUE(journal->AdoptHead(7, fleet_hash, "snapshot 9-0", {&extra, 1}).ok());
    EXPECT_EQ(journal->head_seq(), 7u);
    EXPECT_EQ(journal->head_hash(), fleet_hash);
    EXPECT_EQ(**store_->Get(Column::kMeta, "cursor"), "9-0");
    // Only forward, and at the head only onto the same chain.
    EXPECT_EQ(journal->AdoptHead(5, fleet_hash, "older").code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(journal->AdoptHead(7, std::string(64, 'd'), "fork").code(),
              StatusCode::kFailedPrecondition);
    EXPECT_TRUE(journal->AdoptHead(7, fleet_hash, "again").ok());
    EXPECT_EQ(journal->AdoptHead(8, "not-hex", "bad").code(), StatusCode::kInvalidArgument);
  }
  // Before any row follows it, the span is the head.
  VerifyReport before = MustVerify();
  EXPECT_FALSE(before.first_broken_seq.has_value()) << before.problem;
  ASSERT_EQ(before.adopted.size(), 1u);
  EXPECT_EQ(before.adopted[0], (AdoptedSpan{3, 7, fleet_hash, "snapshot 9-0"}));

  OpenStore();
  std::unique_ptr<Journal> journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  EXPECT_EQ(journal->head_seq(), 7u);
  EXPECT_EQ(journal->head_hash(), fleet_hash);
  Result<Row> eighth = journal->Append("config", "after-rejoin", kBy, "{}", 99);
  ASSERT_TRUE(eighth.ok()) << eighth.status().ToString();
  EXPECT_EQ(eighth->seq, 8u);
  EXPECT_EQ(eighth->prev_hash, fleet_hash);
  OpenStore();
  journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  EXPECT_EQ(journal->head_seq(), 8u);

  VerifyReport report = MustVerify();
  EXPECT_FALSE(report.first_broken_seq.has_value()) << report.problem;
  EXPECT_EQ(report.rows, 3u);
  ASSERT_EQ(report.adopted.size(), 1u);
  // A hole no span accounts for is still a hole.
  PutRaw(8, std::nullopt);
  PutRaw(9, std::string());
  VerifyReport holed = MustVerify();
  EXPECT_EQ(holed.first_broken_seq, std::optional<uint64_t>(8));
}

TEST_F(JournalTest, OpenRefusesAHeadThatDoesNotVerify) {
  {
    std::unique_ptr<Journal> journal = OpenJournal();
    ASSERT_NE(journal, nullptr);
    AppendRows(*journal, 3);
  }
  Row head = StoredRow(3);
  head.kind = "forged";
  PutRaw(3, EncodeRow(head));
  Result<std::unique_ptr<Journal>> journal = Journal::Open(store_.get());
  ASSERT_FALSE(journal.ok());
  EXPECT_EQ(journal.status().code(), StatusCode::kCorruption);
  EXPECT_NE(journal.status().message().find("journal head (seq 3): hash mismatch"),
            std::string::npos)
      << journal.status().ToString();

  PutRaw(3, "garbage");
  journal = Journal::Open(store_.get());
  ASSERT_FALSE(journal.ok());
  EXPECT_EQ(journal.status().code(), StatusCode::kCorruption) << journal.status().ToString();
}

class VerifyTest : public JournalTest {
 protected:
  void SetUp() override {
    JournalTest::SetUp();
    std::unique_ptr<Journal> journal = OpenJournal();
    ASSERT_NE(journal, nullptr);
    AppendRows(*journal, 5);
  }
};

TEST_F(VerifyTest, TamperedPayload) {
  Row row = StoredRow(3);
  row.payload = R"({"i":333})";
  PutRaw(3, EncodeRow(row));
  VerifyReport report = MustVerify();
  EXPECT_EQ(report.rows, 2u);
  EXPECT_EQ(report.first_broken_seq, 3u);
  EXPECT_TRUE(report.problem.starts_with("payload digest mismatch")) << report.problem;
}

TEST_F(VerifyTest, TamperedKind) {
  Row row = StoredRow(2);
  row.kind = "kind.innocent";
  PutRaw(2, EncodeRow(row));
  VerifyReport report = MustVerify();
  EXPECT_EQ(report.rows, 1u);
  EXPECT_EQ(report.first_broken_seq, 2u);
  EXPECT_TRUE(report.problem.starts_with("hash mismatch")) << report.problem;
}

TEST_F(VerifyTest, TamperedRowWithARecomputedHashBreaksTheNextLink) {
  Row row = StoredRow(2);
  row.subject = "someone-else";
  row.hash = RowHash(row);
  PutRaw(2, EncodeRow(row));
  VerifyReport report = MustVerify();
  EXPECT_EQ(report.rows, 2u);
  EXPECT_EQ(report.first_broken_seq, 3u);
  EXPECT_TRUE(report.problem.starts_with("prev_hash mismatch")) << report.problem;
}

TEST_F(VerifyTest, DeletedMiddleRowIsASeqHole) {
  PutRaw(3, std::nullopt);
  VerifyReport report = MustVerify();
  EXPECT_EQ(report.rows, 2u);
  EXPECT_EQ(report.first_broken_seq, 3u);
  EXPECT_EQ(report.problem, "seq hole: row 3 is missing (the next row is 4)");
}

TEST_F(VerifyTest, DeletedFirstRowIsASeqHole) {
  PutRaw(1, std::nullopt);
  VerifyReport report = MustVerify();
  EXPECT_EQ(report.rows, 0u);
  EXPECT_EQ(report.first_broken_seq, 1u);
  EXPECT_EQ(report.problem, "seq hole: row 1 is missing (the next row is 2)");
}

TEST_F(VerifyTest, SwappedRows) {
  std::string two = EncodeRow(StoredRow(2));
  std::string four = EncodeRow(StoredRow(4));
  PutRaw(2, four);
  PutRaw(4, two);
  VerifyReport report = MustVerify();
  EXPECT_EQ(report.rows, 1u);
  EXPECT_EQ(report.first_broken_seq, 2u);
  EXPECT_EQ(report.problem, "seq mismatch: key 2 holds row seq 4");
}

TEST_F(VerifyTest, RowRenumberedIntoItsNeighboursPlace) {
  // Row 4 rewritten as seq 3 (and re-hashed) over the real row 3: its
  // prev_hash still names row 3, not row 2.
  Row row = StoredRow(4);
  row.seq = 3;
  row.hash = RowHash(row);
  PutRaw(3, EncodeRow(row));
  VerifyReport report = MustVerify();
  EXPECT_EQ(report.first_broken_seq, 3u);
  EXPECT_TRUE(report.problem.starts_with("prev_hash mismatch")) << report.problem;
}

TEST_F(VerifyTest, UndecodableRow) {
  std::string bytes = EncodeRow(StoredRow(4));
  PutRaw(4, bytes.substr(0, bytes.size() - 10));
  VerifyReport report = MustVerify();
  EXPECT_EQ(report.rows, 3u);
  EXPECT_EQ(report.first_broken_seq, 4u);
  EXPECT_TRUE(report.problem.starts_with("journal row: field hash at offset")) << report.problem;
}

TEST_F(VerifyTest, OnlyTheFirstBreakIsReported) {
  Row row = StoredRow(4);
  row.payload = "x";
  PutRaw(4, EncodeRow(row));
  PutRaw(2, std::nullopt);
  VerifyReport report = MustVerify();
  EXPECT_EQ(report.first_broken_seq, 2u);
  EXPECT_EQ(report.rows, 1u);
}

TEST_F(JournalTest, ExtraOpsAreWrittenWithTheRow) {
  std::unique_ptr<Journal> journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  std::vector<WriteOp> extra = {
      {Column::kGovernance, "lease/7", "expired"},
      {Column::kStreams, "w1", KeyU64(42)},
  };
  Result<Row> row = journal->Append("lease.transition", "lease/7", kBy, "{}", 1, extra);
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  EXPECT_EQ(*store_->Get(Column::kGovernance, "lease/7"), std::optional<std::string>("expired"));
  EXPECT_EQ(*store_->Get(Column::kStreams, "w1"), std::optional<std::string>(KeyU64(42)));
  EXPECT_EQ(StoredRow(1), *row);
}

TEST_F(JournalTest, AFailedWriteWritesNothingAndLeavesTheHead) {
  std::unique_ptr<Journal> journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  AppendRows(*journal, 2);
  const std::string head = journal->head_hash();

  // The second extra op names no column, so the store refuses the whole
  // batch: neither the row nor the first extra op may land.
  std::vector<WriteOp> extra = {
      {Column::kGovernance, "lease/8", "granted"},
      {static_cast<Column>(42), "x", "y"},
  };
  Result<Row> failed = journal->Append("lease.grant", "lease/8", kBy, "{}", 3, extra);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("journal: append seq 3"), std::string::npos)
      << failed.status().ToString();
  EXPECT_EQ(journal->head_seq(), 2u);
  EXPECT_EQ(journal->head_hash(), head);
  EXPECT_FALSE(store_->Get(Column::kJournal, KeyU64(3))->has_value());
  EXPECT_FALSE(store_->Get(Column::kGovernance, "lease/8")->has_value());

  Result<Row> next = journal->Append("lease.grant", "lease/8", kBy, "{}", 4);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->seq, 3u);
  EXPECT_EQ(next->prev_hash, head);
  EXPECT_FALSE(MustVerify().first_broken_seq.has_value());
}

// Concurrent appends share synced writes, and each still gets its own row
// of one unbroken chain, durable when Append returns.
TEST_F(JournalTest, ConcurrentAppendsShareSyncedWritesInOneChain) {
  SlowSyncStore slow(store_.get());
  Result<std::unique_ptr<Journal>> opened = Journal::Open(&slow);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Journal& journal = **opened;
  constexpr int kThreads = 8;
  constexpr int kEach = 20;
  std::vector<std::thread> writers;
  std::vector<std::vector<uint64_t>> seqs(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string subject = std::to_string(t) + "/" + std::to_string(i);
        Result<Row> row = journal.Append("kind", subject, kBy, "{}", 1000 + i);
        ASSERT_TRUE(row.ok()) << row.status().ToString();
        // Durable on return: the row is in the store as returned.
        EXPECT_EQ(StoredRow(row->seq), *row);
        seqs[t].push_back(row->seq);
      }
    });
  }
  for (std::thread& writer : writers) writer.join();
  std::set<uint64_t> all;
  for (const auto& mine : seqs) all.insert(mine.begin(), mine.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(*all.rbegin(), static_cast<uint64_t>(kThreads * kEach));
  EXPECT_EQ(journal.head_seq(), static_cast<uint64_t>(kThreads * kEach));
  EXPECT_LT(slow.synced_writes.load(), kThreads * kEach / 2)
      << "the appends did not share synced writes";
  const VerifyReport report = MustVerify();
  EXPECT_EQ(report.rows, static_cast<uint64_t>(kThreads * kEach));
  EXPECT_FALSE(report.first_broken_seq.has_value()) << report.problem;
}

// A group whose write fails fails every append in it and moves nothing; the
// next group chains from the head as it was.
TEST_F(JournalTest, AFailedGroupFailsEachOfItsAppendsAndTheNextChainsOn) {
  SlowSyncStore slow(store_.get());
  Result<std::unique_ptr<Journal>> opened = Journal::Open(&slow);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Journal& journal = **opened;
  ASSERT_TRUE(journal.Append("kind", "first", kBy, "{}", 1).ok());
  const std::string head = journal.head_hash();
  slow.fail_next = true;
  std::atomic<int> failed{0};
  std::atomic<int> written{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 6; ++t) {
    writers.emplace_back([&, t] {
      Result<Row> row = journal.Append("kind", "w" + std::to_string(t), kBy, "{}", 2);
      (row.ok() ? written : failed).fetch_add(1);
      if (!row.ok()) {
        EXPECT_NE(row.status().message().find("injected failure"), std::string::npos)
            << row.status().ToString();
      }
    });
  }
  for (std::thread& writer : writers) writer.join();
  EXPECT_GE(failed.load(), 1);
  EXPECT_EQ(failed.load() + written.load(), 6);
  EXPECT_EQ(journal.head_seq(), static_cast<uint64_t>(1 + written.load()));
  Result<Row> next = journal.Append("kind", "after", kBy, "{}", 3);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->seq, static_cast<uint64_t>(2 + written.load()));
  const VerifyReport report = MustVerify();
  EXPECT_EQ(report.rows, next->seq);
  EXPECT_FALSE(report.first_broken_seq.has_value()) << report.problem;
  if (written.load() == 0) {
    EXPECT_EQ(next->prev_hash, head);
  }
}

// A walk resumed from its cursor checks only what was appended since, and
// reports what a whole walk would; damage in the new rows is found.
TEST_F(JournalTest, AResumedWalkChecksTheNewRowsAndReportsAsAWholeOne) {
  std::unique_ptr<Journal> journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  AppendRows(*journal, 5);
  Result<VerifyCursor> first = VerifyFrom(*store_, VerifyCursor{});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->report.rows, 5u);
  EXPECT_EQ(first->next_seq, 6u);
  EXPECT_EQ(first->prev_hash, journal->head_hash());

  for (int i = 0; i < 3; ++i) ASSERT_TRUE(journal->Append("more", "s", kBy, "{}", 10 + i).ok());
  Result<VerifyCursor> resumed = VerifyFrom(*store_, *first);
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(resumed->report.rows, 8u);
  EXPECT_EQ(resumed->next_seq, 9u);
  EXPECT_FALSE(resumed->report.first_broken_seq.has_value()) << resumed->report.problem;
  EXPECT_EQ(resumed->report.rows, MustVerify().rows);

  // Row 9 claims another predecessor: the resumed walk finds it.
  Row forged = StoredRow(8);
  forged.seq = 9;
  forged.prev_hash = kZeros;
  forged.hash = RowHash(forged);
  PutRaw(9, EncodeRow(forged));
  Result<VerifyCursor> broken = VerifyFrom(*store_, *resumed);
  ASSERT_TRUE(broken.ok());
  EXPECT_EQ(broken->report.first_broken_seq, std::optional<uint64_t>(9));
  EXPECT_NE(broken->report.problem.find("prev_hash mismatch"), std::string::npos)
      << broken->report.problem;
  // A broken cursor comes back as it is.
  Result<VerifyCursor> again = VerifyFrom(*store_, *broken);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->report.first_broken_seq, std::optional<uint64_t>(9));
}

// An upgraded kvgov appends format-2 rows after the format-1 rows an older
// one wrote; the chain runs through both.
TEST_F(JournalTest, ChainContinuesFromFormat1Rows) {
  const Row old = VectorRowV1();
  PutRaw(1, EncodeRow(old));
  std::unique_ptr<Journal> journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  EXPECT_EQ(journal->head_hash(), old.hash);
  Result<Row> next = journal->Append("quarantine", "q1", {"local", ""}, "{}", 7);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->format_version, 2u);
  EXPECT_EQ(next->prev_hash, old.hash);
  EXPECT_EQ(StoredRow(2).actor, "local");
  VerifyReport report = MustVerify();
  EXPECT_EQ(report.rows, 2u);
  EXPECT_FALSE(report.first_broken_seq.has_value()) << report.problem;

  // A format-1 row cannot be passed off as format 2: the version is hashed.
  Row relabelled = StoredRow(1);
  relabelled.format_version = 2;
  PutRaw(1, EncodeRow(relabelled));
  report = MustVerify();
  ASSERT_TRUE(report.first_broken_seq.has_value());
  EXPECT_EQ(*report.first_broken_seq, 1u);
}

TEST_F(JournalTest, AppendRefusesJournalOpsAndOversizedRows) {
  std::unique_ptr<Journal> journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  std::vector<WriteOp> sneaky = {{Column::kJournal, KeyU64(9), "forged"}};
  Result<Row> row = journal->Append("config", "", kBy, "{}", 1, sneaky);
  ASSERT_FALSE(row.ok());
  EXPECT_EQ(row.status().code(), StatusCode::kInvalidArgument);

  // Exactly at the limit is fine; one byte more is not.
  const size_t overhead = 49 + 6 + kBy.actor.size() + 3 * 64;  // kind "config", empty subject
  row = journal->Append("config", "", kBy, std::string(kMaxRowBytes - overhead, 'p'), 1);
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  EXPECT_EQ(EncodeRow(*row).size(), kMaxRowBytes);
  row = journal->Append("config", "", kBy, std::string(kMaxRowBytes - overhead + 1, 'p'), 1);
  ASSERT_FALSE(row.ok());
  EXPECT_EQ(row.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(journal->head_seq(), 1u);
  EXPECT_FALSE(MustVerify().first_broken_seq.has_value());
}

TEST_F(JournalTest, ConcurrentAppendsMakeOneGaplessChain) {
  std::unique_ptr<Journal> journal = OpenJournal();
  ASSERT_NE(journal, nullptr);
  constexpr int kThreads = 4;
  constexpr int kPerThread = 25;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        Result<Row> row =
            journal->Append("thread." + std::to_string(t), std::to_string(i), kBy, "{}", i, {});
        if (!row.ok()) ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(journal->head_seq(), uint64_t{kThreads * kPerThread});

  VerifyReport report = MustVerify();
  EXPECT_EQ(report.rows, uint64_t{kThreads * kPerThread});
  EXPECT_FALSE(report.first_broken_seq.has_value()) << report.problem;

  // Each thread's rows are in its own order within the chain.
  Result<std::vector<Row>> rows = journal->Read(1, kThreads * kPerThread);
  ASSERT_TRUE(rows.ok());
  std::vector<int> next(kThreads, 0);
  for (const Row& row : *rows) {
    int t = row.kind.back() - '0';
    EXPECT_EQ(row.subject, std::to_string(next[static_cast<size_t>(t)]++));
  }
}

}  // namespace
}  // namespace kvgov::journal
