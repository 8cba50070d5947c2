#include "kvgov/connectors/health_prober.h"

#include <httplib.h>

#include <charconv>
#include <chrono>
#include <exception>
#include <string_view>
#include <system_error>
#include <utility>

#include "connectors/control_url.h"
#include "kvgov/clock/clock.h"
#include "kvgov/log/log.h"
#include "kvgov/connectors/engine_metrics.h"

namespace kvgov::connectors {
namespace {

std::vector<std::string> WorkerIds(const std::vector<ingest::StreamSpec>& streams) {
  std::vector<std::string> workers;
  workers.reserve(streams.size());
  for (const ingest::StreamSpec& stream : streams) workers.push_back(stream.worker);
  return workers;
}

// An engine's /health answer is read for its status; a body past this is
// not an answer kvgov waits to the end of.
constexpr size_t kMaxHealthBodyBytes = 64 << 10;

}  // namespace

struct HealthProber::Target {
  Target(std::string base_url, const ControlEndpoint& endpoint, std::vector<std::string> ids)
      : url(std::move(base_url)), client(endpoint.host, endpoint.port), workers(std::move(ids)) {}

  const std::string url;  // for error texts
  httplib::Client client;
  const std::vector<std::string> workers;
};

HealthProber::HealthProber(router::WorkerStatusTable* table,
                           std::vector<ingest::EngineSpec> engines, HealthProberOptions options)
    : table_(table), engines_(std::move(engines)), options_(options) {}

HealthProber::~HealthProber() { Stop(); }

Status HealthProber::Validate(const std::vector<ingest::EngineSpec>& engines) {
  for (const ingest::EngineSpec& engine : engines) {
    if (engine.control.empty()) continue;
    const std::string where = "engine '" + engine.id + "'";
    KVGOV_RETURN_IF_ERROR(ParseControlUrl(engine.control).status().WithContext(where));
    KVGOV_RETURN_IF_ERROR(ingest::StreamsFor(engine).status().WithContext(where));
  }
  return Status::Ok();
}

Status HealthProber::Start() {
  MutexLock lock(mu_);
  if (started_ || stopping_) {
    return Status::FailedPrecondition(started_ ? "health prober: already started"
                                               : "health prober: already stopped");
  }
  if (table_ == nullptr) return Status::InvalidArgument("health prober: no worker status table");
  if (options_.probe_interval_ms <= 0 || options_.timeout_ms <= 0) {
    return Status::InvalidArgument("health prober: probe interval and timeout must be positive");
  }
  KVGOV_RETURN_IF_ERROR(Validate(engines_));
  try {
    std::vector<std::unique_ptr<Target>> targets;
    for (const ingest::EngineSpec& engine : engines_) {
      if (engine.control.empty()) continue;
      KVGOV_ASSIGN_OR_RETURN(ControlEndpoint endpoint, ParseControlUrl(engine.control));
      KVGOV_ASSIGN_OR_RETURN(std::vector<ingest::StreamSpec> streams, ingest::StreamsFor(engine));
      std::string url = engine.control;
      if (url.ends_with('/')) url.pop_back();
      auto target = std::make_unique<Target>(std::move(url), endpoint, WorkerIds(streams));
      const auto timeout = std::chrono::milliseconds(options_.timeout_ms);
      target->client.set_connection_timeout(timeout);
      target->client.set_read_timeout(timeout);
      target->client.set_write_timeout(timeout);
      targets.push_back(std::move(target));
    }
    targets_ = std::move(targets);
    started_ = true;
    if (!targets_.empty()) thread_ = std::thread([this] { Run(); });
  } catch (const std::exception& e) {
    return Status::Internal(std::string("health prober: cannot start: ") + e.what());
  }
  return Status::Ok();
}

void HealthProber::Stop() {
  std::thread thread;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    thread = std::move(thread_);
  }
  wake_.notify_all();
  // Abort the request in flight, if any; httplib makes stop() safe to call
  // from another thread. A request the thread starts after this still ends
  // within the timeout, and the thread checks Stopping() before each one.
  for (const std::unique_ptr<Target>& target : targets_) target->client.stop();
  if (thread.joinable()) thread.join();
}

bool HealthProber::Stopping() const {
  MutexLock lock(mu_);
  return stopping_;
}

void HealthProber::Run() {
  const auto interval = std::chrono::milliseconds(options_.probe_interval_ms);
  MutexLock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    for (const std::unique_ptr<Target>& target : targets_) {
      if (Stopping()) break;
      ProbeEngine(*target);
    }
    lock.lock();
    // Until the interval is over or Stop wakes it (a loop, not a predicate:
    // the thread-safety analysis cannot see a lambda run under the lock).
    const auto due = std::chrono::steady_clock::now() + interval;
    while (!stopping_ && wake_.wait_until(lock, due) != std::cv_status::timeout) continue;
  }
}

void HealthProber::ProbeEngine(Target& target) {
  // The edge of the thread: nothing below may throw out of it.
  try {
    bool ok = false;
    std::string error;
    // Health is the status alone; the body is counted and dropped, so an
    // engine answering without end costs a probe, not memory.
    size_t body_bytes = 0;
    httplib::Result health =
        target.client.Get("/health", [&body_bytes](const char*, size_t length) {
          body_bytes += length;
          return body_bytes <= kMaxHealthBodyBytes;
        });
    if (!health && body_bytes > kMaxHealthBodyBytes) {
      error = "GET " + target.url + "/health: the answer is longer than " +
              std::to_string(kMaxHealthBodyBytes) + " bytes";
    } else if (!health) {
      error = "GET " + target.url + "/health: " + RequestErrorText(health.error());
    } else if (health->status < 200 || health->status >= 300) {
      error = "GET " + target.url + "/health: HTTP " + std::to_string(health->status);
    } else {
      ok = true;
    }
    const int64_t probed_at = clock::NowMillis();
    // NotFound means the worker was removed from the table; nothing to do.
    for (const std::string& worker : target.workers) {
      const std::optional<router::WorkerStatus> before = table_->Get(worker);
      (void)table_->RecordProbe(worker, ok, probed_at, error);
      const std::optional<router::WorkerStatus> after = table_->Get(worker);
      // The first probe and a change of health are an operator's events; a
      // probe alike to the last one is not.
      if (before && after && (before->last_probe_ms == 0 || before->healthy != after->healthy)) {
        log::Line line(after->healthy ? log::Level::kInfo : log::Level::kWarn, "engine.health");
        line.Field("worker", worker).Field("healthy", after->healthy);
        if (!after->healthy) line.Field("error", after->last_probe_error);
      }
    }
    if (!ok || Stopping()) return;

    std::string body;
    const size_t max_bytes = options_.max_metrics_bytes;
    httplib::Result metrics = target.client.Get(
        "/metrics", [](const httplib::Response& response) { return response.status == 200; },
        [&body, max_bytes](const char* data, size_t length) {
          if (length > max_bytes - body.size()) return false;  // too long: cancel
          body.append(data, length);
          return true;
        });
    if (!metrics) return;
    // target.workers are the engine's ranks in order.
    Result<std::vector<router::ScrapedLoad>> loads =
        ParseEngineMetricsByRank(body, clock::NowMillis(), target.workers.size(), max_bytes);
    if (!loads.ok()) return;
    for (size_t rank = 0; rank < target.workers.size(); ++rank) {
      (void)table_->RecordScrape(target.workers[rank], (*loads)[rank]);
    }
  } catch (const std::exception& e) {
    try {
      for (const std::string& worker : target.workers) {
        (void)table_->RecordProbe(worker, false, clock::NowMillis(),
                                  std::string("probe failed: ") + e.what());
      }
    } catch (...) {
    }
  } catch (...) {
  }
}

}  // namespace kvgov::connectors
