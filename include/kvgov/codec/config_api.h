#pragma once

// The body of GET /v1/config (docs/formats/route-api.md), also journaled
// as the payload of every serve.start row.

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "kvgov/ingest/engine_spec.h"
#include "kvgov/router/router.h"

namespace kvgov {

/// A replica's part of the configuration. `redis` is shown without its
/// password.
struct ReplicaConfigView {
  std::string id;
  std::string redis;
  std::string prefix;
  int64_t claim_ttl_ms = 0;
  int64_t log_retain_ms = 0;
  int64_t snapshot_interval_ms = 0;
  bool log_connected = false;
  bool housekeeper = false;
  std::string applied_id;
};

/// What the daemon runs with: the route weights, the engines followed and
/// the replica, if any (null for a single node). No secret is part of it.
struct ConfigView {
  router::RouteWeights weights;
  int64_t probe_interval_ms = 0;
  uint64_t max_body_bytes = 0;
  std::string spool_dir;
  std::optional<ReplicaConfigView> replica;
  std::span<const ingest::EngineSpec> engines;
};

std::string EncodeConfigJson(const ConfigView& config);

}  // namespace kvgov
