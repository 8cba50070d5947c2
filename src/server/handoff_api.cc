#include "server/handoff_api.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "kvgov/services/handoffs.h"
#include "server/route_http.h"

namespace kvgov::server {

void RegisterHandoffApi(httplib::Server& http, const RouteAccess& access,
                        const services::HandoffLog& log) {
  http.Get("/v1/handoffs",
           Guard(access, auth::Role::kRead,
                 [&log](const httplib::Request&, httplib::Response& response,
                        const auth::Principal& caller) {
                   nlohmann::json out = nlohmann::json::array();
                   for (const gateway::HandoffRecord& r : log.NewestFirst(caller.tenant)) {
                     out.push_back({{"request_id", r.request_id},
                                    {"model", r.model},
                                    {"tenant", r.tenant},
                                    {"protocol", r.protocol},
                                    {"prefill",
                                     {{"worker", r.prefill_worker},
                                      {"attempts", r.prefill_attempts},
                                      {"overlap_blocks", r.prefill_overlap_blocks}}},
                                    {"decode",
                                     {{"worker", r.decode_worker},
                                      {"overlap_blocks", r.decode_overlap_blocks},
                                      {"pulled_blocks", r.pulled_blocks}}},
                                    {"prompt_blocks", r.prompt_blocks},
                                    {"lease_id", r.lease_id},
                                    {"outcome", std::string(ToString(r.outcome))},
                                    {"error", r.error},
                                    {"started_ms", r.started_ms},
                                    {"prefill_done_ms", r.prefill_done_ms},
                                    {"first_token_ms", r.first_token_ms}});
                   }
                   SendJson(response, 200, {{"handoffs", std::move(out)}});
                 }));
}

}  // namespace kvgov::server
