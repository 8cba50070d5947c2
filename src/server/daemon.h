#pragma once

#include <memory>

#include "kvgov/index/residency_index.h"
#include "kvgov/metrics/registry.h"
#include "kvgov/server/server.h"
#include "kvgov/transport/zmq_ingest.h"
#include "server/cache_accounting.h"

namespace kvgov::server {

/// Everything the HTTP handlers work on. Built once by Server::Start; each
/// member is thread-safe on its own. Destruction order matters: the ingest
/// threads feed the index and the accounting, so they stop first (declared
/// last).
struct Daemon {
  ServerOptions options;
  metrics::Registry metrics;
  index::ResidencyIndex index;
  std::unique_ptr<CacheAccounting> accounting;
  std::unique_ptr<transport::ZmqIngest> ingest;
};

/// Builds the daemon: metric families, accounting, engines registered and
/// their subscribers started.
Result<std::unique_ptr<Daemon>> BuildDaemon(const ServerOptions& options);

}  // namespace kvgov::server
