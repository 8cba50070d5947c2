#include "kvgov/simfleet/drive.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "kvgov/core/mutex.h"
#include "simfleet/http_json.h"

namespace kvgov::simfleet {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Shared by the driving threads: atomics, and the first error under a mutex.
struct Counters {
  std::atomic<uint64_t> done{0};
  std::atomic<uint64_t> prompt_blocks{0};
  std::atomic<uint64_t> hit_blocks{0};
  std::atomic<uint64_t> errors{0};
  Mutex error_mu;
  std::string first_error KVGOV_GUARDED_BY(error_mu);

  void Fail(std::string error) {
    errors.fetch_add(1);
    MutexLock lock(error_mu);
    if (first_error.empty()) first_error = std::move(error);
  }
  std::string FirstError() {
    MutexLock lock(error_mu);
    return first_error;
  }
};

// The engine's answer as a request outcome: its modeled times and hits
// (the simulated engine's kvgov_sim block) and its cached tokens.
Result<sim::RequestOutcome> OutcomeOf(const Json& answer, const std::string& what,
                                      const sim::SimRequest& request,
                                      const std::map<std::string, size_t>& engine_numbers) {
  const Json& sim = answer.contains("kvgov_sim") ? answer["kvgov_sim"] : Json();
  if (!sim.is_object()) return Status::Unavailable(what + ": no kvgov_sim block");
  auto engine = engine_numbers.find(sim.value("engine", ""));
  if (engine == engine_numbers.end()) {
    return Status::Unavailable(what + ": answered by \"" + sim.value("engine", "") +
                               "\", which is not a simulated engine");
  }
  sim::RequestOutcome outcome;
  outcome.engine = engine->second;
  outcome.prompt_blocks = sim.value("prompt_blocks", uint64_t{0});
  outcome.hit_blocks = sim.value("hit_blocks", uint64_t{0});
  outcome.prompt_tokens = static_cast<int64_t>(request.tokens.size());
  const Json usage = answer.value("usage", Json::object());
  const Json details = usage.value("prompt_tokens_details", Json::object());
  outcome.computed_tokens = outcome.prompt_tokens -
                            (details.is_object() ? details.value("cached_tokens", int64_t{0}) : 0);
  outcome.prefill_s = sim.value("prefill_s", 0.0);
  outcome.ttft_s = sim.value("ttft_s", 0.0);
  return outcome;
}

// One driving thread's connections, kept alive: kvgov (its control API, or
// its gateway) and, without the gateway, every engine.
class Sender {
 public:
  Sender(const DriveOptions& options, const std::map<std::string, std::string>& engines)
      : options_(options),
        kvgov_(options.gateway_url.empty() ? options.kvgov_url : options.gateway_url) {
    TuneForRequests(kvgov_);
    kvgov_.set_read_timeout(std::chrono::seconds(600));  // a deep modeled queue
    if (!options.gateway_url.empty()) return;
    for (const auto& [worker, url] : engines) {
      auto client = std::make_unique<httplib::Client>(url);
      TuneForRequests(*client);
      client->set_read_timeout(std::chrono::seconds(600));
      engines_.emplace(worker, std::move(client));
    }
  }

  Result<sim::RequestOutcome> Send(const sim::SimRequest& request,
                                   const std::map<std::string, size_t>& engine_numbers) {
    return options_.gateway_url.empty() ? SendRouted(request, engine_numbers)
                                        : SendThroughGateway(request, engine_numbers);
  }

 private:
  Result<sim::RequestOutcome> SendThroughGateway(
      const sim::SimRequest& request, const std::map<std::string, size_t>& engine_numbers) {
    const Json completion = {
        {"model", options_.model}, {"prompt", request.tokens}, {"max_tokens", 1}};
    httplib::Headers headers;
    if (!request.tenant.empty()) headers.emplace("X-Kvgov-Tenant", request.tenant);
    KVGOV_ASSIGN_OR_RETURN(Json answer, PostJson(kvgov_, "POST gateway /v1/completions",
                                                 "/v1/completions", completion, headers));
    return OutcomeOf(answer, "POST gateway /v1/completions", request, engine_numbers);
  }

  Result<sim::RequestOutcome> SendRouted(const sim::SimRequest& request,
                                         const std::map<std::string, size_t>& engine_numbers) {
    Json route = {{"model", options_.model}, {"token_ids", request.tokens}};
    if (!request.tenant.empty()) route["tenant"] = request.tenant;
    KVGOV_ASSIGN_OR_RETURN(Json decision, PostJson(kvgov_, "POST /v1/route", "/v1/route", route));
    const std::string worker = decision.value("worker", "");
    const std::string decision_id = decision.value("decision_id", "");
    auto engine = engines_.find(worker);
    if (engine == engines_.end()) {
      return Status::Unavailable("POST /v1/route chose \"" + worker +
                                 "\", which is not a simulated engine");
    }
    Json completion = {{"model", options_.model},
                       {"prompt", request.tokens},
                       {"max_tokens", 1},
                       {"cache_salt", decision.value("cache_salt", "")}};
    const std::string what = "POST " + worker + " /v1/completions";
    Result<Json> answer = PostJson(*engine->second, what, "/v1/completions", completion);
    // Release the decision whatever the engine said: its load is gone.
    (void)kvgov_.Post("/v1/route/" + decision_id + "/done", "", "application/json");
    KVGOV_RETURN_IF_ERROR(answer.status());
    return OutcomeOf(*answer, what, request, engine_numbers);
  }

  const DriveOptions& options_;
  httplib::Client kvgov_;
  std::map<std::string, std::unique_ptr<httplib::Client>> engines_;
};

}  // namespace

Result<DriveReport> DriveThroughKvgov(std::span<const sim::SimRequest> trace,
                                      const std::map<std::string, std::string>& engines,
                                      const DriveOptions& options) {
  if (engines.empty()) return Status::InvalidArgument("drive: no engines");
  if (!(options.speedup > 0) || options.concurrency <= 0) {
    return Status::InvalidArgument("drive: speedup and concurrency must be positive");
  }
  std::map<std::string, size_t> engine_numbers;
  for (const auto& [worker, url] : engines) engine_numbers.emplace(worker, engine_numbers.size());

  std::vector<std::optional<sim::RequestOutcome>> outcomes(trace.size());
  Counters counters;
  std::atomic<size_t> next{0};
  const Clock::time_point start = Clock::now();
  auto work = [&] {
    Sender sender(options, engines);
    for (size_t i = next.fetch_add(1); i < trace.size(); i = next.fetch_add(1)) {
      const sim::SimRequest& request = trace[i];
      std::this_thread::sleep_until(
          start + std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double>(request.arrival_s / options.speedup)));
      Result<sim::RequestOutcome> outcome = sender.Send(request, engine_numbers);
      if (outcome.ok()) {
        counters.prompt_blocks.fetch_add(outcome->prompt_blocks);
        counters.hit_blocks.fetch_add(outcome->hit_blocks);
        outcomes[i] = *outcome;
      } else {
        counters.Fail(outcome.status().message());
      }
      counters.done.fetch_add(1);
    }
  };
  const size_t threads = std::min<size_t>(static_cast<size_t>(options.concurrency), trace.size());
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) pool.emplace_back(work);

  auto progress = [&] {
    return DriveProgress{counters.done.load(), trace.size(), counters.prompt_blocks.load(),
                         counters.hit_blocks.load(), counters.errors.load()};
  };
  while (counters.done.load() < trace.size()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (options.on_progress) options.on_progress(progress());
  }
  for (std::thread& thread : pool) thread.join();
  if (options.on_progress) options.on_progress(progress());

  std::vector<sim::RequestOutcome> served;
  for (const auto& outcome : outcomes) {
    if (outcome.has_value()) served.push_back(*outcome);
  }
  if (served.empty() && !trace.empty()) {
    return Status::Unavailable("drive: no request got through; first error: " +
                               counters.FirstError());
  }
  DriveReport report;
  report.report = sim::Summarize("kvgov (live)", served, engines.size());
  report.errors = counters.errors.load();
  report.first_error = counters.FirstError();
  return report;
}

}  // namespace kvgov::simfleet
