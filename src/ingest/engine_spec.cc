#include "kvgov/ingest/engine_spec.h"

#include <charconv>
#include <cstdlib>
#include <set>

namespace kvgov::ingest {
namespace {

struct Endpoint {
  std::string host;
  int port = 0;
};

Result<Endpoint> ParseTcpEndpoint(std::string_view key, std::string_view value) {
  constexpr std::string_view kScheme = "tcp://";
  const std::string where = std::string(key) + ": ";
  if (!value.starts_with(kScheme)) {
    return Status::InvalidArgument(where + "want tcp://HOST:PORT, got '" + std::string(value) +
                                   "'");
  }
  std::string_view rest = value.substr(kScheme.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return Status::InvalidArgument(where + "want tcp://HOST:PORT, got '" + std::string(value) +
                                   "'");
  }
  // vLLM's own endpoint values bind every interface; kvgov connects, and
  // a connect to them fails only at run time, where it looks like an idle
  // engine.
  const std::string_view host = rest.substr(0, colon);
  if (host == "*" || host == "0.0.0.0" || host == "[::]") {
    return Status::InvalidArgument(
        where + "'" + std::string(value) + "' is an address the engine binds; kvgov connects " +
        "to it, so give the engine's host: tcp://<engine host>:" +
        std::string(rest.substr(colon + 1)) +
        " (tcp://127.0.0.1:" + std::string(rest.substr(colon + 1)) + " on the same machine)");
  }
  int port = 0;
  std::string_view port_text = rest.substr(colon + 1);
  auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (error != std::errc() || end != port_text.data() + port_text.size() || port <= 0 ||
      port > 65535) {
    return Status::InvalidArgument(where + "port '" + std::string(port_text) +
                                   "' is not in 1-65535");
  }
  return Endpoint{std::string(rest.substr(0, colon)), port};
}

Result<int64_t> ParsePositive(std::string_view key, std::string_view value, int64_t max) {
  int64_t number = 0;
  auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
  if (error != std::errc() || end != value.data() + value.size() || number <= 0 || number > max) {
    return Status::InvalidArgument(std::string(key) + ": want an integer in 1-" +
                                   std::to_string(max) + ", got '" + std::string(value) + "'");
  }
  return number;
}

bool ValidId(std::string_view id) {
  if (id.empty()) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Result<EngineSpec> ParseEngineSpec(std::string_view spec) {
  EngineSpec engine;
  std::set<std::string, std::less<>> seen;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    std::string_view item =
        spec.substr(start, comma == std::string_view::npos ? spec.npos : comma - start);
    start = comma == std::string_view::npos ? spec.size() + 1 : comma + 1;
    if (item.empty()) continue;
    const size_t equals = item.find('=');
    if (equals == std::string_view::npos) {
      return Status::InvalidArgument("engine spec: want key=value, got '" + std::string(item) +
                                     "'");
    }
    std::string_view key = item.substr(0, equals);
    std::string_view value = item.substr(equals + 1);
    if (!seen.insert(std::string(key)).second) {
      return Status::InvalidArgument(std::string(key) + ": given twice");
    }
    if (key == "id") {
      if (!ValidId(value)) {
        return Status::InvalidArgument("id: want letters, digits, '_', '.' or '-', got '" +
                                       std::string(value) + "'");
      }
      engine.id = std::string(value);
    } else if (key == "kind") {
      KVGOV_ASSIGN_OR_RETURN(engine.kind, ParseEnum<EngineKind>(value));
    } else if (key == "events") {
      KVGOV_RETURN_IF_ERROR(ParseTcpEndpoint(key, value).status());
      engine.events = std::string(value);
    } else if (key == "replay") {
      KVGOV_RETURN_IF_ERROR(ParseTcpEndpoint(key, value).status());
      engine.replay = std::string(value);
    } else if (key == "model") {
      engine.model = std::string(value);
    } else if (key == "block-size") {
      KVGOV_ASSIGN_OR_RETURN(engine.block_size, ParsePositive(key, value, 1 << 20));
    } else if (key == "pool-blocks") {
      // 2^24 blocks (a quarter of a billion tokens at 16 a block) is past any
      // one rank's pool, and bounds the tables sized for it.
      KVGOV_ASSIGN_OR_RETURN(engine.pool_blocks, ParsePositive(key, value, int64_t{1} << 24));
    } else if (key == "dp-ranks") {
      KVGOV_ASSIGN_OR_RETURN(int64_t ranks, ParsePositive(key, value, 1024));
      engine.dp_ranks = static_cast<int>(ranks);
    } else if (key == "control") {
      if (!value.starts_with("http://") && !value.starts_with("https://")) {
        return Status::InvalidArgument("control: want http://HOST:PORT, got '" +
                                       std::string(value) + "'");
      }
      engine.control = std::string(value);
    } else if (key == "openai") {
      if (!value.starts_with("http://")) {
        return Status::InvalidArgument("openai: want http://HOST:PORT, got '" + std::string(value) +
                                       "'");
      }
      engine.openai = std::string(value);
    } else if (key == "connector") {
      if (value != "vllm" && value != "sglang" && value != "lmcache" && value != "webhook") {
        return Status::InvalidArgument("connector: want vllm, sglang, lmcache or webhook, got '" +
                                       std::string(value) + "'");
      }
      engine.connector = std::string(value);
    } else if (key == "connector-path") {
      if (!value.starts_with('/')) {
        return Status::InvalidArgument("connector-path: want a path starting with '/', got '" +
                                       std::string(value) + "'");
      }
      engine.connector_path = std::string(value);
    } else if (key == "role") {
      KVGOV_ASSIGN_OR_RETURN(engine.role, ParseEnum<EngineRole>(value));
    } else if (key == "kv-lease-ms") {
      // A day bounds a pin no engine holds that long.
      KVGOV_ASSIGN_OR_RETURN(engine.kv_lease_ms, ParsePositive(key, value, 86400000));
    } else if (key == "bootstrap-port") {
      KVGOV_ASSIGN_OR_RETURN(int64_t port, ParsePositive(key, value, 65535));
      engine.bootstrap_port = static_cast<int>(port);
    } else {
      return Status::InvalidArgument(
          "engine spec: unknown key '" + std::string(key) +
          "' (want id, kind, events, replay, model, block-size, pool-blocks, dp-ranks, control, "
          "openai, connector, connector-path, role, kv-lease-ms, bootstrap-port)");
    }
  }
  for (const char* required : {"id", "events", "model"}) {
    if (!seen.contains(required)) {
      return Status::InvalidArgument(std::string(required) + ": required in an engine spec");
    }
  }
  if (engine.model.empty()) return Status::InvalidArgument("model: required, got empty");
  if (engine.role != EngineRole::kBoth && engine.kind == EngineKind::kMooncake) {
    return Status::InvalidArgument(
        "role: a mooncake store serves no requests; want role=both (the default)");
  }
  if (!seen.contains("kv-lease-ms") && engine.kind == EngineKind::kSglang) {
    engine.kv_lease_ms = 300000;  // SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT
  }
  if ((seen.contains("kv-lease-ms") || seen.contains("bootstrap-port")) &&
      engine.role != EngineRole::kPrefill) {
    return Status::InvalidArgument(
        std::string(seen.contains("kv-lease-ms") ? "kv-lease-ms" : "bootstrap-port") +
        ": only for a prefill engine (role=prefill)");
  }
  if ((engine.connector == "webhook") != !engine.connector_path.empty()) {
    return Status::InvalidArgument(
        "connector-path: required with connector=webhook, and only with it");
  }
  // The checks serve makes when it opens the streams, made here too, so
  // that --print-config and a config check refuse what serve would.
  KVGOV_RETURN_IF_ERROR(StreamsFor(engine).status());
  return engine;
}

Result<std::vector<StreamSpec>> StreamsFor(const EngineSpec& engine) {
  KVGOV_ASSIGN_OR_RETURN(Endpoint events, ParseTcpEndpoint("events", engine.events));
  Endpoint replay;
  if (!engine.replay.empty()) {
    KVGOV_ASSIGN_OR_RETURN(replay, ParseTcpEndpoint("replay", engine.replay));
  }
  // Rank r binds both sockets at base + r: on one host the two ranges must
  // not meet (vLLM's usual 5557 and 5558 do at dp-ranks=2), or a rank's
  // events and another rank's replay would be one port.
  if (!engine.replay.empty() && events.host == replay.host &&
      std::abs(events.port - replay.port) < engine.dp_ranks) {
    return Status::InvalidArgument(
        "dp-ranks: with " + std::to_string(engine.dp_ranks) + " ranks the events ports " +
        std::to_string(events.port) + ".." + std::to_string(events.port + engine.dp_ranks - 1) +
        " and the replay ports " + std::to_string(replay.port) + ".." +
        std::to_string(replay.port + engine.dp_ranks - 1) +
        " overlap; put the replay base at least dp-ranks away from the events base");
  }
  std::vector<StreamSpec> streams;
  for (int rank = 0; rank < engine.dp_ranks; ++rank) {
    if (events.port + rank > 65535 || (!engine.replay.empty() && replay.port + rank > 65535)) {
      return Status::InvalidArgument("dp-ranks: rank " + std::to_string(rank) +
                                     " would listen past port 65535");
    }
    StreamSpec stream;
    stream.rank = rank;
    stream.worker = engine.dp_ranks == 1 ? engine.id : engine.id + "@dp" + std::to_string(rank);
    stream.events = "tcp://" + events.host + ":" + std::to_string(events.port + rank);
    if (!engine.replay.empty()) {
      stream.replay = "tcp://" + replay.host + ":" + std::to_string(replay.port + rank);
    }
    streams.push_back(std::move(stream));
  }
  return streams;
}

}  // namespace kvgov::ingest
