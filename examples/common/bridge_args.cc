#include "bridge_args.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kvgov/client/http_sink.h"
#include "kvgov/client/spool_sink.h"

namespace bridge {

bool ParseBridgeArgs(int argc, char** argv, const std::string& default_owner, BridgeArgs* args) {
  args->owner = default_owner;
  if (const char* token = std::getenv("KVGOV_TOKEN")) args->token = token;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n", argv[0], flag.c_str());
      return false;
    }
    const std::string value = argv[++i];
    if (flag == "--kvgov") {
      args->kvgov_url = value;
    } else if (flag == "--token") {
      args->token = value;
    } else if (flag == "--spool-dir") {
      args->spool_dir = value;
    } else if (flag == "--prefill-worker") {
      args->prefill_worker = value;
    } else if (flag == "--decode-worker") {
      args->decode_worker = value;
    } else if (flag == "--owner") {
      args->owner = value;
    } else if (flag == "--model") {
      args->model = value;
    } else if (flag == "--requests") {
      args->requests = std::atoi(value.c_str());
    } else {
      std::fprintf(stderr, "%s: unknown flag %s\n", argv[0], flag.c_str());
      return false;
    }
  }
  if (args->kvgov_url.empty() == args->spool_dir.empty() || args->requests < 1) {
    std::fprintf(stderr,
                 "usage: %s (--kvgov http://HOST:PORT [--token T] | --spool-dir DIR)\n"
                 "       [--prefill-worker w1] [--decode-worker w2] [--owner %s]\n"
                 "       [--model llama] [--requests 8]\n",
                 argv[0], default_owner.c_str());
    return false;
  }
  return true;
}

std::unique_ptr<kvgov::client::Sink> MakeSink(const BridgeArgs& args) {
  if (!args.spool_dir.empty()) {
    kvgov::client::SpoolSinkOptions options;
    options.dir = args.spool_dir;
    options.prefix = "bridge";
    auto sink = kvgov::client::SpoolSink::Create(options);
    if (!sink.ok()) {
      std::fprintf(stderr, "spool sink: %s\n", sink.status().ToString().c_str());
      return nullptr;
    }
    return std::move(sink).value();
  }
  kvgov::client::HttpSinkOptions options;
  options.url = args.kvgov_url;
  options.bearer_token = args.token;
  auto sink = kvgov::client::HttpSink::Create(options);
  if (!sink.ok()) {
    std::fprintf(stderr, "http sink: %s\n", sink.status().ToString().c_str());
    return nullptr;
  }
  return std::move(sink).value();
}

int FinishAndReport(kvgov::client::Sink& sink, const char* name) {
  const kvgov::Status flushed = sink.Flush(std::chrono::seconds(10));
  const kvgov::client::SinkStats stats = sink.stats();
  std::printf(
      "%s: queued %llu, sent %llu, rejected %llu, failed %llu, dropped %llu, invalid %llu, "
      "retries %llu, batches %llu\n",
      name, static_cast<unsigned long long>(stats.queued),
      static_cast<unsigned long long>(stats.sent), static_cast<unsigned long long>(stats.rejected),
      static_cast<unsigned long long>(stats.failed), static_cast<unsigned long long>(stats.dropped),
      static_cast<unsigned long long>(stats.invalid),
      static_cast<unsigned long long>(stats.retries),
      static_cast<unsigned long long>(stats.batches));
  if (!flushed.ok()) std::printf("%s: flush: %s\n", name, flushed.ToString().c_str());
  if (!stats.last_error.empty())
    std::printf("%s: last error: %s\n", name, stats.last_error.c_str());
  const bool clean = flushed.ok() && stats.rejected == 0 && stats.failed == 0 &&
                     stats.dropped == 0 && stats.invalid == 0;
  return clean ? 0 : 1;
}

std::vector<int64_t> PromptTokens(int index) {
  std::vector<int64_t> tokens;
  for (int64_t t = 0; t < 16; ++t) tokens.push_back(1000 + t);  // the shared system prompt
  for (int64_t t = 0; t < 16; ++t) tokens.push_back(100000 + index * 100 + t);
  return tokens;
}

}  // namespace bridge
