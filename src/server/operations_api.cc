#include "server/operations_api.h"

#include <httplib.h>

#include <charconv>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvgov/replication/replica.h"
#include "server/route_http.h"
#include "server/route_state.h"

namespace kvgov::server {
namespace {

using Json = nlohmann::json;

// A query parameter as an unsigned integer within [min, max].
Result<uint64_t> QueryNumber(const httplib::Request& request, const char* name, uint64_t fallback,
                             uint64_t min, uint64_t max) {
  if (!request.has_param(name)) return fallback;
  const std::string text = request.get_param_value(name);
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    return Status::InvalidArgument(std::string(name) + ": want an integer in " +
                                   std::to_string(min) + "-" + std::to_string(max) + ", got '" +
                                   text.substr(0, 32) + "'");
  }
  return value;
}

void HandleJournal(const OperationsRoutes& routes, const httplib::Request& request,
                   httplib::Response& response) {
  Result<uint64_t> since = QueryNumber(request, "since", 1, 1, UINT64_MAX);
  Result<uint64_t> limit = QueryNumber(request, "limit", 100, 1, 1000);
  if (!since.ok()) return SendError(response, 400, since.status());
  if (!limit.ok()) return SendError(response, 400, limit.status());
  Result<std::vector<journal::Row>> rows = routes.journal->Read(*since, *limit);
  if (!rows.ok()) return SendError(response, 500, rows.status());
  Json out = Json::array();
  for (const journal::Row& row : *rows) {
    out.push_back({{"seq", row.seq},
                   {"time_ms", row.time_ms},
                   {"kind", row.kind},
                   {"subject", row.subject},
                   {"actor", row.actor},
                   {"origin", row.origin},
                   {"format_version", row.format_version},
                   {"payload", row.payload},
                   {"payload_digest", row.payload_digest},
                   {"prev_hash", row.prev_hash},
                   {"hash", row.hash}});
  }
  // head_hash names the whole chain: replicas that applied the same log
  // report the same one.
  Json body = {{"rows", std::move(out)},
               {"head_seq", routes.journal->head_seq()},
               {"head_hash", routes.journal->head_hash()}};
  if (!rows->empty() && rows->back().seq < routes.journal->head_seq()) {
    body["next_since"] = rows->back().seq + 1;
  }
  SendJson(response, 200, body);
}

}  // namespace

void RegisterOperationsApi(httplib::Server& http, const OperationsRoutes& routes) {
  using auth::Role;
  // Liveness stays open: probes carry no token. (So does /v1/issuer, below.)
  http.Get("/healthz", [](const httplib::Request&, httplib::Response& response) {
    SendJson(response, 200, {{"status", "ok"}});
  });
  // Readiness: a replica that has not yet applied the governance log may
  // route around no quarantine the fleet holds, so it takes no traffic
  // until it has. A single node is ready once it serves (recovery runs
  // before the listener opens).
  http.Get("/readyz", [routes](const httplib::Request&, httplib::Response& response) {
    if (routes.replica != nullptr && routes.replica->log_reset()) {
      SendJson(response, 503,
               {{"status", "log_reset"},
                {"detail",
                 "the governance log on Redis is not the one this replica followed "
                 "(Redis lost its data): restore Redis from its backup"}});
      return;
    }
    if (routes.replica != nullptr && !routes.replica->caught_up()) {
      SendJson(response, 503,
               {{"status", "catching_up"},
                {"detail", routes.replica->connected()
                               ? "applying the governance log up to its end"
                               : "the governance log on Redis is not reachable yet"}});
      return;
    }
    SendJson(response, 200, {{"status", "ready"}});
  });
  http.Get("/v1/config", GuardFleet(routes.access, Role::kAdmin,
                                    [routes](const httplib::Request&, httplib::Response& response) {
                                      SendJsonText(response, 200, routes.config_json());
                                    }));
  // Public, as /healthz is: anyone verifying a deletion certificate
  // offline needs this key, and it is the public half only
  // (docs/formats/tokens.md).
  http.Get("/v1/issuer", [routes](const httplib::Request&, httplib::Response& response) {
    SendJson(response, 200,
             {{"algorithm", "ed25519"},
              {"key_id", routes.issuer->key_id()},
              {"public_key", routes.issuer->public_key_hex()}});
  });
  http.Get("/v1/journal",
           GuardFleet(routes.access, Role::kRead,
                      [routes](const httplib::Request& request, httplib::Response& response) {
                        HandleJournal(routes, request, response);
                      }));
  // The whole chain, as `kvgov journal verify` checks it, while kvgov runs.
  http.Get("/v1/journal/verify",
           GuardFleet(routes.access, Role::kRead,
                      [routes](const httplib::Request&, httplib::Response& response) {
                        Result<journal::VerifyReport> report =
                            routes.chain_check->Verify(*routes.store, routes.journal->head_seq());
                        if (!report.ok()) return SendError(response, 500, report.status());
                        Json body = {{"ok", !report->first_broken_seq.has_value()},
                                     {"rows", report->rows},
                                     {"head_seq", routes.journal->head_seq()},
                                     {"head_hash", routes.journal->head_hash()}};
                        // Rows a replica that rejoined from a snapshot never
                        // had; every other replica holds them.
                        body["adopted"] = Json::array();
                        for (const journal::AdoptedSpan& span : report->adopted) {
                          body["adopted"].push_back({{"first_seq", span.first_seq},
                                                     {"last_seq", span.last_seq},
                                                     {"hash", span.hash},
                                                     {"source", span.source}});
                        }
                        if (report->first_broken_seq.has_value()) {
                          body["first_broken_seq"] = *report->first_broken_seq;
                          body["problem"] = report->problem;
                        }
                        SendJson(response, 200, body);
                      }));
  http.Get("/metrics", GuardFleet(routes.access, Role::kRead,
                                  [routes](const httplib::Request&, httplib::Response& response) {
                                    response.set_content(
                                        routes.registry->Render(),
                                        "text/plain; version=0.0.4; charset=utf-8");
                                  }));
}

}  // namespace kvgov::server
