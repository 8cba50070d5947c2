#include "server/prefix_diagnostics_api.h"

#include <httplib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kvgov/codec/lint_api.h"
#include "kvgov/codec/prefix_diagnostics_api.h"
#include "kvgov/services/engines.h"
#include "kvgov/services/prefix_watch.h"
#include "server/access.h"
#include "server/route_http.h"

namespace kvgov::server {

namespace {

size_t CommonPrefix(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first -
                             a.begin());
}

// POST /v1/lint/prompt: the rules from the requests' text, the token
// figures from the engine's tokenizer (each request as sent and as it
// would be with the rules kept).
void HandleLint(const services::Engines& engines, JsonLimits body_limits,
                const httplib::Request& request, httplib::Response& response) {
  if (!RequireJsonContentType(request, response)) return;
  Result<std::vector<LintedRequest>> requests = DecodeLintRequestJson(request.body, body_limits);
  if (!requests.ok()) return SendBodyError(response, requests.status());
  std::vector<prompts::LintRequest> lint;
  for (const LintedRequest& r : *requests) lint.push_back(r.lint);
  LintAnswer answer;
  answer.findings = prompts::LintPrompts(lint);
  std::vector<std::vector<int64_t>> sent, fixed;
  for (size_t i = 0; i < requests->size(); ++i) {
    const LintedRequest& r = (*requests)[i];
    for (auto [body, out] :
         {std::pair{&r.chat_body, &sent}, std::pair{&r.fixed_chat_body, &fixed}}) {
      Result<std::vector<int64_t>> tokens = engines.TokenizeChat(r.model, *body);
      if (!tokens.ok()) {
        const StatusCode code = tokens.status().code();
        const std::string where = "$.requests[" + std::to_string(i) + "]: ";
        if (code == StatusCode::kNotFound) {
          return SendError(response, 404, Status::NotFound(where + tokens.status().message()));
        }
        if (code == StatusCode::kInvalidArgument || code == StatusCode::kResourceExhausted) {
          return SendError(response, 400,
                           Status::InvalidArgument(where + tokens.status().message()));
        }
        return SendError(response, 502,
                         Status::Unavailable(where + "the engine could not tokenize it: " +
                                             tokens.status().message()));
      }
      out->push_back(*std::move(tokens));
    }
    answer.formats.push_back(r.format);
    answer.prompt_tokens.push_back(static_cast<int64_t>(sent.back().size()));
    answer.stable_prefix_tokens.push_back(
        static_cast<int64_t>(CommonPrefix(sent.back(), fixed.back())));
  }
  if (sent.size() >= 2) {
    size_t shared = sent[0].size(), shared_fixed = fixed[0].size();
    for (size_t i = 1; i < sent.size(); ++i) {
      shared = std::min(shared, CommonPrefix(sent[0], sent[i]));
      shared_fixed = std::min(shared_fixed, CommonPrefix(fixed[0], fixed[i]));
    }
    answer.shared_prefix_tokens = static_cast<int64_t>(shared);
    answer.shared_prefix_tokens_if_fixed = static_cast<int64_t>(shared_fixed);
  }
  response.status = 200;
  response.set_content(EncodeLintAnswerJson(answer), "application/json");
}

}  // namespace

void RegisterPrefixDiagnosticsApi(httplib::Server& http, const RouteAccess& access,
                                  const services::PrefixWatch& watch,
                                  const services::Engines& engines) {
  const JsonLimits body_limits = access.body_limits;
  http.Post("/v1/lint/prompt",
            Guard(access, auth::Role::kRead,
                  [&engines, body_limits](const httplib::Request& request,
                                          httplib::Response& response, const auth::Principal&) {
                    HandleLint(engines, body_limits, request, response);
                  }));
  http.Get("/v1/diagnostics/prefix",
           Guard(access, auth::Role::kRead,
                 [&watch, &engines](const httplib::Request& request, httplib::Response& response,
                                    const auth::Principal& caller) {
                   const prompts::CacheBreakerDetector* detector = watch.detector();
                   if (detector == nullptr) {
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
                   std::vector<prompts::Finding> findings = detector->Findings(tenant);
                   if (request.has_param("model")) {
                     const std::string model = request.get_param_value("model");
                     std::erase_if(findings, [&](const prompts::Finding& finding) {
                       return finding.model != model;
                     });
                   }
                   // The few tokens a tenant allowed kvgov to keep, as text.
                   std::vector<std::optional<PrefixFindingContext>> contexts(findings.size());
                   for (size_t i = 0; i < findings.size(); ++i) {
                     if (findings[i].context_tokens.empty()) continue;
                     Result<std::string> text =
                         engines.Detokenize(findings[i].model, findings[i].context_tokens);
                     contexts[i] = text.ok() ? PrefixFindingContext{*text, ""}
                                             : PrefixFindingContext{"", text.status().message()};
                   }
                   response.status = 200;
                   response.set_content(
                       EncodePrefixDiagnosticsJson(findings, detector->options().granule_tokens,
                                                   detector->families(), contexts),
                       "application/json");
                 }));
}

}  // namespace kvgov::server
