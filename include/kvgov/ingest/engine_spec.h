#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/enum_spelling.h"
#include "kvgov/core/status.h"

namespace kvgov::ingest {

/// Which wire an engine speaks on its event stream.
enum class EngineKind { kVllm, kSglang, kMooncake };

}  // namespace kvgov::ingest

template <>
struct kvgov::EnumSpelling<kvgov::ingest::EngineKind> {
  static constexpr std::string_view kName = "engine kind";
  static constexpr auto kValues = std::to_array<std::pair<ingest::EngineKind, std::string_view>>(
      {{ingest::EngineKind::kVllm, "vllm"},
       {ingest::EngineKind::kSglang, "sglang"},
       {ingest::EngineKind::kMooncake, "mooncake"}});
};

namespace kvgov::ingest {

/// What an engine does for a disaggregated model (docs/formats/gateway.md,
/// "Prefill/decode disaggregation"): computes prompts and hands their KV
/// over, takes handed-over KV and decodes, or both on its own.
enum class EngineRole { kBoth, kPrefill, kDecode };

}  // namespace kvgov::ingest

template <>
struct kvgov::EnumSpelling<kvgov::ingest::EngineRole> {
  static constexpr std::string_view kName = "engine role";
  static constexpr auto kValues = std::to_array<std::pair<ingest::EngineRole, std::string_view>>(
      {{ingest::EngineRole::kBoth, "both"},
       {ingest::EngineRole::kPrefill, "prefill"},
       {ingest::EngineRole::kDecode, "decode"}});
};

namespace kvgov::ingest {

/// One engine kvgov follows, as given by `--engine SPEC` or the config file.
struct EngineSpec {
  std::string id;
  EngineKind kind = EngineKind::kVllm;
  std::string events;  // tcp://HOST:PORT of the engine's PUB socket
  std::string replay;  // tcp://HOST:PORT of its ROUTER replay socket; optional
  std::string model;
  int64_t block_size = 16;
  // Blocks the engine's KV pool holds, per data-parallel rank (vLLM logs it
  // as "# GPU blocks" and reports num_gpu_blocks); 0: not given. Sizes the
  // index's tables up front (ResidencyIndex::AddWorker).
  int64_t pool_blocks = 0;
  int dp_ranks = 1;
  std::string control;  // http://HOST:PORT of its control API; optional
  // http://HOST:PORT of its OpenAI server, where the gateway forwards
  // requests; empty: the control URL (vLLM and SGLang serve both on one port).
  std::string openai;
  // How invalidations reach it: vllm, sglang, lmcache (an LMCache
  // controller at `control`) or webhook (an exact-span endpoint at
  // control + connector_path). Empty: the engine's kind.
  std::string connector;
  std::string connector_path;
  EngineRole role = EngineRole::kBoth;
  // A prefill engine's pin: how long it holds a handed-over prompt's blocks
  // for the decode worker to take. kvgov's lease of a handoff lives this
  // long unless the decode worker's first token ends it first. Not given:
  // the engine's default, vLLM's kv_lease_duration (30 s) or SGLang's
  // bootstrap timeout (300 s).
  int64_t kv_lease_ms = 30000;
  // A prefill SGLang engine's bootstrap server port (its
  // --disaggregation-bootstrap-port).
  int bootstrap_port = 8998;
  friend bool operator==(const EngineSpec&, const EngineSpec&) = default;
};

/// Parses "id=w1,kind=vllm,events=tcp://h:5557,replay=tcp://h:5558,model=m,
/// block-size=16,pool-blocks=65536,dp-ranks=1,control=http://h:8000,openai=http://h:8000,
/// connector=webhook,connector-path=/evict,role=prefill,kv-lease-ms=30000,
/// bootstrap-port=8998". id, events and model are
/// required. Returns InvalidArgument naming the key at fault: an unknown
/// key, a repeated key, a value that does not parse, an endpoint that is not
/// tcp://HOST:PORT, an id with characters outside [A-Za-z0-9_.-].
Result<EngineSpec> ParseEngineSpec(std::string_view spec);

/// One event stream: an engine's data-parallel rank.
struct StreamSpec {
  std::string worker;  // the engine id, or "<id>@dp<rank>" when dp_ranks > 1
  int rank = 0;
  std::string events;
  std::string replay;  // empty when the engine has none
  friend bool operator==(const StreamSpec&, const StreamSpec&) = default;
};

/// The streams of an engine: rank r listens at port + r on both sockets
/// (vLLM's rule). InvalidArgument when a port would pass 65535.
Result<std::vector<StreamSpec>> StreamsFor(const EngineSpec& engine);

}  // namespace kvgov::ingest
