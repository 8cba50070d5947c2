#include "server/prefix_diagnostics.h"

#include <httplib.h>

#include <string>
#include <vector>

#include "kvgov/codec/prefix_diagnostics_api.h"
#include "kvgov/log/log.h"
#include "server/access.h"
#include "server/daemon.h"
#include "server/http_api.h"

namespace kvgov::server {

void ObservePrompt(Daemon& daemon, std::string_view model, std::string_view tenant,
                   std::span<const int64_t> tokens) {
  if (!daemon.breakers) return;
  const prompts::Observation seen = daemon.breakers->Observe(model, tenant, tokens,
                                                             WallClockMillis());
  if (!seen.finding) return;
  const prompts::Finding& finding = *seen.finding;
  if (finding.avoidable_tokens > 0) {
    daemon.prefix_avoidable_tokens
        ->WithLabels({std::string(model), std::string(tenant),
                      std::string(prompts::ToString(finding.kind))})
        ->Add(finding.avoidable_tokens);
  }
  if (seen.new_finding) {
    log::Line(log::Level::kWarn, "prefix.breaker_found")
        .Field("model", model)
        .Field("tenant", tenant)
        .Field("family", finding.family)
        .Field("kind", prompts::ToString(finding.kind))
        .Field("position_tokens", uint64_t{finding.position_tokens})
        .Field("length_tokens", uint64_t{finding.length_tokens})
        .Field("avoidable_tokens", uint64_t{finding.avoidable_tokens});
  }
}

void RegisterPrefixDiagnosticsApi(httplib::Server& http, Daemon& daemon) {
  http.Get("/v1/diagnostics/prefix",
           Guard(daemon, auth::Role::kRead,
                 [&daemon](const httplib::Request& request, httplib::Response& response,
                           const auth::Principal& caller) {
                   if (!daemon.breakers) {
                     return SendError(response, 404,
                                      Status::NotFound("prefix diagnostics are off "
                                                       "(serve --prefix-diagnostics=false)"));
                   }
                   std::optional<std::string> tenant;
                   if (request.has_param("tenant")) tenant = request.get_param_value("tenant");
                   // A tenant-bound token sees its own tenant's findings only.
                   if (!caller.tenant.empty()) {
                     if (tenant && *tenant != caller.tenant) {
                       return SendError(response, 403,
                                        Status::PermissionDenied(
                                            "token '" + caller.token + "' is bound to tenant '" +
                                            caller.tenant + "'; it reads that tenant's only"));
                     }
                     tenant = caller.tenant;
                   }
                   std::vector<prompts::Finding> findings = daemon.breakers->Findings(tenant);
                   if (request.has_param("model")) {
                     const std::string model = request.get_param_value("model");
                     std::erase_if(findings, [&](const prompts::Finding& finding) {
                       return finding.model != model;
                     });
                   }
                   response.status = 200;
                   response.set_content(
                       EncodePrefixDiagnosticsJson(findings,
                                                   daemon.breakers->options().granule_tokens,
                                                   daemon.breakers->families()),
                       "application/json");
                 }));
}

}  // namespace kvgov::server
