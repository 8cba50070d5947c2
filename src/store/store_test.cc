#include "kvgov/store/store.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "testing/scratch_dir.h"

namespace kvgov::store {
namespace {

namespace fs = std::filesystem;

class StoreTest : public ::testing::Test {
 protected:
  std::string Dir(const std::string& name = "store") const { return (root_ / name).string(); }

  static std::unique_ptr<Store> MustOpen(const std::string& dir) {
    Result<std::unique_ptr<Store>> store = Store::Open(dir);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  static Status Put(Store& store, Column column, std::string key, std::string value,
                    bool sync = true) {
    WriteOp op{column, std::move(key), std::move(value)};
    return store.Write(std::span<const WriteOp>(&op, 1), sync);
  }

  static std::vector<std::pair<std::string, std::string>> ScanAll(const Store& store, Column column,
                                                                  std::string_view begin = "",
                                                                  std::string_view end = "") {
    std::vector<std::pair<std::string, std::string>> out;
    Status s = store.Scan(column, begin, end, [&](std::string_view k, std::string_view v) {
      out.emplace_back(k, v);
      return true;
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }

  // Overwrites `count` bytes in the middle of `path` with a pattern that no
  // checksum will accept.
  static void Damage(const fs::path& path, uintmax_t offset, size_t count) {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file.is_open()) << path;
    file.seekp(static_cast<std::streamoff>(offset));
    std::string garbage(count, '\xa5');
    file.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }

  static std::vector<fs::path> FilesEndingWith(const std::string& dir, std::string_view suffix) {
    std::vector<fs::path> out;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (entry.path().filename().string().ends_with(suffix)) out.push_back(entry.path());
    }
    return out;
  }

  test_support::ScratchDir root_{"kvgov_store_test"};
};

TEST(KeyU64Test, SortsNumericallyAndRoundTrips) {
  EXPECT_LT(KeyU64(9), KeyU64(10));
  EXPECT_LT(KeyU64(255), KeyU64(256));
  EXPECT_LT(KeyU64(1), KeyU64(uint64_t{1} << 63));
  EXPECT_EQ(KeyU64(0x0102030405060708), std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{0xdeadbeef}, ~uint64_t{0}}) {
    Result<uint64_t> parsed = ParseKeyU64(KeyU64(v));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, v);
  }
  EXPECT_EQ(ParseKeyU64("short").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, PutGetDeleteScan) {
  std::unique_ptr<Store> store = MustOpen(Dir());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->dir(), Dir());

  for (const char* key : {"a", "b", "c", "d"}) {
    ASSERT_TRUE(Put(*store, Column::kGovernance, key, std::string("v-") + key).ok());
  }
  Result<std::optional<std::string>> got = store->Get(Column::kGovernance, "b");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, std::optional<std::string>("v-b"));

  // Columns are separate key spaces.
  got = store->Get(Column::kStreams, "b");
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());

  WriteOp del{Column::kGovernance, "b", std::nullopt};
  ASSERT_TRUE(store->Write(std::span<const WriteOp>(&del, 1), /*sync=*/false).ok());
  got = store->Get(Column::kGovernance, "b");
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());

  using Rows = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(ScanAll(*store, Column::kGovernance), (Rows{{"a", "v-a"}, {"c", "v-c"}, {"d", "v-d"}}));
  EXPECT_EQ(ScanAll(*store, Column::kGovernance, "b", "d"), (Rows{{"c", "v-c"}}));
  EXPECT_EQ(ScanAll(*store, Column::kGovernance, "c"), (Rows{{"c", "v-c"}, {"d", "v-d"}}));
  EXPECT_EQ(ScanAll(*store, Column::kGovernance, "e"), Rows{});

  // The visitor stops the scan.
  int visited = 0;
  ASSERT_TRUE(store
                  ->Scan(Column::kGovernance, "", "",
                         [&](std::string_view, std::string_view) { return ++visited < 2; })
                  .ok());
  EXPECT_EQ(visited, 2);

  // An empty value is a value, not a delete.
  ASSERT_TRUE(Put(*store, Column::kStreams, "w1", "").ok());
  got = store->Get(Column::kStreams, "w1");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, std::optional<std::string>(""));
}

TEST_F(StoreTest, ScanOfU64KeysIsNumeric) {
  std::unique_ptr<Store> store = MustOpen(Dir());
  ASSERT_NE(store, nullptr);
  for (uint64_t seq : {300, 2, 10, 1}) {
    ASSERT_TRUE(Put(*store, Column::kJournal, KeyU64(seq), std::to_string(seq), false).ok());
  }
  std::vector<std::string> order;
  for (const auto& [key, value] : ScanAll(*store, Column::kJournal, KeyU64(2))) {
    order.push_back(value);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"2", "10", "300"}));

  Result<std::optional<std::string>> last = store->LastKey(Column::kJournal);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, std::optional<std::string>(KeyU64(300)));
  last = store->LastKey(Column::kSnapshots);
  ASSERT_TRUE(last.ok());
  EXPECT_FALSE(last->has_value());
}

TEST_F(StoreTest, RangeDeleteDropsExactlyTheHalfOpenRangeAndSurvivesReopen) {
  {
    std::unique_ptr<Store> store = MustOpen(Dir());
    ASSERT_NE(store, nullptr);
    for (uint64_t seq = 1; seq <= 6; ++seq) {
      ASSERT_TRUE(Put(*store, Column::kEventLog, KeyU64(seq), std::to_string(seq), false).ok());
    }
    ASSERT_TRUE(store->FlushForTest().ok());  // some of the range in a table file
    ASSERT_TRUE(Put(*store, Column::kEventLog, KeyU64(7), "7", false).ok());
    // [2, 5) and a put after it, in one write.
    std::vector<WriteOp> ops = {{Column::kEventLog, KeyU64(2), std::nullopt, KeyU64(5)},
                                {Column::kSnapshots, "w1", "base"}};
    ASSERT_TRUE(store->Write(ops, /*sync=*/true).ok());
  }
  std::unique_ptr<Store> store = MustOpen(Dir());
  ASSERT_NE(store, nullptr);
  std::vector<std::string> left;
  for (const auto& [key, value] : ScanAll(*store, Column::kEventLog, "")) left.push_back(value);
  EXPECT_EQ(left, (std::vector<std::string>{"1", "5", "6", "7"}));
  EXPECT_EQ(*store->Get(Column::kSnapshots, "w1"), std::optional<std::string>("base"));
}

size_t TableFiles(const std::string& dir) {
  size_t tables = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    tables += entry.path().extension() == ".sst";
  return tables;
}

// `flushes` table files of the event log, each rewriting the same two keys:
// files whose ranges overlap, which level 0 merges into one once it holds 4
// (RocksDB's default trigger; files that do not overlap would only move).
Status FlushOverlappingTables(Store& store, int flushes) {
  for (int i = 0; i < flushes; ++i) {
    std::vector<WriteOp> ops = {{Column::kEventLog, KeyU64(0), std::to_string(i)},
                                {Column::kEventLog, KeyU64(1), std::to_string(i)}};
    KVGOV_RETURN_IF_ERROR(store.Write(ops, /*sync=*/false));
    KVGOV_RETURN_IF_ERROR(store.FlushForTest());
  }
  return Status::Ok();
}

// True once `dir` holds fewer than `tables` table files, within `wait`.
bool CompactsBelow(const std::string& dir, size_t tables, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (TableFiles(dir) >= tables) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

TEST_F(StoreTest, HeldCompactionsStartOnlyWhenResumed) {
  constexpr int kFlushes = 8;
  // Unheld, eight level-0 files are compacted: what the held store must not do.
  {
    std::unique_ptr<Store> store = MustOpen(Dir("unheld"));
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(FlushOverlappingTables(*store, kFlushes).ok());
    EXPECT_TRUE(CompactsBelow(Dir("unheld"), kFlushes, std::chrono::seconds(10)));
  }
  Result<std::unique_ptr<Store>> held =
      Store::Open(Dir(), {.on_fatal = {}, .hold_compactions = true});
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_TRUE(FlushOverlappingTables(**held, kFlushes).ok());
  // Every write is taken meanwhile (no stall on level 0), and a second
  // watched for compaction sees none.
  EXPECT_FALSE(CompactsBelow(Dir(), kFlushes, std::chrono::seconds(1)));
  ASSERT_TRUE((*held)->ResumeCompactions().ok());
  EXPECT_TRUE(CompactsBelow(Dir(), kFlushes, std::chrono::seconds(10)));
  EXPECT_TRUE((*held)->ResumeCompactions().ok());  // once resumed, a no-op
  EXPECT_EQ(*(*held)->Get(Column::kEventLog, KeyU64(1)),
            std::optional<std::string>(std::to_string(kFlushes - 1)));
}

TEST_F(StoreTest, WriteAcrossColumnsIsAtomic) {
  std::unique_ptr<Store> store = MustOpen(Dir());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(Put(*store, Column::kGovernance, "lease/1", "old").ok());

  std::vector<WriteOp> ops = {
      {Column::kJournal, KeyU64(1), "row"},
      {Column::kGovernance, "lease/1", std::nullopt},
      {Column::kGovernance, "lease/2", "new"},
      {Column::kStreams, "w1", KeyU64(7)},
  };
  ASSERT_TRUE(store->Write(ops, /*sync=*/true).ok());
  EXPECT_EQ(*store->Get(Column::kJournal, KeyU64(1)), std::optional<std::string>("row"));
  EXPECT_FALSE(store->Get(Column::kGovernance, "lease/1")->has_value());
  EXPECT_EQ(*store->Get(Column::kGovernance, "lease/2"), std::optional<std::string>("new"));
  EXPECT_EQ(*store->Get(Column::kStreams, "w1"), std::optional<std::string>(KeyU64(7)));

  // A batch with an op for a column outside the enum fails as a whole.
  std::vector<WriteOp> bad = {
      {Column::kGovernance, "lease/3", "never"},
      {static_cast<Column>(42), "x", "y"},
  };
  Status s = store->Write(bad, /*sync=*/true);
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_FALSE(store->Get(Column::kGovernance, "lease/3")->has_value());
}

TEST_F(StoreTest, ReopenKeepsDataInEveryColumn) {
  {
    std::unique_ptr<Store> store = MustOpen(Dir());
    ASSERT_NE(store, nullptr);
    std::vector<WriteOp> ops = {
        {Column::kJournal, KeyU64(1), "j"},   {Column::kGovernance, "g", "g"},
        {Column::kStreams, "s", "s"},         {Column::kEventLog, "e", "e"},
        {Column::kSnapshots, "snap", "snap"},
    };
    ASSERT_TRUE(store->Write(ops, /*sync=*/true).ok());
    ASSERT_TRUE(Put(*store, Column::kGovernance, "unsynced", "u", /*sync=*/false).ok());
  }
  std::unique_ptr<Store> store = MustOpen(Dir());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->Get(Column::kJournal, KeyU64(1)), std::optional<std::string>("j"));
  EXPECT_EQ(*store->Get(Column::kGovernance, "g"), std::optional<std::string>("g"));
  EXPECT_EQ(*store->Get(Column::kGovernance, "unsynced"), std::optional<std::string>("u"));
  EXPECT_EQ(*store->Get(Column::kStreams, "s"), std::optional<std::string>("s"));
  EXPECT_EQ(*store->Get(Column::kEventLog, "e"), std::optional<std::string>("e"));
  EXPECT_EQ(*store->Get(Column::kSnapshots, "snap"), std::optional<std::string>("snap"));
  EXPECT_EQ(*store->Get(Column::kMeta, "format_version"),
            std::optional<std::string>(std::string("\0\0\0\1", 4)));
  EXPECT_TRUE(store->SyncWal().ok());
}

TEST_F(StoreTest, ReopenAfterFlushReadsTableFiles) {
  {
    std::unique_ptr<Store> store = MustOpen(Dir());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(Put(*store, Column::kEventLog, "k", "v").ok());
    ASSERT_TRUE(store->FlushForTest().ok());
  }
  EXPECT_FALSE(FilesEndingWith(Dir(), ".sst").empty());
  std::unique_ptr<Store> store = MustOpen(Dir());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->Get(Column::kEventLog, "k"), std::optional<std::string>("v"));
}

TEST_F(StoreTest, PutFlushedIsInATableFileWithoutTheWriteAheadLog) {
  std::mt19937_64 rng(7);
  std::string big(1 << 20, '\0');
  for (char& c : big) c = static_cast<char>(rng());  // incompressible, found verbatim
  std::unique_ptr<Store> store = MustOpen(Dir());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->FlushForTest().ok());  // the format version, out of the log
  ASSERT_TRUE(Put(*store, Column::kJournal, "logged", "only in the log").ok());
  ASSERT_TRUE(store->PutFlushed(Column::kSnapshots, "w0", big).ok());
  // Not one write-ahead log holds the value...
  const std::string_view marker = std::string_view(big).substr(4096, 64);
  for (const fs::path& wal : FilesEndingWith(Dir(), ".log")) {
    std::ifstream in(wal, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes.find(marker), std::string::npos) << wal;
  }
  // ...and a crash that lost every log still finds it: a copy of the store
  // while it runs, without the logs, opened.
  fs::create_directories(Dir("copy"));
  for (const auto& entry : fs::directory_iterator(Dir())) {
    if (entry.path().extension() == ".log") continue;
    fs::copy_file(entry.path(), fs::path(Dir("copy")) / entry.path().filename());
  }
  std::unique_ptr<Store> copy = MustOpen(Dir("copy"));
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(*copy->Get(Column::kSnapshots, "w0"), std::optional<std::string>(big));
  // The logged write was only in a log, so the copy really lacks them.
  EXPECT_EQ(*copy->Get(Column::kJournal, "logged"), std::optional<std::string>());
}

TEST_F(StoreTest, ReadPinnedHandsOverTheValueOrSaysAbsent) {
  std::unique_ptr<Store> store = MustOpen(Dir());
  ASSERT_NE(store, nullptr);
  int calls = 0;
  std::string seen;
  auto read = [&](std::string_view value) {
    ++calls;
    seen = value;
    return Status::Ok();
  };
  Result<bool> absent = store->ReadPinned(Column::kSnapshots, "w0", read);
  ASSERT_TRUE(absent.ok()) << absent.status().ToString();
  EXPECT_FALSE(*absent);
  EXPECT_EQ(calls, 0);

  ASSERT_TRUE(Put(*store, Column::kSnapshots, "w0", "resident").ok());
  Result<bool> present = store->ReadPinned(Column::kSnapshots, "w0", read);
  ASSERT_TRUE(present.ok()) << present.status().ToString();
  EXPECT_TRUE(*present);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, "resident");

  // What the reader says is what the caller hears.
  Result<bool> refused = store->ReadPinned(Column::kSnapshots, "w0", [](std::string_view) {
    return Status::Corruption("not a snapshot");
  });
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kCorruption);
}

TEST_F(StoreTest, OtherFormatVersionIsRefused) {
  {
    std::unique_ptr<Store> store = MustOpen(Dir());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(Put(*store, Column::kMeta, "format_version", std::string("\0\0\0\2", 4)).ok());
  }
  Result<std::unique_ptr<Store>> reopened = Store::Open(Dir());
  ASSERT_FALSE(reopened.ok());
  EXPECT_EQ(reopened.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(reopened.status().message(),
            "store " + Dir() + ": format version 2, this kvgov reads 1");
}

TEST_F(StoreTest, MalformedFormatVersionIsRefused) {
  {
    std::unique_ptr<Store> store = MustOpen(Dir());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(Put(*store, Column::kMeta, "format_version", "1").ok());
  }
  Result<std::unique_ptr<Store>> reopened = Store::Open(Dir());
  ASSERT_FALSE(reopened.ok());
  EXPECT_EQ(reopened.status().code(), StatusCode::kCorruption);
  EXPECT_NE(reopened.status().message().find("1 bytes, not 4"), std::string::npos)
      << reopened.status().ToString();
}

TEST_F(StoreTest, DataWithoutFormatVersionIsRefused) {
  {
    std::unique_ptr<Store> store = MustOpen(Dir());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(Put(*store, Column::kGovernance, "g", "g").ok());
    WriteOp del{Column::kMeta, "format_version", std::nullopt};
    ASSERT_TRUE(store->Write(std::span<const WriteOp>(&del, 1), true).ok());
  }
  Result<std::unique_ptr<Store>> reopened = Store::Open(Dir());
  ASSERT_FALSE(reopened.ok());
  EXPECT_EQ(reopened.status().code(), StatusCode::kCorruption);
  EXPECT_NE(reopened.status().message().find("no format version"), std::string::npos)
      << reopened.status().ToString();
}

TEST_F(StoreTest, SecondOpenOfOneDirectoryFailsOnTheLock) {
  std::unique_ptr<Store> first = MustOpen(Dir());
  ASSERT_NE(first, nullptr);
  Result<std::unique_ptr<Store>> second = Store::Open(Dir());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kIOError) << second.status().ToString();
  EXPECT_NE(second.status().message().find("LOCK"), std::string::npos)
      << second.status().ToString();
  // Whoever opens it (serve, journal verify, cert verify) says why.
  EXPECT_NE(second.status().message().find("is in use: another process (a kvgov daemon on this "
                                           "data dir?) holds its lock; stop it, or point at a "
                                           "copy of the data dir"),
            std::string::npos)
      << second.status().ToString();

  // The first store still works, and the directory opens once it is closed.
  ASSERT_TRUE(Put(*first, Column::kGovernance, "k", "v").ok());
  first.reset();
  EXPECT_NE(MustOpen(Dir()), nullptr);
}

TEST_F(StoreTest, UnusableDirectoryIsAnIOError) {
  ASSERT_TRUE(std::ofstream(root_ / "file").good());
  Result<std::unique_ptr<Store>> store = Store::Open((root_ / "file" / "store").string());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kIOError) << store.status().ToString();
}

TEST_F(StoreTest, DamagedTableFileIsCorruptionNamingTheFile) {
  {
    std::unique_ptr<Store> store = MustOpen(Dir());
    ASSERT_NE(store, nullptr);
    // Enough data for several blocks, with values that do not compress away.
    std::vector<WriteOp> ops;
    for (uint64_t i = 0; i < 4000; ++i) {
      std::string value;
      for (uint64_t j = 0; j < 16; ++j) value += KeyU64(i * 2654435761u + j * 40503u);
      ops.push_back({Column::kJournal, KeyU64(i), std::move(value)});
    }
    ASSERT_TRUE(store->Write(ops, /*sync=*/true).ok());
    ASSERT_TRUE(store->FlushForTest().ok());
  }
  // Damage a copy: the original stays good.
  fs::copy(Dir(), Dir("copy"), fs::copy_options::recursive);
  // The journal's table is the big one (meta has its own, tiny).
  std::vector<fs::path> tables = FilesEndingWith(Dir("copy"), ".sst");
  ASSERT_FALSE(tables.empty());
  std::sort(tables.begin(), tables.end(), [](const fs::path& a, const fs::path& b) {
    return fs::file_size(a) > fs::file_size(b);
  });
  uintmax_t size = fs::file_size(tables[0]);
  ASSERT_GT(size, 100'000u);
  Damage(tables[0], size / 3, 64);  // inside the data blocks, before the index

  Status status;
  Result<std::unique_ptr<Store>> copy = Store::Open(Dir("copy"));
  if (!copy.ok()) {
    status = copy.status();
  } else {
    status = (*copy)->Scan(Column::kJournal, "", "",
                           [](std::string_view, std::string_view) { return true; });
  }
  ASSERT_EQ(status.code(), StatusCode::kCorruption) << status.ToString();
  EXPECT_NE(status.message().find(tables[0].filename().string()), std::string::npos)
      << status.ToString();

  std::unique_ptr<Store> original = MustOpen(Dir());
  ASSERT_NE(original, nullptr);
  EXPECT_EQ(ScanAll(*original, Column::kJournal).size(), 4000u);
}

// 100 synced writes of 1000 bytes, left in the WAL (no flush); returns the
// WAL's path.
fs::path WriteWal(const std::string& dir) {
  {
    Result<std::unique_ptr<Store>> store = Store::Open(dir);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (!store.ok()) return {};
    for (uint64_t i = 0; i < 100; ++i) {
      WriteOp op{Column::kJournal, KeyU64(i), std::string(1000, static_cast<char>('a' + i % 26))};
      EXPECT_TRUE((*store)->Write(std::span<const WriteOp>(&op, 1), true).ok());
    }
  }
  fs::path wal;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".log" &&
        (wal.empty() || entry.file_size() > fs::file_size(wal))) {
      wal = entry.path();
    }
  }
  return wal;
}

TEST_F(StoreTest, DamagedWalRecordIsCorruptionNotASilentPrefix) {
  fs::path wal = WriteWal(Dir());
  ASSERT_FALSE(wal.empty());
  ASSERT_GT(fs::file_size(wal), 100'000u);
  // Half-way through the log: 50 acknowledged writes follow the damage.
  Damage(wal, fs::file_size(wal) / 2, 8);
  Result<std::unique_ptr<Store>> store = Store::Open(Dir());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kCorruption) << store.status().ToString();
  // RocksDB's last log line locates the damage: the WAL file.
  EXPECT_NE(store.status().message().find(wal.filename().string()), std::string::npos)
      << store.status().ToString();
}

TEST_F(StoreTest, WalCutShortByACrashDropsOnlyTheTornRecord) {
  fs::path wal = WriteWal(Dir());
  ASSERT_FALSE(wal.empty());
  fs::resize_file(wal, fs::file_size(wal) - 500);  // inside the last record
  std::unique_ptr<Store> store = MustOpen(Dir());
  ASSERT_NE(store, nullptr);
  std::vector<std::pair<std::string, std::string>> rows = ScanAll(*store, Column::kJournal);
  ASSERT_EQ(rows.size(), 99u);
  EXPECT_EQ(rows.back().first, KeyU64(98));
}

TEST_F(StoreTest, TruncatedCurrentIsRefused) {
  { ASSERT_NE(MustOpen(Dir()), nullptr); }
  fs::resize_file(fs::path(Dir()) / "CURRENT", 0);
  Result<std::unique_ptr<Store>> store = Store::Open(Dir());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kCorruption) << store.status().ToString();
  EXPECT_NE(store.status().message().find("CURRENT"), std::string::npos)
      << store.status().ToString();
}

TEST_F(StoreTest, TruncatedManifestIsRefused) {
  {
    std::unique_ptr<Store> store = MustOpen(Dir());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(Put(*store, Column::kGovernance, "k", "v").ok());
    ASSERT_TRUE(store->FlushForTest().ok());
  }
  std::vector<fs::path> manifests = FilesEndingWith(Dir(), "");
  std::erase_if(manifests,
                [](const fs::path& p) { return !p.filename().string().starts_with("MANIFEST-"); });
  ASSERT_EQ(manifests.size(), 1u);
  const uintmax_t size = fs::file_size(manifests[0]);
  // Cut inside the first record (RocksDB finds no store description), and
  // half-way (the format version and the flushed tables are no longer
  // listed: kvgov refuses before RocksDB would delete those tables).
  for (uintmax_t cut : {uintmax_t{0}, uintmax_t{20}, size / 2}) {
    SCOPED_TRACE("MANIFEST cut to " + std::to_string(cut) + " of " + std::to_string(size));
    fs::remove_all(Dir("copy"));
    fs::copy(Dir(), Dir("copy"), fs::copy_options::recursive);
    fs::resize_file(fs::path(Dir("copy")) / manifests[0].filename(), cut);
    Result<std::unique_ptr<Store>> store = Store::Open(Dir("copy"));
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), StatusCode::kCorruption) << store.status().ToString();
    EXPECT_NE(store.status().message().find("MANIFEST"), std::string::npos)
        << store.status().ToString();
    // Nothing was deleted: the tables are still there for a person to look at.
    EXPECT_EQ(FilesEndingWith(Dir("copy"), ".sst").size(), FilesEndingWith(Dir(), ".sst").size());
  }
  EXPECT_NE(MustOpen(Dir()), nullptr);
}

TEST_F(StoreTest, MissingCurrentBesideStoreFilesIsNotRecreated) {
  { ASSERT_NE(MustOpen(Dir()), nullptr); }
  fs::remove(fs::path(Dir()) / "CURRENT");
  Result<std::unique_ptr<Store>> store = Store::Open(Dir());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kCorruption) << store.status().ToString();
  EXPECT_NE(store.status().message().find("CURRENT is missing"), std::string::npos)
      << store.status().ToString();
}

}  // namespace
}  // namespace kvgov::store
