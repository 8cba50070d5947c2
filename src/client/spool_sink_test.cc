#include "kvgov/client/spool_sink.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <thread>
#include <vector>

#include "kvgov/spool/spool_reader.h"
#include "testing/scratch_dir.h"

namespace kvgov::client {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using ::testing::HasSubstr;

class SpoolSinkTest : public ::testing::Test {
 protected:
  // A sink on the test's directory; `set` changes the other options.
  std::unique_ptr<SpoolSink> MakeSink(const std::function<void(SpoolSinkOptions&)>& set = nullptr) {
    SpoolSinkOptions options;
    options.dir = dir_.string();
    if (set) set(options);
    Result<std::unique_ptr<SpoolSink>> sink = SpoolSink::Create(std::move(options));
    EXPECT_TRUE(sink.ok()) << sink.status().ToString();
    return std::move(sink).value();
  }

  // Files in the directory with this suffix, in name order.
  std::vector<fs::path> Files(const std::string& suffix) const {
    std::vector<fs::path> out;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir_.path())) {
      const std::string name = entry.path().filename().string();
      if (name.size() >= suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        out.push_back(entry.path());
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // Every line of every published file, in order, decoded as kvgov reads
  // spool files.
  std::vector<IngestEvent> Published() const {
    std::vector<IngestEvent> events;
    for (const fs::path& path : Files(".ndjson")) {
      Result<std::unique_ptr<spool::SpoolReader>> reader = spool::SpoolReader::Open(path);
      EXPECT_TRUE(reader.ok());
      for (;;) {
        Result<std::optional<spool::SpoolLine>> line = (*reader)->Next();
        EXPECT_TRUE(line.ok());
        if (!line.ok() || !line->has_value()) break;
        EXPECT_TRUE((*line)->event.ok()) << (*line)->event.status().ToString();
        if ((*line)->event.ok()) events.push_back(std::move((*line)->event).value());
      }
    }
    return events;
  }

  test_support::ScratchDir dir_{"kvgov_spool_sink_test"};
};

Event Store(int i) {
  KVTransfer transfer;
  transfer.direction = KVTransferDirection::kStore;
  transfer.span.span_digest = "span-" + std::to_string(i);
  transfer.span.to_tier = ResidencyTier::kHBM;
  SpanLocation where;
  where.worker = "w1";
  where.token_ids = {1, 2, 3, i};
  return TransferEvent(std::move(transfer), std::move(where));
}

int SpanNumber(const IngestEvent& event) {
  return std::stoi(std::get<KVTransfer>(event.record).span.span_digest.substr(5));
}

TEST_F(SpoolSinkTest, WritesLinesAndPublishesThemOnFlush) {
  auto sink = MakeSink([](SpoolSinkOptions& o) {
    o.max_file_bytes = 0;
    o.max_file_age = milliseconds(0);
  });
  EXPECT_TRUE(Files(".tmp").empty());  // nothing until the first event
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(sink->Emit(Store(i)).ok());
  EXPECT_EQ(Files(".ndjson.tmp").size(), 1u);
  EXPECT_TRUE(Files(".ndjson").empty());  // not yet visible to kvgov

  ASSERT_TRUE(sink->Flush(milliseconds(0)).ok());
  EXPECT_TRUE(Files(".tmp").empty());
  ASSERT_EQ(Files(".ndjson").size(), 1u);
  const std::string name = Files(".ndjson")[0].filename().string();
  EXPECT_TRUE(std::regex_match(name, std::regex(R"(kvgov-\d{13}-\d+-\d{6}\.ndjson)"))) << name;

  std::vector<IngestEvent> events = Published();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(std::get<KVTransfer>(events[2].record), std::get<KVTransfer>(Store(2).record));
  EXPECT_EQ(events[2].residency->token_ids, (std::vector<int64_t>{1, 2, 3, 2}));

  SinkStats stats = sink->stats();
  EXPECT_EQ(stats.queued, 3u);
  EXPECT_EQ(stats.sent, 3u);
  EXPECT_EQ(stats.batches, 1u);
  EXPECT_EQ(stats.pending, 0u);
}

TEST_F(SpoolSinkTest, RotatesBySizeKeepingOrder) {
  auto sink = MakeSink([](SpoolSinkOptions& o) {
    o.prefix = "nixl";
    o.max_file_bytes = 400;
    o.max_file_age = milliseconds(0);
  });
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(sink->Emit(Store(i)).ok());
  ASSERT_TRUE(sink->Close().ok());
  EXPECT_GE(Files(".ndjson").size(), 4u);
  std::vector<IngestEvent> events = Published();
  ASSERT_EQ(events.size(), 20u);
  // Names sort in creation order, so reading them in order replays the
  // events in the order they were emitted.
  for (int i = 0; i < 20; ++i) EXPECT_EQ(SpanNumber(events[static_cast<size_t>(i)]), i);
}

TEST_F(SpoolSinkTest, PublishesByAgeWithoutAnotherEmit) {
  auto sink = MakeSink([](SpoolSinkOptions& o) { o.max_file_age = milliseconds(30); });
  ASSERT_TRUE(sink->Emit(Store(1)).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Files(".ndjson").empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(Files(".ndjson").size(), 1u);
  EXPECT_EQ(sink->stats().batches, 1u);
}

TEST_F(SpoolSinkTest, SyncsEveryEventWhenAskedTo) {
  auto sink = MakeSink([](SpoolSinkOptions& o) { o.fsync = FsyncPolicy::kEveryEvent; });
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(sink->Emit(Store(i)).ok());
  ASSERT_TRUE(sink->Close().ok());
  EXPECT_EQ(Published().size(), 5u);
}

TEST_F(SpoolSinkTest, RefusesEventsItCannotWrite) {
  auto sink = MakeSink();
  Event bad = Store(1);
  std::get<KVTransfer>(bad.record).span.span_digest = "\xc0\xaf";
  EXPECT_EQ(sink->Emit(bad).code(), StatusCode::kInvalidArgument);
  Event huge = Store(2);
  huge.location->token_ids.assign(200000, 1234567);  // ~1.6 MB encoded
  Status too_long = sink->Emit(huge);
  EXPECT_EQ(too_long.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.message(), HasSubstr("over the spool line limit"));
  EXPECT_EQ(sink->stats().invalid, 2u);
  ASSERT_TRUE(sink->Close().ok());
  EXPECT_TRUE(Files("").empty());  // no empty file published
}

TEST_F(SpoolSinkTest, ClosedSinkRefusesEvents) {
  auto sink = MakeSink();
  ASSERT_TRUE(sink->Emit(Store(1)).ok());
  ASSERT_TRUE(sink->Close().ok());
  EXPECT_EQ(Files(".ndjson").size(), 1u);
  EXPECT_EQ(sink->Emit(Store(2)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(sink->stats().dropped, 1u);
  EXPECT_TRUE(sink->Close().ok());
}

TEST_F(SpoolSinkTest, ManyThreadsWriteWholeLines) {
  auto sink = MakeSink([](SpoolSinkOptions& o) { o.max_file_bytes = 64 << 10; });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) EXPECT_TRUE(sink->Emit(Store(t * 1000 + i)).ok());
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_TRUE(sink->Close().ok());
  std::vector<IngestEvent> events = Published();
  ASSERT_EQ(events.size(), 4000u);
  std::vector<int> seen;
  for (const IngestEvent& event : events) seen.push_back(SpanNumber(event));
  std::sort(seen.begin(), seen.end());
  for (int i = 0; i < 4000; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], i);
}

TEST_F(SpoolSinkTest, CreateChecksItsOptions) {
  SpoolSinkOptions options;
  options.dir = dir_.string();
  options.prefix = "a/b";
  EXPECT_EQ(SpoolSink::Create(options).status().code(), StatusCode::kInvalidArgument);
  options.prefix = "";
  EXPECT_EQ(SpoolSink::Create(options).status().code(), StatusCode::kInvalidArgument);
  options.prefix = "ok";
  options.dir = (dir_ / "missing").string();
  EXPECT_EQ(SpoolSink::Create(options).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kvgov::client
