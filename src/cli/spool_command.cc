#include "cli/spool_command.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>
#include <vector>

#include "kvgov/spool/spool_reader.h"

namespace kvgov::cli {
namespace {

using Json = nlohmann::json;

constexpr int kAttempts = 4;  // the first and three retries
constexpr std::chrono::milliseconds kFirstBackoff(250);

// The lines of one batch, ready to send.
struct Batch {
  std::vector<uint64_t> lines;  // line number of each element, by index
  std::string body = "{\"events\":[";
  size_t bytes() const { return body.size(); }
};

// What the run came to; printed as the summary.
struct Tally {
  uint64_t accepted = 0;
  uint64_t rejected = 0;
  uint64_t not_sent = 0;
  // Rejections not yet printed. Lines that fail to decode are known at
  // once, kvgov's verdicts only when their batch returns; both wait here so
  // the output runs in line order.
  std::vector<std::pair<uint64_t, std::string>> unprinted;
};

void Reject(Tally& tally, uint64_t line, std::string error) {
  ++tally.rejected;
  tally.unprinted.emplace_back(line, std::move(error));
}

// Every rejection so far has a smaller line number than any line still to
// be sent, so printing them all now keeps the output in order.
void PrintRejections(Tally& tally) {
  std::sort(tally.unprinted.begin(), tally.unprinted.end());
  for (const auto& [line, error] : tally.unprinted) {
    std::printf("line %llu: %s\n", static_cast<unsigned long long>(line), error.c_str());
  }
  tally.unprinted.clear();
}

// kvgov prefixes "$.events[I]." to a report's error; without it the text
// reads as it does in a spool directory's .errors sidecar, which gets the
// same error straight from the lowering.
std::string ForLine(std::string message) {
  constexpr std::string_view kPrefix = "$.events[";
  if (message.compare(0, kPrefix.size(), kPrefix) != 0) return message;
  const size_t close = message.find(']');
  if (close == std::string::npos) return message;
  const bool member = close + 1 < message.size() && message[close + 1] == '.';
  message.replace(0, close + (member ? 2 : 1), member ? "" : "$");
  return message;
}

// Posts one batch, retrying transport errors and 5xx. Returns false when
// kvgov refused the batch whole or could not be reached: the run stops.
bool Send(httplib::Client& client, Batch& batch, Tally& tally) {
  batch.body += "]}";
  const auto first = static_cast<unsigned long long>(batch.lines.front());
  const auto last = static_cast<unsigned long long>(batch.lines.back());
  std::string failure;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    if (attempt > 1) std::this_thread::sleep_for(kFirstBackoff * (1 << (attempt - 2)));
    httplib::Result result = client.Post("/v1/events", batch.body, "application/json");
    if (!result) {
      failure = httplib::to_string(result.error());
      continue;
    }
    if (result->status >= 500) {
      failure = "HTTP " + std::to_string(result->status) + ": " + result->body.substr(0, 200);
      continue;
    }
    if (result->status != 200) {
      std::fprintf(stderr, "kvgov ingest-spool: lines %llu-%llu refused whole: HTTP %d: %s\n",
                   first, last, result->status, result->body.substr(0, 300).c_str());
      tally.not_sent += batch.lines.size();
      return false;
    }
    const Json answer = Json::parse(result->body, nullptr, /*allow_exceptions=*/false);
    if (!answer.is_object() || !answer.contains("accepted") || !answer.contains("rejected") ||
        !answer["rejected"].is_array()) {
      std::fprintf(stderr,
                   "kvgov ingest-spool: lines %llu-%llu: kvgov's answer is not "
                   "{accepted, rejected}: %s\n",
                   first, last, result->body.substr(0, 300).c_str());
      tally.not_sent += batch.lines.size();
      return false;
    }
    uint64_t rejected = 0;
    for (const Json& entry : answer["rejected"]) {
      const Json index = entry.value("index", Json());
      if (!index.is_number_unsigned() || index.get<size_t>() >= batch.lines.size()) continue;
      Reject(tally, batch.lines[index.get<size_t>()],
             ForLine(entry.value("error", std::string("rejected"))));
      ++rejected;
    }
    tally.accepted += batch.lines.size() - rejected;
    PrintRejections(tally);
    return true;
  }
  std::fprintf(stderr, "kvgov ingest-spool: lines %llu-%llu not sent after %d attempts: %s\n",
               first, last, kAttempts, failure.c_str());
  tally.not_sent += batch.lines.size();
  return false;
}

}  // namespace

CLI::App* AddIngestSpoolCommand(CLI::App& app, IngestSpoolFlags& flags) {
  CLI::App* command = app.add_subcommand(
      "ingest-spool",
      "Post a spool file (NDJSON, one POST /v1/events element per line; docs/formats/spool.md)\n"
      "to a running kvgov in batches. Prints each rejected line as 'line N: error' and a\n"
      "summary; exits 0 only when every report was accepted.\n"
      "Example: kvgov ingest-spool reports.ndjson --kvgov http://127.0.0.1:8787");
  command->add_option("FILE", flags.file, "The spool file.")->required();
  command->add_option("--kvgov", flags.kvgov_url, "kvgov's URL, http://HOST:PORT or https://...")
      ->required();
  command
      ->add_option("--token", flags.token,
                   "A bearer token with the ingest role; prefer $KVGOV_TOKEN, which keeps it\n"
                   "out of the process list.")
      ->envname("KVGOV_TOKEN");
  command->add_option("--batch-lines", flags.batch_lines, "Lines per POST.")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  command
      ->add_option("--batch-bytes", flags.batch_bytes,
                   "Bytes per POST body; keep it under kvgov's --max-body-bytes.")
      ->capture_default_str()
      ->check(CLI::Range(size_t{4096}, size_t{1} << 30));
  return command;
}

int RunIngestSpool(const IngestSpoolFlags& flags) {
  Result<std::unique_ptr<spool::SpoolReader>> reader = spool::SpoolReader::Open(flags.file);
  if (!reader.ok()) {
    std::fprintf(stderr, "kvgov ingest-spool: %s\n", reader.status().message().c_str());
    return 2;
  }
  httplib::Client client(flags.kvgov_url);
  if (!client.is_valid()) {
    std::fprintf(stderr, "kvgov ingest-spool: --kvgov '%s': want http://HOST:PORT\n",
                 flags.kvgov_url.c_str());
    return 2;
  }
  client.set_keep_alive(true);
  client.set_tcp_nodelay(true);
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(60));
  client.set_write_timeout(std::chrono::seconds(60));
  if (!flags.token.empty()) client.set_bearer_token_auth(flags.token);

  Tally tally;
  Batch batch;
  bool sending = true;  // false once kvgov refused a batch whole: count the rest as not sent
  for (;;) {
    Result<std::optional<spool::SpoolLine>> next = (*reader)->Next();
    if (!next.ok()) {
      std::fprintf(stderr, "kvgov ingest-spool: %s\n", next.status().message().c_str());
      return 2;
    }
    if (!next->has_value()) break;
    spool::SpoolLine& line = **next;
    // A line that does not decode would fail its whole batch: it is
    // reported here and never sent.
    if (!line.event.ok()) {
      Reject(tally, line.number, line.event.status().message());
      continue;
    }
    if (!sending) {
      ++tally.not_sent;
      continue;
    }
    const size_t framing = batch.lines.empty() ? 2 : 3;
    if (!batch.lines.empty() && (batch.lines.size() >= flags.batch_lines ||
                                 batch.bytes() + line.text.size() + framing > flags.batch_bytes)) {
      sending = Send(client, batch, tally);
      batch = Batch();
      if (!sending) {
        ++tally.not_sent;
        continue;
      }
    }
    if (!batch.lines.empty()) batch.body += ',';
    batch.body += line.text;
    batch.lines.push_back(line.number);
  }
  if (sending && !batch.lines.empty()) Send(client, batch, tally);
  PrintRejections(tally);

  std::fprintf(stderr, "kvgov ingest-spool: %s: %llu accepted, %llu rejected, %llu not sent\n",
               flags.file.c_str(), static_cast<unsigned long long>(tally.accepted),
               static_cast<unsigned long long>(tally.rejected),
               static_cast<unsigned long long>(tally.not_sent));
  return tally.rejected == 0 && tally.not_sent == 0 ? 0 : 1;
}

}  // namespace kvgov::cli
