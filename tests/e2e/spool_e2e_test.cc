// Spool files end to end: written by the SDK's SpoolSink (or by hand, bad
// lines included), ingested by `kvgov serve --spool-dir` and by
// `kvgov ingest-spool`, through the same path as POST /v1/events.

#include <gtest/gtest.h>
#include <httplib.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "e2e/daemon_process.h"
#include "e2e/wait.h"
#include "kvgov/client/spool_sink.h"
#include "testing/scratch_dir.h"

namespace kvgov::testing {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr char kEngine[] = "id=w1,events=tcp://127.0.0.1:1,model=llama,block-size=4";

std::string Placement(int i, const std::string& worker = "w1") {
  return R"({"type":"kv_transfer","direction":"store","span_digest":"s)" + std::to_string(i) +
         R"(","to_tier":"hbm","owner":"spooler","worker":")" + worker + R"(","token_ids":[)" +
         std::to_string(i * 10) + "," + std::to_string(i * 10 + 1) + "," +
         std::to_string(i * 10 + 2) + "," + std::to_string(i * 10 + 3) + "]}";
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const fs::path& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

class SpoolE2ETest : public ::testing::Test {
 protected:
  void StartKvgov(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--engine", kEngine, "--admit", "spooler=fleet"};
    args.insert(args.end(), extra.begin(), extra.end());
    Status started = daemon_.Start(args);
    ASSERT_TRUE(started.ok()) << started.ToString();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", daemon_.port());
  }
  int64_t HbmBlocks() {
    httplib::Result response = client_->Get("/v1/workers");
    if (!response || response->status != 200) return -1;
    return Json::parse(response->body)["workers"][0]["blocks"]["hbm"].get<int64_t>();
  }
  std::string Metrics() { return client_->Get("/metrics")->body; }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(daemon_.port()); }

  const test_support::ScratchDir dir_{"kvgov_spool_e2e"};
  DaemonProcess daemon_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(SpoolE2ETest, SpoolDirIngestsCompleteFilesAndNamesBadLines) {
  const fs::path spool = dir_ / "spool";  // kvgov creates it
  StartKvgov({"--spool-dir", spool.string()});
  ASSERT_TRUE(fs::is_directory(spool));

  // A writer still at work: kvgov must not touch it.
  WriteFile(spool / "inflight.ndjson.tmp", Placement(99) + "\n");
  // The SDK's writer: 10 placements, published on Close.
  {
    client::SpoolSinkOptions options;
    options.dir = spool.string();
    options.prefix = "sdk";
    Result<std::unique_ptr<client::SpoolSink>> sink = client::SpoolSink::Create(options);
    ASSERT_TRUE(sink.ok()) << sink.status().ToString();
    for (int i = 0; i < 10; ++i) {
      KVTransfer transfer;
      transfer.direction = KVTransferDirection::kStore;
      transfer.span.span_digest = "sdk-" + std::to_string(i);
      transfer.span.to_tier = ResidencyTier::kHBM;
      transfer.span.owner = "spooler";
      client::SpanLocation where;
      where.worker = "w1";
      where.token_ids = {1000 + i * 4, 1001 + i * 4, 1002 + i * 4, 1003 + i * 4};
      ASSERT_TRUE((*sink)->Emit(client::TransferEvent(transfer, where)).ok());
    }
    ASSERT_TRUE((*sink)->Close().ok());
  }
  // A hand-written file with bad lines among good ones.
  WriteFile(spool / "mixed.ndjson.tmp",
            Placement(1) + "\n" +
                R"({"type":"kv_transfer","direction":"sideways","span_digest":"s"})" + "\n\n" +
                Placement(2, "w9") + "\n" + Placement(3) + "\n" + "not json\n" +
                Placement(4).substr(0, 30));
  fs::rename(spool / "mixed.ndjson.tmp", spool / "mixed.ndjson");

  ASSERT_TRUE(WaitFor([&] { return fs::exists(spool / "mixed.ndjson.rejected"); }))
      << daemon_.Stderr();
  ASSERT_TRUE(WaitFor([&] {
    for (const fs::directory_entry& entry : fs::directory_iterator(spool)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with("sdk-") && name.ends_with(".ndjson.done")) return true;
    }
    return false;
  })) << daemon_.Stderr();

  // Every line named, in order, and only the bad ones.
  std::vector<Json> errors;
  std::istringstream sidecar(ReadFile(spool / "mixed.ndjson.rejected.errors"));
  for (std::string line; std::getline(sidecar, line);) errors.push_back(Json::parse(line));
  ASSERT_EQ(errors.size(), 4u) << ReadFile(spool / "mixed.ndjson.rejected.errors");
  EXPECT_EQ(errors[0]["line"], 2);
  EXPECT_EQ(errors[0]["error"],
            "$.direction: unknown kv transfer direction 'sideways' (want one of: offload, "
            "restore, route, migrate, store, evict)");
  EXPECT_EQ(errors[1]["line"], 4);
  EXPECT_EQ(errors[1]["error"], "worker: 'w9' is not registered");
  EXPECT_EQ(errors[2]["line"], 6);
  EXPECT_EQ(errors[3]["line"], 7);  // the cut last line
  // The file itself is kept whole beside its errors.
  EXPECT_EQ(ReadFile(spool / "mixed.ndjson.rejected").find("sideways") != std::string::npos, true);

  // The good lines were applied: 10 from the sink, 2 from the mixed file.
  EXPECT_TRUE(WaitFor([&] { return HbmBlocks() == 12; })) << HbmBlocks();
  EXPECT_TRUE(fs::exists(spool / "inflight.ndjson.tmp"));
  const std::string metrics = Metrics();
  EXPECT_NE(metrics.find(R"(kvgov_spool_lines_total{outcome="accepted"} 12)"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(R"(kvgov_spool_lines_total{outcome="rejected"} 4)"), std::string::npos);
  EXPECT_NE(metrics.find(R"(kvgov_spool_files_total{outcome="done"} 1)"), std::string::npos);
  EXPECT_NE(metrics.find(R"(kvgov_spool_files_total{outcome="rejected"} 1)"), std::string::npos);
  // Counted like any POST /v1/events report.
  EXPECT_NE(metrics.find(R"(kvgov_cache_events_total{source="ride_engine",plane="kv_transfer",)"
                         R"(direction="store",outcome="ok"} 12)"),
            std::string::npos);
  EXPECT_EQ(daemon_.Stop(), 0) << daemon_.Stderr();
}

TEST_F(SpoolE2ETest, IngestSpoolPostsAFileAndReportsEachLine) {
  StartKvgov();
  const fs::path file = dir_ / "reports.ndjson";
  std::string contents;
  for (int i = 0; i < 5; ++i) contents += Placement(i) + "\n";
  contents += R"({"type":"kv_transfer","direction":"sideways","span_digest":"s"})"
              "\n";
  contents += Placement(6, "w9") + "\n";
  contents += "\n";
  contents += Placement(8) + "\n";
  WriteFile(file, contents);

  std::string output;
  // Batches of 2 lines: the verdicts come from several POSTs, in order.
  EXPECT_EQ(DaemonProcess::RunToExit(
                {"ingest-spool", file.string(), "--kvgov", Url(), "--batch-lines", "2"}, &output),
            1);
  EXPECT_NE(output.find("line 6: $.direction: unknown kv transfer direction 'sideways'"),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("line 7: worker: 'w9' is not registered"), std::string::npos) << output;
  EXPECT_LT(output.find("line 6:"), output.find("line 7:"));
  EXPECT_NE(output.find("6 accepted, 2 rejected, 0 not sent"), std::string::npos) << output;
  EXPECT_EQ(HbmBlocks(), 6);

  // A clean file exits 0.
  WriteFile(file, Placement(20) + "\n" + Placement(21) + "\n");
  EXPECT_EQ(DaemonProcess::RunToExit({"ingest-spool", file.string(), "--kvgov", Url()}, &output), 0)
      << output;
  EXPECT_NE(output.find("2 accepted, 0 rejected, 0 not sent"), std::string::npos) << output;

  // A file that cannot be read is a usage error.
  EXPECT_EQ(DaemonProcess::RunToExit(
                {"ingest-spool", (dir_ / "missing.ndjson").string(), "--kvgov", Url()}, &output),
            2);
}

TEST_F(SpoolE2ETest, IngestSpoolStopsWhenKvgovRefusesTheBatchWhole) {
  // Once a token exists, a call without one is refused whole (401).
  std::string output;
  ASSERT_EQ(DaemonProcess::RunToExit(
                {"token", "add", "spooler", "--role", "ingest", "--data-dir", daemon_.data_dir()},
                &output),
            0)
      << output;
  while (!output.empty() && output.back() == '\n') output.pop_back();
  const std::string token = output.substr(output.rfind('\n') + 1);  // the secret, last
  StartKvgov();

  const fs::path file = dir_ / "reports.ndjson";
  WriteFile(file, Placement(1) + "\n" + Placement(2) + "\n" + Placement(3) + "\n");
  EXPECT_EQ(DaemonProcess::RunToExit(
                {"ingest-spool", file.string(), "--kvgov", Url(), "--batch-lines", "1"}, &output),
            1);
  EXPECT_NE(output.find("lines 1-1 refused whole: HTTP 401"), std::string::npos) << output;
  EXPECT_NE(output.find("0 accepted, 0 rejected, 3 not sent"), std::string::npos) << output;

  EXPECT_EQ(DaemonProcess::RunToExit(
                {"ingest-spool", file.string(), "--kvgov", Url(), "--token", token}, &output),
            0)
      << output;
  EXPECT_NE(output.find("3 accepted"), std::string::npos) << output;
}

}  // namespace
}  // namespace kvgov::testing
