// Journal append latency (one synced RocksDB write per row), group commit
// (concurrent writers sharing synced writes) and Verify throughput.
//   cmake -B build-bench -DCMAKE_BUILD_TYPE=Release -DKVGOV_BUILD_BENCHMARKS=ON
//   cmake --build build-bench --target kvgov_journal_bench
//   build-bench/src/journal/kvgov_journal_bench
// The store lives under the system temp directory: the append figures are
// that disk's fsync latency plus kvgov's work.

#include <benchmark/benchmark.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "testing/bench_smoke.h"
#include "testing/scratch_dir.h"
#include "kvgov/core/digest.h"
#include "kvgov/journal/journal.h"

namespace kvgov::journal {
namespace {

// A store in a fresh temp directory, removed afterwards.
class TempStore {
 public:
  explicit TempStore(const std::string& name) : dir_("kvgov_journal_bench_" + name) {
    Result<std::unique_ptr<store::Store>> opened = store::Store::Open(dir_.string());
    status_ = opened.status();
    if (opened.ok()) store_ = std::move(opened).value();
  }
  TempStore(const TempStore&) = delete;
  TempStore& operator=(const TempStore&) = delete;

  const Status& status() const { return status_; }
  // REQUIRES: status().ok()
  store::Store& store() { return *store_; }

 private:
  test_support::ScratchDir dir_;  // outlives the store
  Status status_;
  std::unique_ptr<store::Store> store_;
};

std::string Payload(size_t bytes) {
  std::string payload = R"({"decision":")";
  payload.resize(bytes > payload.size() + 2 ? bytes - 2 : payload.size(), 'x');
  return payload + "\"}";
}

// One Append: build, hash and encode the row, one synced write, advance.
void BM_JournalAppendSynced(benchmark::State& state) {
  TempStore temp("append");
  if (!temp.status().ok()) {
    state.SkipWithError(temp.status().ToString().c_str());
    return;
  }
  Result<std::unique_ptr<Journal>> journal = Journal::Open(&temp.store());
  if (!journal.ok()) {
    state.SkipWithError(journal.status().ToString().c_str());
    return;
  }
  const std::string payload = Payload(static_cast<size_t>(state.range(0)));
  int64_t time_ms = 1700000000000;
  for (auto _ : state) {
    Result<Row> row =
        (*journal)->Append("lease.transition", "lease-42", {"token:bench", ""}, payload, ++time_ms);
    if (!row.ok()) {
      state.SkipWithError(row.status().ToString().c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
// Wall time: the fsync is the cost, and it is not CPU time.
BENCHMARK(BM_JournalAppendSynced)
    ->Arg(256)
    ->Arg(4096)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Rows per second that `writers` threads append to `journal`, `rows` in all.
double AppendRate(Journal& journal, int writers, int rows, std::string* error) {
  const std::string payload = Payload(256);
  std::mutex error_mu;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      for (int i = w; i < rows; i += writers) {
        Result<Row> row = journal.Append("lease.transition", "lease-" + std::to_string(i),
                                         {"token:bench", ""}, payload, 1700000000000 + i);
        if (!row.ok()) {
          std::lock_guard lock(error_mu);
          *error = row.status().ToString();
          return;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return rows / seconds;
}

// Group commit, side by side on one disk: `range(0)` writers sharing synced
// writes, against one writer, whose rate is what any number of writers got
// when every row had an fsync of its own (the journal serialised them).
void BM_JournalGroupCommit(benchmark::State& state) {
  const int writers = static_cast<int>(state.range(0));
  constexpr int kRows = 400;
  double one_writer = 0;
  double grouped = 0;
  for (auto _ : state) {
    for (int pass = 0; pass < 2; ++pass) {
      TempStore temp(pass == 0 ? "one_writer" : "grouped");
      Result<std::unique_ptr<Journal>> journal =
          temp.status().ok() ? Journal::Open(&temp.store()) : temp.status();
      if (!journal.ok()) {
        state.SkipWithError(journal.status().ToString().c_str());
        return;
      }
      std::string error;
      const double rate = AppendRate(**journal, pass == 0 ? 1 : writers, kRows, &error);
      if (!error.empty()) {
        state.SkipWithError(error.c_str());
        return;
      }
      (pass == 0 ? one_writer : grouped) = rate;
    }
  }
  state.counters["rows_per_s_one_writer"] = one_writer;
  state.counters["rows_per_s_grouped"] = grouped;
  state.counters["ratio_grouped_vs_one_writer"] = grouped / one_writer;
}
BENCHMARK(BM_JournalGroupCommit)
    ->Arg(8)
    ->Arg(32)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Writes a chain of `rows` rows with 256-byte payloads, flushed into table
// files so a walk reads (and checksums) SSTs.
Status WriteChain(store::Store& store, uint64_t rows) {
  const std::string payload = Payload(256);
  const std::string payload_digest = Sha256Hex(payload);
  std::string prev_hash(64, '0');
  std::vector<store::WriteOp> batch;
  for (uint64_t seq = 1; seq <= rows; ++seq) {
    Row row;
    row.seq = seq;
    row.time_ms = 1700000000000 + static_cast<int64_t>(seq);
    row.kind = "lease.transition";
    row.subject = "lease-" + std::to_string(seq % 1000);
    row.payload = payload;
    row.payload_digest = payload_digest;
    row.prev_hash = prev_hash;
    row.hash = RowHash(row);
    prev_hash = row.hash;
    batch.push_back({store::Column::kJournal, store::KeyU64(seq), EncodeRow(row)});
    if (batch.size() == 1000 || seq == rows) {
      KVGOV_RETURN_IF_ERROR(store.Write(batch, /*sync=*/false));
      batch.clear();
    }
  }
  return store.FlushForTest();
}

// Verify over a chain of `rows` rows.
void BM_JournalVerify(benchmark::State& state) {
  const uint64_t rows = static_cast<uint64_t>(state.range(0));
  TempStore temp("verify");
  Status written = temp.status().ok() ? WriteChain(temp.store(), rows) : temp.status();
  if (!written.ok()) {
    state.SkipWithError(written.ToString().c_str());
    return;
  }
  for (auto _ : state) {
    Result<VerifyReport> report = Verify(temp.store());
    if (!report.ok() || report->rows != rows || report->first_broken_seq.has_value()) {
      state.SkipWithError("verify did not pass");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.counters["rows_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(rows),
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_JournalVerify)->Arg(bench::Sized(100000, 1000))->Unit(benchmark::kMillisecond);

// What the running daemon's chain check costs once the chain has grown by
// 100 rows: VerifyFrom resumed from the cursor of the walk before, against
// the whole walk it replaced, side by side on the same chain.
void BM_JournalVerifyResumed(benchmark::State& state) {
  const uint64_t rows = static_cast<uint64_t>(state.range(0));
  constexpr uint64_t kNewRows = 100;
  TempStore temp("verify_resumed");
  Status written = temp.status().ok() ? WriteChain(temp.store(), rows) : temp.status();
  if (!written.ok()) {
    state.SkipWithError(written.ToString().c_str());
    return;
  }
  // The cursor of a walk that stopped kNewRows rows before the head.
  Result<Row> before_new = [&]() -> Result<Row> {
    KVGOV_ASSIGN_OR_RETURN(
        std::optional<std::string> bytes,
        temp.store().Get(store::Column::kJournal, store::KeyU64(rows - kNewRows)));
    if (!bytes.has_value()) return Status::NotFound("row");
    return DecodeRow(*bytes);
  }();
  if (!before_new.ok()) {
    state.SkipWithError(before_new.status().ToString().c_str());
    return;
  }
  VerifyCursor cursor;
  cursor.report.rows = rows - kNewRows;
  cursor.next_seq = rows - kNewRows + 1;
  cursor.prev_hash = before_new->hash;

  const auto whole_start = std::chrono::steady_clock::now();
  Result<VerifyReport> whole = Verify(temp.store());
  const double whole_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - whole_start).count();
  if (!whole.ok() || whole->rows != rows) {
    state.SkipWithError("the whole walk did not pass");
    return;
  }
  double resumed_s = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    Result<VerifyCursor> resumed = VerifyFrom(temp.store(), cursor);
    resumed_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!resumed.ok() || resumed->report.rows != rows ||
        resumed->report.first_broken_seq.has_value()) {
      state.SkipWithError("the resumed walk did not pass");
      break;
    }
  }
  resumed_s /= static_cast<double>(state.iterations());
  state.counters["whole_walk_ms"] = whole_s * 1e3;
  state.counters["resumed_walk_us"] = resumed_s * 1e6;
  state.counters["ratio_whole_vs_resumed"] = whole_s / resumed_s;
}
BENCHMARK(BM_JournalVerifyResumed)->Arg(bench::Sized(100000, 1000))->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvgov::journal
