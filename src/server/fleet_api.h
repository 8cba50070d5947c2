#pragma once

// Internal to kvgov_server: the fleet's own routes (docs/formats/
// events-api.md): reports in, the workers' view, drains.

#include <cstdint>

#include "kvgov/index/residency_index.h"
#include "kvgov/router/prediction_score.h"
#include "kvgov/router/router.h"
#include "kvgov/router/worker_status.h"
#include "kvgov/services/report_intake.h"
#include "kvgov/services/worker_drains.h"
#include "kvgov/transport/zmq_ingest.h"
#include "server/access.h"

namespace httplib {
class Server;
}

namespace kvgov::services {
class Engines;
}  // namespace kvgov::services

namespace kvgov::server {

/// What the fleet routes use; each must outlive the listener.
struct FleetRoutes {
  RouteAccess access;
  services::ReportIntake* reports = nullptr;  // POST /v1/events
  // GET /v1/workers: residency, health, load, streams, prediction scores.
  const index::ResidencyIndex* index = nullptr;
  const router::WorkerStatusTable* status = nullptr;
  const router::Router* router = nullptr;        // each worker's load
  const transport::ZmqIngest* ingest = nullptr;  // its streams' statistics; null: none
  const router::PredictionScores* predictions = nullptr;
  const services::Engines* engines = nullptr;
  int64_t engine_silence_ms = 0;
  services::WorkerDrains* drains = nullptr;  // POST and DELETE .../drain
};

/// POST /v1/events (ingest role, fleet-wide), GET /v1/workers (read; a
/// tenant-bound caller sees ids, models and health only), POST and DELETE
/// /v1/workers/{id}/drain (admin, fleet-wide).
void RegisterFleetApi(httplib::Server& http, const FleetRoutes& routes);

}  // namespace kvgov::server
