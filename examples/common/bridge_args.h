#pragma once

// Command-line handling shared by the example bridges: where reports go
// (kvgov over HTTP, or a spool directory) and the sink that takes them
// there.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvgov/client/sink.h"

namespace bridge {

struct BridgeArgs {
  std::string kvgov_url;  // --kvgov http://HOST:PORT
  std::string token;      // --token, or $KVGOV_TOKEN
  std::string spool_dir;  // --spool-dir DIR: write a spool instead of posting
  std::string prefill_worker = "w1";
  std::string decode_worker = "w2";
  std::string owner;
  std::string model = "llama";
  int requests = 8;
};

/// Parses argv; on a bad or missing flag prints usage to stderr and returns
/// false.
bool ParseBridgeArgs(int argc, char** argv, const std::string& default_owner, BridgeArgs* args);

/// An HttpSink for --kvgov or a SpoolSink for --spool-dir; null (after a
/// message on stderr) when the sink cannot be made.
std::unique_ptr<kvgov::client::Sink> MakeSink(const BridgeArgs& args);

/// Flushes, prints the sink's counters, and returns the exit code: 0 only
/// when every report was delivered and accepted.
int FinishAndReport(kvgov::client::Sink& sink, const char* name);

/// The prompt of simulated request `index`: a shared system prompt followed
/// by the request's own tokens, 32 in all.
std::vector<int64_t> PromptTokens(int index);

}  // namespace bridge
